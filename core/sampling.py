"""The one sampling transform (temperature, top-k, top-p) shared by draft and target."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SamplingConfig:
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def validate(self) -> None:
        for name, value in (("temperature", self.temperature), ("top-p", self.top_p),
                            ("top-k", self.top_k)):
            check_finite(name, value)
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top-p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top-k must be >= 0, got {self.top_k}")


def check_finite(name: str, value) -> None:
    """A setting must be a real number: nan or inf would sample nonsense without failing."""
    try:
        ok = math.isfinite(value)
    except TypeError:
        ok = False
    if not ok:
        raise ValueError(f"{name} must be a finite number, got {value!r}")


def logits_to_probs(logits: np.ndarray, cfg: SamplingConfig) -> np.ndarray:
    """Rows of logits -> rows of probabilities after the transform.

    Greedy turns each row into a one-hot on its argmax, so the same verifier code
    serves greedy and sampling."""
    x = np.asarray(logits, dtype=np.float32)
    squeeze = x.ndim == 1
    x = np.atleast_2d(x)
    if cfg.greedy:
        out = np.zeros_like(x)
        out[np.arange(len(x)), x.argmax(axis=-1)] = 1.0
        return out[0] if squeeze else out
    x = x / cfg.temperature
    if cfg.top_k and cfg.top_k < x.shape[-1]:
        kth = np.partition(x, -cfg.top_k, axis=-1)[:, -cfg.top_k][:, None]
        x = np.where(x < kth, -np.inf, x)
    x = x - x.max(axis=-1, keepdims=True)
    probs = np.exp(x)
    probs /= probs.sum(axis=-1, keepdims=True)
    if cfg.top_p < 1.0:
        probs = _top_p(probs, cfg.top_p)
    return probs[0] if squeeze else probs


def _top_p(probs: np.ndarray, top_p: float) -> np.ndarray:
    order = np.argsort(-probs, axis=-1)
    sorted_p = np.take_along_axis(probs, order, axis=-1)
    before = np.cumsum(sorted_p, axis=-1) - sorted_p
    keep_sorted = before < top_p  # always keeps the most likely token
    keep = np.zeros_like(keep_sorted)
    np.put_along_axis(keep, order, keep_sorted, axis=-1)
    out = np.where(keep, probs, 0.0)
    return out / out.sum(axis=-1, keepdims=True)


def sample(probs: np.ndarray, rng: np.random.Generator) -> int:
    """Draw one token id from a probability row."""
    p = np.asarray(probs, dtype=np.float64)
    cdf = np.cumsum(p)
    return int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"), len(p) - 1))


def pick(logits: np.ndarray, cfg: SamplingConfig, rng: np.random.Generator) -> int:
    """One token from one row of logits: argmax when greedy, else a draw."""
    if cfg.greedy:
        return int(np.argmax(logits))
    return sample(logits_to_probs(logits, cfg), rng)


class PositionRng:
    """Random streams keyed by absolute token position: the draws that decide position i do
    not depend on how rounds were cut. So a seed reproduces the output whatever the timing
    only when the target's probabilities do not depend on the chunk shape either (float32 on
    the CPU); a 16-bit target (or cuda) rounds each chunk shape differently, and chunk shapes
    follow the timing. `stream` separates the verifier's draws from the draft's."""

    def __init__(self, seed: int, stream: int):
        self.seed, self.stream = seed, stream

    def __call__(self, pos: int) -> np.random.Generator:
        return np.random.default_rng(np.random.SeedSequence(self.seed, spawn_key=(self.stream, pos)))
