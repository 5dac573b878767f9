"""duo's choice between overlapped rounds and rounds in turns (core/turns.py): the budget's
price until both ways have realized a rate, then the faster way, the other tried every
PROBE_EVERY choices; the rates carried to the next generation with the budget."""
from __future__ import annotations

import pytest

from core.budget import DraftBudget
from core.turns import PROBE_EVERY, Turns
from tests.fakes import fake_profile


def test_the_price_decides_until_both_ways_have_a_rate():
    turns = Turns()
    assert turns.choose(0.0, 10, priced_serial=True)
    assert turns.choose(1.0, 40, priced_serial=False) is False  # the serial episode: 30 tok/s
    assert turns.rates == {"serial": pytest.approx(30.0)}
    assert turns.choose(2.0, 60, priced_serial=True)  # overlap made 20 tok/s
    assert turns.rates == {"serial": pytest.approx(30.0), "overlap": pytest.approx(20.0)}


def test_the_faster_way_wins_and_the_other_is_tried_every_probe_every_choices():
    turns = Turns({"serial": 50.0, "overlap": 40.0})
    ways = [turns.choose(float(i), 0, priced_serial=False) for i in range(2 * PROBE_EVERY)]
    assert ways.count(False) == 2 and not ways[PROBE_EVERY - 1] and not ways[-1]
    for _ in range(6):  # overlap episodes now realize more
        turns.observe("overlap", 80.0)
    assert turns.choose(100.0, 0, priced_serial=True) is False


def test_an_episode_without_tokens_or_time_keeps_no_rate():
    turns = Turns()
    turns.choose(5.0, 10, priced_serial=True)
    turns.choose(5.0, 12, priced_serial=True)  # no time passed
    turns.choose(6.0, 12, priced_serial=True)  # no token
    assert turns.rates == {}


def test_the_rates_go_on_to_the_next_generation_with_the_budget():
    profile = fake_profile()
    first = DraftBudget(profile)
    first.turns.observe("serial", 42.0)
    second = DraftBudget(profile)
    second.restore(first.state())
    assert second.turns.rates == {"serial": 42.0}
    assert second.explain()["turns"] == {"serial": 42.0}
