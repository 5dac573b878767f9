"""duo round mechanics with fake backends: edge cases of acceptance, stopping, overlap and
the draft budget."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from core.budget import DraftBudget
from core.engine import GenConfig, generate
from core.sampling import SamplingConfig
from tests.fakes import FakeDrafter, FakeTarget, ScriptedLearned, decode, fake_profile

V = 8
PROMPT = [0]


def chain(vocab=V) -> np.ndarray:
    """Target: after token t comes t+1 (mod vocab), with high probability."""
    P = np.full((vocab, vocab), 0.01)
    for t in range(vocab):
        P[t, (t + 1) % vocab] = 1.0
    return P / P.sum(axis=1, keepdims=True)


def run(method, drafter, target=None, prompt=PROMPT, learned=None, **kw):
    target = target or FakeTarget(chain())
    kw.setdefault("max_new_tokens", 20)
    cfg = GenConfig(method=method, **kw)
    events = list(generate(target, drafter, prompt, cfg, decode, fake_profile(),
                           learned=learned))
    return [t for e in events for t in e.tokens], events[-1].stats, events


def vanilla(prompt=PROMPT, **kw):
    return run("vanilla", None, prompt=prompt, **kw)[0]


def wrong_at(position: int):
    """A scripted draft that proposes the right next token except at absolute `position`."""
    def script(tokens):
        nxt = (tokens[-1] + 1) % V
        return (nxt + 3) % V if len(tokens) == position else nxt
    return script


@pytest.mark.parametrize("method", ["sps", "duo"])
@pytest.mark.parametrize("sequential", [True, False])
def test_rejection_at_first_and_last_draft_token(method, sequential):
    expected = vanilla()
    rejected = 0
    for pos in range(1, 12):  # every position of the first chunks: first, inside, last
        # the budget sees the profile's times (ScriptedLearned): the lookup's and the
        # pre-draft's pricing, not the clock, pick the rounds
        got, stats, _ = run(method, FakeDrafter(chain(), script=wrong_at(pos)), gamma=4,
                            sequential=sequential, learned=ScriptedLearned())
        assert got == expected, f"rejection at {pos}"
        rejected += stats["accepted"] < stats["drafted"]
    assert rejected >= 6  # most wrong tokens reached the verifier (others were guesses)


@pytest.mark.parametrize("method", ["sps", "duo"])
def test_eos_inside_a_draft_chunk_stops_there(method):
    target = FakeTarget(chain(), eos_ids={6})
    expected = run("vanilla", None, target=FakeTarget(chain(), eos_ids={6}))[0]
    got, stats, events = run(method, FakeDrafter(chain()), target=target, gamma=8)
    assert got == expected == [1, 2, 3, 4, 5]
    assert stats["stop_reason"] == "eos" and events[-1].done


@pytest.mark.parametrize("method", ["sps", "duo"])
@pytest.mark.parametrize("max_new", [1, 2, 3, 7, 13])
def test_max_tokens_reached_mid_chunk(method, max_new):
    got, stats, _ = run(method, FakeDrafter(chain()), gamma=5, max_new_tokens=max_new)
    assert got == vanilla(max_new_tokens=max_new)
    assert len(got) == max_new == stats["new_tokens"]


def test_never_emits_an_unverified_token():
    """Every emitted token was scored by the target: the target's cache covers them all."""
    target = FakeTarget(chain())
    got, _, _ = run("duo", FakeDrafter(chain()), target=target, gamma=4, max_new_tokens=17)
    # all but the last emitted token went through a target forward; the last one is the
    # target's own sample from the final forward
    assert target.cache[len(PROMPT):len(PROMPT) + len(got) - 1] == got[:-1]
    assert len(got) == 17


def test_stop_string_ends_generation():
    got, stats, events = run("duo", FakeDrafter(chain()), gamma=4, stop_strings=("4 5",))
    text = "".join(e.text for e in events)
    assert "4 5" not in text and stats["stop_reason"] == "stop_string"


@pytest.mark.parametrize("method", ["vanilla", "sps", "duo"])
def test_stop_string_cuts_the_ids_too(method):
    """The ids end with the one that spells the kept text's end ("1 2 3 ": the fake decode
    joins with spaces, so 4 brings the last space), whatever chunk the stop string arrived
    in; new_tokens counts them."""
    drafter = None if method == "vanilla" else FakeDrafter(chain())
    got, stats, events = run(method, drafter, gamma=6, stop_strings=("4 5",))
    assert got == [1, 2, 3, 4] and stats["new_tokens"] == 4
    assert "".join(e.text for e in events) == "1 2 3 "


