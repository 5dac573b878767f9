"""The dynamic multi-sequence policy: theta decides the candidates, step costs decide how
many are worth drafting."""
from __future__ import annotations

import numpy as np

from core.branching import BranchPolicy

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
