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


class FirstTokenOdds:
    """How often the target's next token was the draft's rank-j first candidate, per bin of
    the draft's top probability, blended with the draft's own probabilities (`prior` pseudo
    rounds). A draft's probabilities are no calibrated guess of the target's choice: a
    quantized copy of the target picks the target's token far more often than p(1,1) says."""

    EDGES = (0.3, 0.5, 0.7, 0.9)

    def __init__(self, prior: float = 4.0, ranks: int = TOP_RANKS):
        self.prior, self.ranks = prior, ranks
        self.counts = np.zeros((len(self.EDGES) + 1, ranks + 1))  # last column: no rank

    def _bin(self, p_top: float) -> int:
        return int(np.searchsorted(self.EDGES, p_top, side="right"))

    def observe(self, p_top: float, rank: int) -> None:
        """rank: 1-based rank of the target's token among the draft's candidates, 0 if none."""
        self.counts[self._bin(p_top), rank - 1 if 0 < rank <= self.ranks else -1] += 1

    def by_rank(self, p_sorted: np.ndarray) -> np.ndarray:
        """P(the target's token is the draft's rank-j candidate), j = 1..len(p_sorted)."""
        row = self.counts[self._bin(float(p_sorted[0]))]
        k = min(len(p_sorted), self.ranks)
        return (row[:k] + self.prior * p_sorted[:k]) / (row.sum() + self.prior)


@dataclass
class BranchPolicy:
    max_seqs: int = 4
    theta_scale: float = 1.0
    static_k: int | None = None  # always this many sequences (comparison)
    step_s: dict = field(default_factory=dict)  # k -> time of one batched k-sequence step

    alpha: float = 0.9  # expected per-token acceptance, for pricing shorter sequences
    odds: FirstTokenOdds = field(default_factory=FirstTokenOdds)
    # extra sequences must promise this much more than one: promoting a winning branch and
    # the batch bookkeeping cost time the model leaves out
    margin: float = 0.1

    def extra_firsts(self, p_first: np.ndarray, p_second_top: float, chosen: int,
                     n: int = 8, ranked: list[int] | None = None) -> list[int]:
        """First tokens of the extra sequences, most likely first. Of those that pass theta,
        keep as many as maximise P(the target's token starts a sequence) x expected accepted
        tokens of a sequence, given that k sequences share the time of n single steps.
        P(the target's token is a candidate) comes from the learned odds by rank.
        `ranked`: top_ids(p_first), when the caller has it already."""
        ranked = top_ids(p_first) if ranked is None else ranked
        order = [t for t in ranked if t != chosen]
        if self.static_k:
            return [t for t in order if p_first[t] > 0][:self.static_k - 1]
        theta = float(p_first[ranked[0]]) * p_second_top * self.theta_scale
        passed = [t for t in order if p_first[t] > theta][:self.max_seqs - 1]
        odds = dict(zip(ranked, self.odds.by_rank(p_first[ranked])))
        covered = np.cumsum([odds.get(chosen, 0.0)] + [odds[t] for t in passed])
        value = [covered[k] * self._accepted(self.steps(n, k + 1)) if self.fits(n, k + 1)
                 else 0.0 for k in range(len(covered))]
        best = int(np.argmax(value))
        return passed[:best] if value[best] > (1 + self.margin) * value[0] else []

    def _accepted(self, steps: int) -> float:
        a = min(max(self.alpha, 0.01), 0.995)
        return (1 - a ** steps) / (1 - a)

    def steps(self, n: int, k: int) -> int:
        """Tokens per sequence when k sequences share the time of n single-sequence steps."""
        return n if k <= 1 else max(2, min(n, int(round(n / step_ratio(self.step_s, k)))))

    def fits(self, n: int, k: int) -> bool:
        """Whether k sequences of at least 2 tokens fit the time of n single steps."""
        return k <= 1 or n / step_ratio(self.step_s, k) >= 1.5


def step_ratio(step_s: dict, k: int) -> float:
    """Cost of one batched k-sequence draft step in single steps, from the measured step
    times (k -> seconds); a guess of +25% per extra sequence where unmeasured."""
    if k <= 1:
        return 1.0
    one, many = step_s.get(1), step_s.get(k)
    return many / one if one and many else 1.0 + 0.25 * (k - 1)


def top_ids(p: np.ndarray, k: int = TOP_RANKS) -> list[int]:
    """Ids of the k largest entries, largest first (a partial sort: vocabularies are big)."""
    k = min(k, len(p))
    part = np.argpartition(-p, k - 1)[:k]
    return [int(t) for t in part[np.argsort(-p[part], kind="stable")]]


def softmax(logits: np.ndarray) -> np.ndarray:
    e = np.exp(logits.astype(np.float32, copy=False) - np.max(logits))
    e /= e.sum()
    return e


def top_prob(logits: np.ndarray) -> float:
    """The largest softmax probability, without building the distribution."""
    return float(1.0 / np.exp(logits.astype(np.float32, copy=False) - np.max(logits)).sum())
