"""Dynamic multi-sequence drafting policy (DuoDecoding): when the draft is unsure of its
first token, extra sequences start from other likely first tokens.

theta = p(1,1) * p(2,1) * theta_scale: the draft's own confidence in its first two tokens.
Every other first-position candidate k with p(1,k) > theta starts a sequence (up to
max_seqs). The round's draft time is shared: k sequences get fewer steps each, priced by the
measured cost of a k-sequence batched step."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

TOP_RANKS = 8  # first-position candidates remembered for the confusion table


@dataclass
class BranchPolicy:
    max_seqs: int = 4
    theta_scale: float = 1.0
    static_k: int | None = None  # always this many sequences (comparison)
    step_s: dict = field(default_factory=dict)  # k -> time of one batched k-sequence step

    alpha: float = 0.9  # expected per-token acceptance, for pricing shorter sequences

    def extra_firsts(self, p_first: np.ndarray, p_second_top: float, chosen: int,
                     n: int = 8) -> list[int]:
        """First tokens of the extra sequences, most likely first. Of those that pass theta,
        keep as many as maximise P(the target's token starts a sequence) x expected accepted
        tokens of a sequence, given that k sequences share the time of n single steps."""
        order = [int(t) for t in np.argsort(-p_first)[:TOP_RANKS] if t != chosen]
        if self.static_k:
            return [t for t in order if p_first[t] > 0][:self.static_k - 1]
        theta = float(p_first.max()) * p_second_top * self.theta_scale
        passed = [t for t in order if p_first[t] > theta][:self.max_seqs - 1]
        covered = np.cumsum([p_first[chosen]] + [p_first[t] for t in passed])
        value = [covered[k] * self._accepted(self.steps(n, k + 1)) for k in range(len(covered))]
        return passed[:int(np.argmax(value))]

    def _accepted(self, steps: int) -> float:
        a = min(max(self.alpha, 0.01), 0.995)
        return (1 - a ** steps) / (1 - a)

    def steps(self, n: int, k: int) -> int:
        """Tokens per sequence when k sequences share the time of n single-sequence steps."""
        if k <= 1:
            return n
        one, many = self.step_s.get(1), self.step_s.get(k)
        ratio = many / one if one and many else 1.0 + 0.25 * (k - 1)
        return max(2, min(n, int(round(n / ratio))))


def softmax(logits: np.ndarray) -> np.ndarray:
    x = logits.astype(np.float64) - np.max(logits)
    e = np.exp(x)
    return e / e.sum()
