"""duo in turns (core/turns.py): lossless on fakes (greedy with each lookup mode, the coupled
sampler's seeded text, the rejection sampler's law by chi-square) and on the real pair; a
round the lookup takes drafts nothing; the choice priced from both schedules' profiles at the
newest acceptance; the loader's schedule (asked for, overlap on a GPU, priced where the
cores are shared) and the refusals of what cannot be honoured."""
from __future__ import annotations

import json

import pytest

from app.openai_io import ApiError, ChatRequest, parse
from app.view import final_panel
from core.budget import DraftBudget, Profile
from core.engine import GenConfig
from core.learned import Learned
from core.sampling import SamplingConfig
from core.turns import TURNS, choose
from models.fit.placement import Placement
from tests.fakes import FakeDrafter
from tests.profiles import fixed_profile
from tests.test_api_lookup import GOOD
from tests.test_lookup_lossless import COPY, P, run
from tests.test_sampling_lossless import (N_TOKENS, P_TARGET, Q_DRAFT, assert_matches,
                                          exact_joint, sample_joint)
from tests.test_seeded import texts


@pytest.mark.parametrize("lookup", ["off", "auto", "on"])
@pytest.mark.parametrize("drafter", ["unlike", "like"])
def test_greedy_in_turns_is_vanilla(lookup, drafter):
    ref = run("vanilla")[0]
    ids, sources, stats = run("duo", lookup, drafter=None if drafter == "unlike" else
                              FakeDrafter(P), schedule="turns")
    assert ids == ref and len(sources) == len(ids)
    kinds = {r["source"] for r in stats["rounds_log"]}
    if lookup == "off":
        assert kinds <= {"model", "plain"} and "lookup" not in sources
    else:
        assert stats["lookup"]["accepted"] > 0 and "lookup" in sources
        assert kinds & {"lookup", "fused"}
    if drafter == "like" and lookup != "on":  # on: the lookup's whenever it proposes
        assert "draft" in sources  # the model's chunks pass too


def test_a_round_the_lookup_takes_drafts_nothing():
    """lookup 'on': the index's continuation is verified alone, the draft idle that round."""
    _, _, stats = run("duo", "on", drafter=FakeDrafter(P), schedule="turns")
    alone = [r for r in stats["rounds_log"] if r["source"] == "lookup"]
    assert alone and all(r["draft_span"][0] == r["draft_span"][1] for r in alone)


