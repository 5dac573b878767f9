"""The verifier: draft tokens (+ q_draft) and target probabilities in, accepted tokens out.

Glossary (as in vLLM): *accepted* draft tokens pass the test; on a rejection the target's
*recovered* token replaces the first rejected one; when every draft token passes, the target
adds a *bonus* token from its last row. Either way a round ends with exactly one token that
comes from the target itself.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from core.sampling import sample


@dataclass(frozen=True)
class Verdict:
    accepted: int  # how many draft tokens passed
    token: int  # recovered token (on rejection) or bonus token (all passed)

    def bonus(self, n_draft: int) -> bool:
        return self.accepted == n_draft


def verify_greedy(draft: list[int], target_choice: list[int]) -> Verdict:
    """target_choice[i] is the target's argmax at draft position i (len(draft) + 1 entries)."""
    n = 0
    while n < len(draft) and draft[n] == target_choice[n]:
        n += 1
    return Verdict(n, int(target_choice[n]))


def verify_sampled(draft: list[int], q_draft: np.ndarray, p_target: np.ndarray,
                   rng_at: Callable[[int], np.random.Generator], base: int = 0) -> Verdict:
    """Speculative sampling (Leviathan et al.; Chen et al.): accept with min(1, p/q),
    on rejection draw from norm(max(0, p - q)), else a bonus draw from the last row.
    rng_at(base + i) gives the random stream of draft position i."""
    for i, tok in enumerate(draft):
        rng = rng_at(base + i)
        p, q = float(p_target[i, tok]), float(q_draft[i, tok])
        if q > 0 and rng.random() * q < p:
            continue
        return Verdict(i, residual_sample(p_target[i], q_draft[i], rng))
    return Verdict(len(draft), sample(p_target[len(draft)], rng_at(base + len(draft))))


def residual_sample(p: np.ndarray, q: np.ndarray, rng: np.random.Generator) -> int:
    residual = np.maximum(p.astype(np.float64) - q, 0.0)
    if residual.sum() <= 0:  # p == q up to rounding: any draw from p is right
        return sample(p, rng)
    return sample(residual, rng)
