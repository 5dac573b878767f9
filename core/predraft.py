"""Pre-drafting policy (after SSD, Kumar et al. 2026): while the target verifies a draft, which
likely rejection outcomes (j, a) to draft ahead, and how deep, priced round by round by the
draft budget's cost model; none when no choice beats drafting without them."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from core.backends import Draft, Plan
from core.branching import FirstTokenOdds, step_ratio
from core.budget import DraftBudget


DEPTHS = (1, 2, 3, 4, 6, 8)  # pre-draft depths the policy prices
MIN_P = 0.01  # outcomes less likely than this are never pre-drafted


@dataclass
class PredraftPolicy:
    step_s: dict = field(default_factory=dict)  # k -> time of one batched k-sequence step
    odds: FirstTokenOdds = field(default_factory=FirstTokenOdds)
    max_outcomes: int = 4
    max_depth: int = 8
    margin: float = 0.02  # a plan must promise this much more than none
    forced: tuple[int, int] | None = None  # (outcomes, depth): no pricing (tests, comparison)

    def outcomes(self, draft: Draft) -> list[tuple[float, int, int]]:
        """(probability, j, a) of the likeliest rejection outcomes, most likely first: the
        tokens before j pass and the target puts `a` at j. The odds of each draft rank being
        the target's token are the learned first-token odds (calibrated per pair)."""
        out, reach = [], 1.0
        for j, (tok, (ids, probs)) in enumerate(zip(draft.tokens, draft.ranked or [])):
            by_tok = dict(zip(ids, self.odds.by_rank(np.asarray(probs, dtype=float))))
            out += [(reach * float(p), j, a) for a, p in by_tok.items() if a != tok]
            reach *= float(by_tok.get(tok, 0.0))
            if reach < 1e-3:
                break
        out.sort(key=lambda o: -o[0])
        return out[:self.max_outcomes]

    def may_pay(self, budget: DraftBudget, room: int, seqs: int = 1) -> bool:
        """Whether any plan could beat none now: a sure hit on one outcome at the best depth
        (more outcomes cost more and hit no more). When not, drafts need no ranks (a softmax
        a draft token) and the drafter keeps its plain one-sequence loop."""
        if self.forced:
            return True
        extra = step_ratio(self.step_s, seqs + 1) - step_ratio(self.step_s, seqs)
        best = budget.expected_rate(budget.gamma) * (1 + self.margin)
        return any(budget.predraft_rate(budget.gamma, 1.0, d, d * extra * budget.draft_s(1))
                   > best for d in DEPTHS if d <= min(self.max_depth, room))

    def plan(self, draft: Draft, budget: DraftBudget, room: int, seqs: int = 1) -> Plan:
        """The outcomes and depth that maximise the budget's expected tokens/s, when the main
        chunk is drafted with `seqs` sequences and at most `room` tokens fit after an outcome."""
        found = self.outcomes(draft)
        if not found or room < 1:
            return Plan()
        if self.forced:
            n, depth = self.forced
            return Plan([(j, a) for _, j, a in found[:n]], min(depth, room), len(draft))
        best, choice, hit = budget.expected_rate(budget.gamma) * (1 + self.margin), None, 0.0
        depths = [d for d in DEPTHS if d <= min(self.max_depth, room)]
        for n, (p, _, _) in enumerate(found, 1):
            if p < MIN_P:  # the plan is on the critical path: unlikely outcomes are not priced
                break
            hit += p
            extra = (step_ratio(self.step_s, seqs + n) - step_ratio(self.step_s, seqs))
            for depth in depths:
                rate = budget.predraft_rate(budget.gamma, hit, depth,
                                            depth * extra * budget.draft_s(1))
                if rate > best:
                    best, choice = rate, (n, depth)
        if choice is None:
            return Plan()
        return Plan([(j, a) for _, j, a in found[:choice[0]]], choice[1], len(draft))
