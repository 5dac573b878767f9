"""Pre-drafting for rejection outcomes (core/predraft.py): the policy with known
probabilities, the cost model, and the engine with fakes: greedy and seeded text equal to
vanilla's, the rejection sampler's distribution the target's, pre-drafts used on a rejection."""
from __future__ import annotations

import numpy as np
import pytest

import core.engine as engine
from core.backends import Draft, Plan, Proposal
from core.budget import DraftBudget
from core.engine import GenConfig, generate
from core.predraft import PredraftPolicy
from core.sampling import SamplingConfig
from tests.fakes import FakeDrafter, FakeTarget, ScriptedLearned, decode, fake_profile, markov
from tests.test_sampling_lossless import assert_matches

V = 6
P_TARGET = markov(V, seed=1, sharp=0.7)
Q_DRAFT = markov(V, seed=2, sharp=0.7)
PROMPT = [0, 1]


def unsure_draft() -> Draft:
    """Two draft tokens: 60% sure of the first (3 is next likely), 90% of the second."""
    return Draft([5, 6], ranked=[([5, 3], [0.6, 0.4]), ([6, 2], [0.9, 0.1])])


def test_outcomes_are_rejection_points_by_probability():
    got = PredraftPolicy().outcomes(unsure_draft())
    assert [(j, a) for _, j, a in got] == [(0, 3), (1, 2)]
    assert np.allclose([p for p, _, _ in got], [0.4, 0.6 * 0.1])


def test_a_draft_without_ranks_pre_drafts_nothing():
    budget = DraftBudget(fake_profile(), fixed=4)
    assert not PredraftPolicy().plan(Draft([1, 2]), budget, room=8)


def test_free_batching_pays_and_dear_batching_does_not():
    budget = DraftBudget(fake_profile(), fixed=4, alpha=0.7)
    free = PredraftPolicy({k: 0.01 for k in range(1, 9)}).plan(unsure_draft(), budget, 8)
    assert free.outcomes[0] == (0, 3) and free.depth >= 1 and free.pending == 2
    dear = PredraftPolicy({k: 0.01 * k * 3 for k in range(1, 9)}).plan(unsure_draft(),
                                                                       budget, 8)
    assert not dear


@pytest.mark.parametrize("alpha", [0.3, 0.6, 0.9])
def test_no_plan_where_a_sure_hit_could_not_pay(alpha):
    """may_pay bounds plan(): where it says no, no draft gets a plan (random ranks, every
    batching cost); free batching may pay."""
    rng = np.random.default_rng(0)
    budget = DraftBudget(fake_profile(), fixed=4, alpha=alpha)
    assert PredraftPolicy({k: 0.01 for k in range(1, 9)}).may_pay(budget, 8)
    for cost in (1.0, 1.1, 1.3, 1.6, 2.0, 3.0):
        policy = PredraftPolicy({k: 0.01 * cost ** (k - 1) for k in range(1, 9)})
        if policy.may_pay(budget, 8):
            continue
        for _ in range(50):
            sure = rng.uniform(0.05, 1.0, 4)
            ranked = [([t, 9], [p, 1 - p]) for t, p in zip(range(4), sure)]
            assert not policy.plan(Draft(list(range(4)), ranked=ranked), budget, 8)


def test_a_policy_that_cannot_pay_asks_for_no_ranks(monkeypatch):
    """The engine then gives the drafter no plan (its plain loop, no ranks); still vanilla's.
    (A batched step a thousand times a single one: no idle draft time covers it.)"""
    monkeypatch.setattr(engine, "_predraft_policy", lambda run, budget: PredraftPolicy(
        {1: 0.01} | {k: 10.0 for k in range(2, 9)}))
    drafter = FakeDrafter(Q_DRAFT)
    got, stats = tokens("duo", drafter=drafter, gamma=3)
    assert got == tokens("vanilla")[0]
    assert drafter.calls and drafter.ranked_calls == 0 and stats["predraft_outcomes"] == 0


def test_forced_plan_and_room():
    budget = DraftBudget(fake_profile(), fixed=4)
    plan = PredraftPolicy(forced=(1, 5)).plan(unsure_draft(), budget, room=3)
    assert plan.outcomes == [(0, 3)] and plan.depth == 3
    assert plan.covers(0, 3) and not plan.covers(1, 2) and not Plan().covers(0, 3)


def test_no_hit_rate_is_the_budgets_own_rate():
    budget = DraftBudget(fake_profile(), alpha=0.8)
    for g in (1, 4, 9):
        assert budget.predraft_rate(g, 0.0, 3, 0.0) == pytest.approx(budget.expected_rate(g))
        assert budget.predraft_rate(g, 0.3, 3, 0.0) > budget.expected_rate(g)


