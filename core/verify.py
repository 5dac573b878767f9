"""The verifier: draft tokens (+ q_draft) and target probabilities in, accepted tokens out.

Glossary (as in vLLM): *accepted* draft tokens pass the test; on a rejection the target's
*recovered* token replaces the first rejected one; when every draft token passes, the target
adds a *bonus* token from its last row. Either way a round ends with exactly one token that
comes from the target itself.

Two samplers. `coupled` (drafter-invariant; Daliri, Musco and Suresh 2024): the target draws
each position's token by Gumbel-max with noise fixed by (seed, position, token), the draft
proposes with the same noise, and a draft token passes when it equals the target's draw; the
text is then the target-only decoder's, token for token, whatever was drafted. `rejection`
(Leviathan et al.; Chen et al.): accept with min(1, p/q), else draw from the residual; the
same distribution, a slightly higher acceptance, but the text depends on the drafts.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.backends import QRows, Scores
from core.sampling import Noise


@dataclass(frozen=True)
class Verdict:
    accepted: int  # how many draft tokens passed
    token: int  # recovered token (on rejection) or bonus token (all passed)

    def bonus(self, n_draft: int) -> bool:
        return self.accepted == n_draft


def verify_greedy(draft: list[int], target_choice: list[int]) -> Verdict:
    """target_choice[i] is the target's own token at draft position i (len(draft) + 1
    entries): its argmax (greedy) or its draw (coupled sampling)."""
    n = 0
    while n < len(draft) and draft[n] == target_choice[n]:
        n += 1
    return Verdict(n, int(target_choice[n]))


def verify_sampled(draft: list[int], q_draft: np.ndarray | QRows, scores: Scores, noise: Noise,
                   base: int = 0) -> Verdict:
    """Speculative sampling (Leviathan et al.; Chen et al.): accept draft token i with
    min(1, p/q), by the acceptance uniform of its position base + i; on a rejection the
    target's recovered token (its draw from norm(max(0, p - q))), else its bonus draw. A
    lookup token's q is one-hot (QRows): it passes with probability p."""
    for i, tok in enumerate(draft):
        p, q = scores.p_draft[i], float(q_draft[i, tok])
        if q > 0 and noise.accept_u(base + i) * q < p:
            continue
        return Verdict(i, scores.recovered[i])
    return Verdict(len(draft), scores.bonus)

