"""Automatic choices survive a busy machine, with injected timings (never real ones): a
measurement cached with the load it was taken under is taken again once the machine is
quieter, and the budget's choices recover; `--remeasure` always measures; the
plain-decoding fallback probes across generations."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

import models.fit.profiler as profiler
from core.budget import PROBE_EVERY, DraftBudget, Profile
from core.learned import Learned

LOADED = Profile(draft_token_s=0.080, verify_s=[0.060 + 0.002 * n for n in range(32)])
QUIET = Profile(draft_token_s=0.005, verify_s=[0.050 + 0.002 * n for n in range(32)])
DRAFTER = SimpleNamespace(name="draft.gguf")
TARGET = SimpleNamespace(device="cpu", dtype="float32", quant="none", path="eager")


@pytest.fixture
def machine(monkeypatch, tmp_path):
    """A cache in tmp_path, no real load readings, and the load `now` a test sets."""
    monkeypatch.setenv("DUO_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(profiler, "_cpu_sample", lambda: None)
    state = SimpleNamespace(now=0.05, measured=[], cache=tmp_path)
    monkeypatch.setattr(profiler, "machine_load", lambda seconds=0.25: state.now)
    monkeypatch.setattr(profiler, "_PROFILES_LOOKED_UP", set())  # a fresh process

    def measure(drafter, target, *a, **k):
        state.measured.append("profile")
        return QUIET
    monkeypatch.setattr(profiler, "measure", measure)
    return state


def seed_profile(machine, profile: Profile, load: float) -> None:
    key = f"v6|{profiler.machine_key()}|pair|draft.gguf|cpu|float32|none|eager|draft1|target1"
    entry = {key: {"value": profile.to_dict(), "load": load}}
    (machine.cache / "profiles.json").write_text(json.dumps(entry))


def new_process() -> None:
    profiler._PROFILES_LOOKED_UP.clear()


def load(remeasure=False) -> Profile:
    return profiler.load_or_measure("pair", DRAFTER, TARGET, (1, 1), remeasure)


def test_a_profile_taken_under_load_is_taken_again_once_quiet_and_the_budget_recovers(machine):
    seed_profile(machine, LOADED, load=0.6)
    assert DraftBudget(LOADED).gamma == 0  # measured while busy: plain decoding looked best
    machine.now = 0.5  # still busy at the start: the cached profile stays
    assert load().draft_token_s == LOADED.draft_token_s and machine.measured == []
    machine.now = 0.05  # quiet in the same process: its drift check decides, not the load
    assert load().draft_token_s == LOADED.draft_token_s and machine.measured == []
    new_process()  # the next start, quiet
    profile = load()
    assert machine.measured == ["profile"] and profile.draft_token_s == QUIET.draft_token_s
    assert DraftBudget(profile).gamma > 0  # drafting again
    assert load().draft_token_s == QUIET.draft_token_s and machine.measured == ["profile"]


def test_a_quiet_profile_is_kept_and_remeasure_always_measures(machine):
    seed_profile(machine, QUIET, load=0.1)
    machine.now = 0.0
    assert load().draft_token_s == QUIET.draft_token_s and machine.measured == []
    load(remeasure=True)
    assert machine.measured == ["profile"]


def test_draft_threads_timed_under_load_are_timed_again_once_quiet(machine, monkeypatch):
    timed = []
    monkeypatch.setattr(profiler, "_time_threads",
                        lambda drafter, candidates: timed.append(1) or {"1": 0.004, "2": 0.002})
    key = f"v4|{profiler.machine_key()}|pair|draft.gguf|cap2"
    busy = {key: {"value": {"1": 0.004, "2": 0.009}, "load": 0.5}}
    (machine.cache / "draft_threads.json").write_text(json.dumps(busy))
    machine.now = 0.45
    assert profiler.pick_draft_threads("pair", DRAFTER, 2) == {1: 0.004, 2: 0.009}
    machine.now = 0.1
    assert profiler.pick_draft_threads("pair", DRAFTER, 2) == {1: 0.004, 2: 0.002}
    assert profiler.pick_draft_threads("pair", DRAFTER, 2, remeasure=True) and len(timed) == 2


def test_interleaved_takes_each_probe_s_least_time_round_by_round():
    order, clock = [], iter([9, 5, 3, 7, 4, 6, 8, 2])

    def probe(name):
        order.append(name)
        return next(clock)
    best = profiler.interleaved({"a": lambda: probe("a"), "b": lambda: probe("b")}, rounds=3)
    assert order == ["a", "b"] * 4 and best == {"a": 3, "b": 2}  # the first round: warm-up


def test_plain_decoding_probes_across_short_generations():
    """A server that fell back to plain decoding under load drafts again within PROBE_EVERY
    rounds, counted across generations of 3 rounds each (injected times, no clock)."""
    learned, gammas = Learned(), []
    for _ in range(2 * PROBE_EVERY // 3):
        budget = learned.budget("duo", LOADED, overlap=True, fixed=None)
        for _ in range(3):
            gammas.append(budget.gamma)
            budget.observe(0, 0, verify_s=LOADED.verify(1), verify_n=1)
        learned.keep("duo", budget)
    assert gammas[0] == 0 and 1 <= sum(g > 0 for g in gammas) <= 3