def test_proposal_finds_the_predraft():
    d = Draft([7, 8])
    p = Proposal(predrafts={(1, 4): d})
    assert p.predraft_for(1, 4) is d and p.predraft_for(0, 4) is None


def forced(monkeypatch, n=2, depth=3):
    monkeypatch.setattr(engine, "_predraft_policy", lambda run, budget: PredraftPolicy(
        forced=(n, depth)) if run.cfg.predraft else None)


def tokens(method, sampling=SamplingConfig(), seed=0, drafter=None, n=24, **kw):
    """The budget sees the profile's times (ScriptedLearned): its own gamma and the lookup's
    pricing, not the clock, pick the rounds whose pre-drafts are counted."""
    cfg = GenConfig(method=method, max_new_tokens=n, sampling=sampling, seed=seed, **kw)
    events = list(generate(FakeTarget(P_TARGET), drafter or FakeDrafter(Q_DRAFT), PROMPT, cfg,
                           decode, fake_profile(), learned=ScriptedLearned()))
    return [t for e in events for t in e.tokens], events[-1].stats


@pytest.mark.parametrize("options", [dict(gamma=3), dict(gamma=3, sequential=True),
                                     dict(), dict(gamma=4, static_k=2)],
                         ids=["g3", "g3-seq", "auto", "k2"])
def test_greedy_with_predrafts_is_vanilla(monkeypatch, options):
    forced(monkeypatch)
    want, _ = tokens("vanilla")
    got, stats = tokens("duo", **options)
    assert got == want
    assert stats["predraft_outcomes"] > 0 and stats["rejections"] > 0
    assert stats["predraft_hits"] > 0  # some rejections found their draft ready
    assert 0 < stats["predraft_hit_rate"] <= 1


def test_predraft_off_plans_nothing(monkeypatch):
    forced(monkeypatch)
    drafter = FakeDrafter(Q_DRAFT)
    got, stats = tokens("duo", drafter=drafter, gamma=3, predraft=False)
    assert got == tokens("vanilla")[0]
    assert not drafter.plans and stats["predraft_outcomes"] == 0


def test_a_hit_verifies_the_predraft_next(monkeypatch):
    """After a pre-drafted rejection, the next draft request starts after the pre-draft."""
    forced(monkeypatch, n=4, depth=2)
    drafter = FakeDrafter(Q_DRAFT)
    _, stats = tokens("duo", drafter=drafter, gamma=3, sequential=True)
    hits = [r for r in stats["rounds_log"] if r["predraft_hit"]]
    assert hits and all(r["predrafted"] > 0 for r in hits)


@pytest.mark.parametrize("sampling", [SamplingConfig(1.0), SamplingConfig(0.7, top_k=4)],
                         ids=["t1", "t0.7-k4"])
def test_seeded_text_with_predrafts_is_vanillas(monkeypatch, sampling):
    forced(monkeypatch)
    hits = 0
    for seed in range(30):
        want, _ = tokens("vanilla", sampling, seed, n=12)
        got, stats = tokens("duo", sampling, seed, n=12, gamma=3)
        assert got == want, seed
        hits += stats["predraft_hits"]
    assert hits > 0


def joint(P: np.ndarray, n: int) -> dict:
    """The exact probability of each n-token continuation of PROMPT (temperature 1)."""
    out = {(): 1.0}
    for _ in range(n):
        out = {seq + (t,): p * P[seq[-1] if seq else PROMPT[-1], t]
               for seq, p in out.items() for t in range(len(P))}
    return out


def test_rejection_sampler_with_predrafts_keeps_the_distribution(monkeypatch):
    """A pre-draft is a proposal like any other: its q rows are the ones that drew it.
    3000 samples, by a power calculation: the joint of 5 tokens (243 cells; those expected
    >= 5 kept, the rest pooled: df 81) at alpha 1e-3 has power 0.99 for any change of the
    law by a total variation >= 0.089 (the suite's standard: 0.092, test_sampling_lossless.py);
    2000 would catch 0.105, 1000 0.136."""
    forced(monkeypatch, n=2, depth=2)
    P, Q = (m[:3, :3] / m[:3, :3].sum(1, keepdims=True) for m in (P_TARGET, Q_DRAFT))
    n, counts, hits = 3000, {}, 0
    for seed in range(n):
        cfg = GenConfig(method="duo", max_new_tokens=5, sampling=SamplingConfig(1.0),
                        seed=seed, gamma=2, sampler="rejection", multi_seq=False)
        events = list(generate(FakeTarget(P), FakeDrafter(Q), PROMPT, cfg, decode,
                               fake_profile(), learned=ScriptedLearned()))  # hits counted
        toks = tuple(t for e in events for t in e.tokens)
        counts[toks] = counts.get(toks, 0) + 1
        hits += events[-1].stats["predraft_hits"]
    assert hits > n // 10
    assert_matches(counts, joint(P, 5), n)