class Meeting:
    """Which of the draft and the target is inside its call; `wait`: each waits (up to 60 s,
    a guard: it returns as the other arrives) for the other to be inside too, so overlapped
    rounds meet whatever the clock or the machine's load says."""

    def __init__(self, wait: bool):
        self.wait, self.met, self.apart = wait, 0, 0
        self.draft, self.target = threading.Event(), threading.Event()

    def enter(self, mine: threading.Event, other: threading.Event) -> None:
        mine.set()
        if (other.wait(60) if self.wait else other.is_set()):
            self.met += 1
        else:
            self.apart += 1

    def inside(self, mine: threading.Event, other: threading.Event, call):
        """`call()` with `mine` set for its duration, counted as met or apart."""
        self.enter(mine, other)
        try:
            return call()
        finally:
            mine.clear()

    def target_side(self):
        meeting = self

        class Target(FakeTarget):
            def score(self, *a, **k):
                return meeting.inside(meeting.target, meeting.draft,
                                      lambda: super(Target, self).score(*a, **k))
        return Target(chain())

    def draft_side(self):
        meeting = self

        class Drafter(FakeDrafter):
            def propose(self, *a, **k):
                return meeting.inside(meeting.draft, meeting.target,
                                      lambda: super(Drafter, self).propose(*a, **k))
        return Drafter(chain())


def test_duo_drafts_while_the_target_verifies():
    """Overlap without clocks: every round of duo has the draft and the target inside their
    calls at once; the sequential switch never has (model drafts only: the subject)."""
    overlapped = Meeting(wait=True)
    got, _, _ = run("duo", overlapped.draft_side(), target=overlapped.target_side(), gamma=3,
                    lookup="off")
    assert got == vanilla() and overlapped.met >= 2 * 5 and overlapped.apart == 0
    apart = Meeting(wait=False)
    got, _, _ = run("duo", apart.draft_side(), target=apart.target_side(), gamma=3,
                    sequential=True, lookup="off")
    assert got == vanilla() and apart.met == 0 and apart.apart >= 2 * 5


def test_budget_balances_draft_and_verify():
    prof = fake_profile(draft_s=0.010, verify_base=0.040, verify_per_token=0.002)
    b = DraftBudget(prof, overlap=True, alpha=0.8)
    # drafting g+1 tokens (10 ms each) fits verifying g+1 (40 + 2(g+1) ms) up to g = 4
    assert b.balanced_gamma() == 4
    assert 3 <= b.gamma <= 6
    assert "balance" in b.explain()["reason"]
    fast_draft = DraftBudget(fake_profile(draft_s=0.002), overlap=True, alpha=0.9)
    assert fast_draft.gamma > b.gamma  # a cheaper draft earns a longer chunk


def test_budget_adapts_to_acceptance_and_times():
    b = DraftBudget(fake_profile(draft_s=0.004), overlap=True, alpha=0.9)
    high = b.gamma
    for _ in range(20):
        b.observe(drafted=high, accepted=0)
    assert b.gamma < high  # acceptance collapsed: shorter drafts
    b2 = DraftBudget(fake_profile(draft_s=0.004), overlap=True, alpha=0.9)
    for _ in range(20):  # the draft got 3x slower than profiled (longer context)
        b2.observe(drafted=4, accepted=4, draft_s=0.048, draft_n=4)
    assert b2.gamma < high


def test_verify_cost_is_learned_per_length():
    """Each length bucket (1, 2, 3-4, ..., 17-32) learns its own scale of the profile; a
    length not yet measured takes the scale of all verifies; a restored state keeps them."""
    prof = fake_profile(draft_s=0.004, verify_base=0.040, verify_per_token=0.002)
    b = DraftBudget(prof, overlap=True, alpha=0.9)
    for _ in range(30):
        b.observe(4, 4, verify_s=2 * prof.verify(20), verify_n=20)
        b.observe(1, 1, verify_s=prof.verify(2), verify_n=2)
    assert b.verify_s(32) == pytest.approx(2 * prof.verify(32), rel=0.01)  # 17-32: measured 2x
    assert b.verify_s(2) == pytest.approx(prof.verify(2), rel=0.01)
    assert b.verify_s(6) == pytest.approx(b.verify_scale * prof.verify(6))  # 5-8: not measured
    assert b.explain()["length_scales"] == {"2": 1.0, "17-32": 2.0}
    again = DraftBudget(prof, overlap=True)
    again.restore(b.state())
    assert again.verify_s(32) == b.verify_s(32) and again.verify_s(2) == b.verify_s(2)