def test_a_long_prompts_draft_prefill_waits_for_its_first_chunk(monkeypatch):
    """A long prompt (over TOGETHER new tokens): without the lookup the draft prefills
    before the first verify, as sps's; with it on, the lookup's rounds go first and the
    prefill comes at the first model chunk. A short prompt's draft prefills first."""
    import core.turns as turns

    calls, prefill = [], turns.prefill_draft
    monkeypatch.setattr(turns, "prefill_draft",
                        lambda run, *a: calls.append(len(run.ctx)) or prefill(run, *a))
    long = COPY * (turns.TOGETHER // len(COPY) + 1)
    for prompt, lookup, first in ((long, "off", True), (long, "on", False),
                                  (COPY, "on", True)):
        calls.clear()
        ids, _, stats = run("duo", lookup, prompt=prompt, schedule="turns", prefill_threads=2)
        assert ids == run("vanilla", prompt=prompt)[0]
        if first:
            assert calls == [len(prompt)]
        else:
            assert stats["rounds_log"][0]["source"] == "lookup"
            assert all(n > len(prompt) for n in calls)


def test_seeded_text_in_turns_is_vanillas():
    sampling = SamplingConfig(1.0)
    want = texts(sampling, method="vanilla")
    for gamma in (2, None):
        assert texts(sampling, method="duo", schedule="turns", gamma=gamma) == want


def test_rejection_sampler_in_turns_keeps_the_targets_law():
    sampling = SamplingConfig(1.0)
    counts, _ = sample_joint("duo", sampling, 2, P_TARGET, Q_DRAFT, sampler="rejection",
                             schedule="turns")
    assert_matches(counts, exact_joint(P_TARGET, sampling), sum(counts.values()))
    assert all(len(seq) == N_TOKENS for seq in counts)


def profiles() -> tuple[Profile, Profile]:
    """smol-self's suite profiles: duo's split (one thread each), sps's (the target on two)."""
    return (Profile.from_dict(fixed_profile("smol-self", 1)),
            Profile.from_dict(fixed_profile("smol-self", 2)))


def kept(learned: Learned, key: str, profile: Profile, overlap: bool, alpha: float) -> None:
    budget = DraftBudget(profile, overlap=overlap)
    budget.alpha = alpha
    learned.keep(key, budget)


def test_choose_prices_both_at_the_newest_acceptance():
    """At these profiles turns price higher at acceptance 0.8 (48 against 36 tok/s) and
    overlap at 0.95 (83 against 72): the newest duo generation's acceptance decides."""
    overlap, turns = profiles()
    learned = Learned()
    first = choose(learned, overlap, turns, None)
    assert first.kind == "turns" and "default acceptance" in first.reason
    kept(learned, "duo", overlap, True, 0.95)
    assert choose(learned, overlap, turns, None).kind == "overlap"
    kept(learned, TURNS, turns, False, 0.8)
    got = choose(learned, overlap, turns, None)
    assert got.kind == "turns" and "acceptance 0.80" in got.reason
    kept(learned, "duo", overlap, True, 0.95)  # kept again: the newest once more
    assert choose(learned, overlap, turns, None).kind == "overlap"


def test_a_slow_draft_prices_overlap_first():
    overlap, turns = profiles()
    turns.draft_token_s *= 10  # a chunk drafted alone no longer pays for its turn
    assert choose(Learned(), overlap, turns, None).kind == "overlap"


@pytest.fixture
def priced(smol_pair, monkeypatch):
    """smol_pair with the schedule left to the pricing and nothing learned yet."""
    monkeypatch.setattr(smol_pair.opts, "schedule", "auto")
    monkeypatch.setattr(smol_pair, "learned", Learned(drift_checks=False))
    return smol_pair


def test_the_pair_runs_the_priced_schedule_losslessly(priced):
    ids = priced.prompt_ids("Name three primary colours.")
    want = [t for e in priced.generate(ids, GenConfig(method="vanilla", max_new_tokens=16))
            for t in e.tokens]
    events = list(priced.generate(ids, GenConfig(method="duo", max_new_tokens=16)))
    stats = events[-1].stats
    assert [t for e in events for t in e.tokens] == want
    assert stats["schedule"]["kind"] == "turns" and "priced" in stats["schedule"]["reason"]
    assert stats["threads"] == priced.threads("sps").to_dict()  # sps's split, every core
    assert TURNS in priced.learned.budgets  # its own budget learned
    assert f"| schedule | {stats['schedule']['reason']} |" in final_panel(stats)  # the page


def test_what_the_pair_does_not_price(priced, monkeypatch):
    asked = priced._schedule(GenConfig(method="duo", schedule="overlap"))[1]
    assert asked.kind == "overlap" and "asked for" in asked.reason
    held = priced._schedule(GenConfig(method="duo", sequential=True))[1]
    assert held.kind == "overlap" and "--sequential" in held.reason
    assert priced._schedule(GenConfig(method="sps"))[1] is None
    monkeypatch.setattr(priced, "placement", lambda: Placement("cuda", 16, 15))
    gpu = priced._schedule(GenConfig(method="duo"))[1]
    assert gpu.kind == "overlap" and "GPU" in gpu.reason
    monkeypatch.setattr(priced.opts, "schedule", "sideways")
    with pytest.raises(ValueError, match="DUO_SCHEDULE"):
        priced._schedule(GenConfig(method="duo"))


@pytest.mark.parametrize("cfg,message", [
    (dict(schedule="sideways"), "unknown schedule"),
    (dict(method="sps", schedule="turns"), "applies to duo"),
    (dict(method="vanilla", schedule="overlap"), "applies to duo"),
    (dict(schedule="turns", sequential=True), "--sequential"),
    (dict(schedule="turns", static_k=2), "--static-k")])
def test_what_cannot_be_honoured_is_refused(cfg, message):
    with pytest.raises(ValueError, match=message):
        GenConfig(**cfg).validate()


def test_the_api_field_reaches_the_settings_or_is_refused_by_name():
    def config(body: dict) -> GenConfig:
        body = {**GOOD, **body}
        return parse(ChatRequest, json.dumps(body).encode()).gen_config(4, 0)

    assert config({}).schedule == "auto"
    assert config({"schedule": "turns"}).schedule == "turns"
    for body in ({"schedule": "sideways"}, {"method": "sps", "schedule": "turns"}):
        with pytest.raises(ApiError) as e:
            config(body)
        assert e.value.status == 400 and e.value.param == "schedule"
