"""The pair loader's bookkeeping on the real smol-self pair."""
from __future__ import annotations

import models.profiler as profiler
from core.budget import Profile


def test_remeasure_profiles_once_per_thread_split(smol_pair, monkeypatch):
    asked = []

    def fake_load(name, drafter, target, threads, remeasure=False, progress=None):
        asked.append((threads, remeasure))
        return Profile(draft_token_s=0.005, verify_s=[0.02] * 32)

    monkeypatch.setattr(profiler, "load_or_measure", fake_load)
    monkeypatch.setattr(smol_pair.opts, "remeasure", True)
    monkeypatch.setattr(smol_pair, "_remeasured", set())
    for _ in range(3):
        smol_pair.ensure_profile("duo")
    assert [again for _, again in asked] == [True, False, False]
    smol_pair.ensure_profile("duo", remeasure=True)  # an explicit request always measures
    assert asked[-1][1] is True