def test_sampled_duo_is_reproducible_with_a_seed():
    s = SamplingConfig(1.0)
    P = chain() * 0 + 1.0 / V
    a = run("duo", FakeDrafter(P), target=FakeTarget(P), gamma=3, sampling=s, seed=7)[0]
    b = run("duo", FakeDrafter(P), target=FakeTarget(P), gamma=3, sampling=s, seed=7,
            sequential=True)[0]
    slow = FakeTarget(P, delay=(0.003, 0.0))  # other timings: a fixed gamma fixes the rounds
    c = run("duo", FakeDrafter(P), target=slow, gamma=3, sampling=s, seed=7)[0]
    assert a == b == c


def test_branched_chunks_do_not_look_like_a_slow_draft():
    """A k-sequence chunk of n tokens costs n batched steps: the budget must read it as
    n x step_ratio(k) single tokens, not as a draft that got k times slower."""
    from core.backends import Draft, Proposal
    from core.engine import Run
    from core.metrics import RoundRecord
    from core.scheduler import Drafted, DraftTiming

    prof = fake_profile(draft_s=0.005)
    prof.draft_step_s = {1: 0.005, 2: 0.012}
    budget = DraftBudget(prof, overlap=True, alpha=0.9)
    run_ = Run(FakeTarget(chain()), PROMPT, GenConfig(method="duo"), decode)
    chunk = Drafted(Proposal(Draft(tokens=[1, 2, 3, 4]), alternatives=[Draft(tokens=[5, 6])]),
                    DraftTiming(busy_s=4 * 0.012))
    rec = RoundRecord(0, 0.05, (0, 0.048), (0, 0.05), 4, 4)
    for _ in range(10):
        run_.learn(budget, run_.telemetry.lesson(budget, rec, 5, 5, chunk))
    assert abs(budget.draft_scale - 1.0) < 0.01
    single = DraftBudget(prof, overlap=True, alpha=0.9)
    for _ in range(10):
        one = Drafted(Proposal(Draft(tokens=[1, 2, 3, 4])), DraftTiming(busy_s=4 * 0.012))
        run_.learn(single, run_.telemetry.lesson(single, rec, 5, 5, one))
    assert single.draft_scale > 2.0  # the same time for one sequence: a slower draft


@pytest.mark.parametrize("method", ["vanilla", "sps", "duo"])
def test_stop_request_ends_with_stats(method):
    drafter = None if method == "vanilla" else FakeDrafter(chain())
    cfg = GenConfig(method=method, max_new_tokens=50, gamma=3)
    events = []
    for ev in generate(FakeTarget(chain()), drafter, PROMPT, cfg, decode, fake_profile(),
                       stop=lambda: len(events) >= 2):
        events.append(ev)
    tokens = [t for e in events for t in e.tokens]
    last = events[-1]
    assert last.done and last.stats["stop_reason"] == "stopped"
    assert last.stats["new_tokens"] == len(tokens) < 50
    assert len(events) == 3 and not last.tokens  # two rounds, then the closing event


def test_sps_s_first_token_is_the_target_s_own_before_the_draft_runs():
    """sps's first round is the target's prefill alone (its first token as soon as
    vanilla's); the draft prefills at its first chunk, after that token, at its own count."""
    drafter = FakeDrafter(chain())
    drafter.set_threads(1)
    tokens, stats, _ = run("sps", drafter, gamma=3)
    assert tokens == vanilla() and drafter.thread_log[1:] == []
    assert drafter.calls[0] == (len(PROMPT) + 1, 3)
    assert stats["rounds_log"][0]["source"] == "plain"


def test_duo_s_draft_prefills_beside_the_target_s_first_forward():
    """A short prompt: duo's first round verifies no draft while the worker prefills and
    drafts its first chunk from the prompt (the target's prefill and the draft's side by
    side)."""
    drafter = FakeDrafter(chain())
    tokens, stats, _ = run("duo", drafter, gamma=3, lookup="off")
    assert tokens == vanilla()
    assert drafter.calls[0][0] == len(PROMPT) and drafter.calls[0][1] > 0
    assert stats["rounds_log"][0]["drafted"] == 0


def test_a_long_prompt_s_draft_prefill_runs_beside_the_target_s_rounds():
    """A prompt whose draft prefill the profile prices above a forward: the first job is the
    prefill alone, and the target goes on without a draft until it is done."""
    drafter = FakeDrafter(chain())
    long_prompt = [i % V for i in range(40)]  # 40 x 10 ms x 0.3 > the 42 ms forward
    tokens, stats, _ = run("duo", drafter, gamma=3, lookup="off", prompt=long_prompt)
    assert tokens == vanilla(long_prompt)
    assert drafter.calls[0] == (len(long_prompt), 0)
    assert stats["rounds_log"][0]["drafted"] == 0
