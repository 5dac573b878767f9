"""The dynamic multi-sequence policy: theta decides the candidates, step costs decide how
many are worth drafting."""
from __future__ import annotations

import numpy as np

from core.branching import BranchPolicy, FirstTokenOdds

P_FIRST = np.array([0.40, 0.30, 0.20, 0.06, 0.04])


def test_theta_admits_candidates_above_it():
    free = BranchPolicy(max_seqs=4, step_s={1: 1.0, 2: 1.0, 3: 1.0, 4: 1.0})
    # theta = 0.40 * 0.5 = 0.20: only token 1 (0.30) passes besides the chosen token 0
    assert free.extra_firsts(P_FIRST, 0.5, chosen=0, n=8) == [1]
    # a confident draft (p(2,1) = 0.95): theta 0.38, nobody passes
    assert free.extra_firsts(P_FIRST, 0.95, chosen=0, n=8) == []
    # a lower threshold scale lets more in, up to max_seqs - 1
    assert free.extra_firsts(P_FIRST, 0.5, chosen=0, n=8) != \
        BranchPolicy(max_seqs=4, theta_scale=0.1, step_s=free.step_s).extra_firsts(P_FIRST, 0.5, 0, 8)
    assert len(BranchPolicy(max_seqs=2, theta_scale=0.01, step_s=free.step_s)
               .extra_firsts(P_FIRST, 0.5, 0, 8)) == 1


def test_costly_batched_steps_keep_one_sequence():
    """Where a k-sequence step costs k single steps (this CPU), sharing the time leaves
    each sequence too short to pay for the extra coverage."""
    costly = BranchPolicy(max_seqs=4, theta_scale=0.1, step_s={1: 1.0, 2: 2.4, 3: 3.6, 4: 4.8})
    assert costly.extra_firsts(P_FIRST, 0.5, chosen=0, n=12) == []
    free = BranchPolicy(max_seqs=4, theta_scale=0.1, step_s={1: 1.0, 2: 1.0, 3: 1.0, 4: 1.0})
    assert len(free.extra_firsts(P_FIRST, 0.5, chosen=0, n=12)) == 3


def test_static_k_ignores_theta_and_costs():
    costly = BranchPolicy(static_k=3, step_s={1: 1.0, 2: 2.4, 3: 3.6})
    assert costly.extra_firsts(P_FIRST, 0.99, chosen=0, n=12) == [1, 2]
    assert costly.steps(12, 3) == 3


def test_odds_learn_how_often_each_rank_is_the_targets_token():
    odds = FirstTokenOdds(prior=4.0)
    p = np.array([0.4, 0.3, 0.2])
    assert np.allclose(odds.by_rank(p), p)  # nothing seen yet: the draft's own guess
    for _ in range(50):
        odds.observe(0.4, 1)
    assert odds.by_rank(p)[0] > 0.9 and odds.by_rank(p)[1] < 0.05
    assert np.allclose(odds.by_rank(np.array([0.95, 0.05])), [0.95, 0.05])  # another bin
    odds.observe(0.4, 0)  # the target's token was none of the candidates
    assert odds.by_rank(p).sum() < 1


def test_learned_odds_decide_whether_branching_pays():
    steps = {1: 1.0, 2: 1.3, 3: 1.6, 4: 1.9}
    policy = BranchPolicy(max_seqs=2, step_s=steps)
    assert policy.extra_firsts(P_FIRST, 0.5, chosen=0, n=12) == [1]  # 0.4 vs 0.7 coverage
    for _ in range(50):  # a draft whose top token is the target's, however unsure it is
        policy.odds.observe(0.4, 1)
    assert policy.extra_firsts(P_FIRST, 0.5, chosen=0, n=12) == []
    for _ in range(100):  # the target picks the runner-up as often as the top token
        policy.odds.observe(0.4, 2)
    assert policy.extra_firsts(P_FIRST, 0.5, chosen=0, n=12) == [1]


def test_a_marginal_gain_keeps_one_sequence():
    """Coverage 0.40 -> 0.43 at free batching: 7.5% more, under the 10% margin."""
    p = np.array([0.40, 0.03, 0.02])
    free = {1: 1.0, 2: 1.0}
    assert BranchPolicy(max_seqs=2, theta_scale=0.01, step_s=free).extra_firsts(p, 0.5, 0) == []
    assert BranchPolicy(max_seqs=2, theta_scale=0.01, step_s=free, margin=0.0) \
        .extra_firsts(p, 0.5, 0) == [1]


def test_sequences_that_do_not_fit_the_time_are_not_drafted():
    """3 or 4 sequences at 3.1x / 3.9x a single step: 4 single steps' time gives each about
    one token, under the 2 a sequence drafts at least; only 2 sequences (2 tokens each) fit."""
    costly = BranchPolicy(max_seqs=4, theta_scale=0.01, step_s={1: 1.0, 2: 2.3, 3: 3.1, 4: 3.9})
    for _ in range(100):  # the target's token is spread over the first four ranks
        for rank in (1, 2, 3, 4):
            costly.odds.observe(0.4, rank)
    assert costly.extra_firsts(P_FIRST, 0.5, chosen=0, n=4) == [1]
    assert not costly.fits(4, 4) and costly.fits(12, 4)
