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


class PositionRng:
    """The draft's own random streams keyed by absolute token position (numpy generators),
    for the `rejection` sampler: what the draft proposes at position i does not depend on how
    rounds were cut. The target's draws use `Noise`, which the device computes alike."""

    def __init__(self, seed: int, stream: int):
        self.seed, self.stream = seed, stream

    def __call__(self, pos: int) -> np.random.Generator:
        return np.random.default_rng(np.random.SeedSequence(self.seed, spawn_key=(self.stream, pos)))

    def draw(self, probs: np.ndarray, pos: int) -> int:
        """One token from a probability row, by this position's stream."""
        return sample(probs, self(pos))


# -- the target's noise: one function of (seed, stream, position, token) ---------------------
MASK32 = 0xFFFFFFFF
DRAW, ACCEPT = 0, 2  # streams: the target's draws, the acceptance tests (the draft's is 1)
DRAFT_STREAM = 1  # the `rejection` sampler's own draft stream (PositionRng)
SAMPLERS = ("coupled", "rejection")


def draft_draws(seed: int, sampler: str):
    """What the draft draws its tokens with: `coupled`, the target's own noise (a draft token
    then passes when it is the target's draw); `rejection`, a stream of its own."""
    return DraftNoise(seed) if sampler == "coupled" else PositionRng(seed, DRAFT_STREAM)


def mix32(x):
    """A 32-bit integer hash (Wellons' lowbias32) on Python ints, numpy uint64 arrays or torch
    int64 tensors alike: every product is cut back to 32 bits, so each library's wrap-around
    gives the same bits, and no shift ever sees a sign."""
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & MASK32
    x = x ^ (x >> 15)
    x = (x * 0x846CA68B) & MASK32
    return x ^ (x >> 16)


def noise_key(seed: int, stream: int, pos: int):
    """The key of one (seed, stream, position); `pos` may be an array or a tensor."""
    k = mix32((seed & MASK32) ^ mix32(((seed >> 32) & MASK32) ^ mix32(stream + 0x9E3779B9)))
    return mix32(k ^ pos)


def uniforms(key, token_mix):
    """Uniforms in (0, 1), float64, for keys x tokens; token_mix = mix32(token ids)."""
    bits = mix32(key ^ token_mix)
    bits = bits.double() if hasattr(bits, "double") else np.asarray(bits, dtype=np.float64)
    return (bits + 0.5) / 2.0 ** 32


class Noise:
    """The target's random draws, fixed by (seed, position, token) and nothing else:
    `draw` picks a token from a probability row by an exponential race (Gumbel-max:
    argmin E_j / p_j with E_j = -log u_j), `accept_u` is a position's acceptance uniform.
    models/target/sampling.py computes the same on the device (tested bit for bit)."""

    def __init__(self, seed: int):
        self.seed = seed
        self._mix: np.ndarray | None = None

    def token_mix(self, n: int) -> np.ndarray:
        if self._mix is None or len(self._mix) < n:
            self._mix = mix32(np.arange(n, dtype=np.uint64))
        return self._mix[:n]

    def draw(self, probs: np.ndarray, pos: int) -> int:
        p = np.asarray(probs, dtype=np.float64)
        u = uniforms(noise_key(self.seed, DRAW, pos), self.token_mix(len(p)))
        with np.errstate(divide="ignore"):
            race = -np.log(u) / p
        return int(np.argmin(race))

    def accept_u(self, pos: int) -> float:
        return float(uniforms(noise_key(self.seed, ACCEPT, pos), mix32(0)))


class DraftNoise:
    """The coupled draft's draws: `Noise.draw` in 32-bit arithmetic (three times faster on a
    large vocabulary). A near-tie may round the other way than the target's float64 draw:
    that costs a rejection, never the text, which only ever keeps the target's draws."""

    def __init__(self, seed: int):
        self.seed = seed
        self._mix: np.ndarray | None = None

    def draw(self, probs: np.ndarray, pos: int) -> int:
        n = len(probs)
        if self._mix is None or len(self._mix) < n:
            self._mix = mix32(np.arange(n, dtype=np.uint64)).astype(np.uint32)
        x = self._mix[:n] ^ np.uint32(noise_key(self.seed, DRAW, pos))
        x ^= x >> 16  # mix32 in uint32: numpy's products wrap at 32 bits
        x *= np.uint32(0x7FEB352D)
        x ^= x >> 15
        x *= np.uint32(0x846CA68B)
        x ^= x >> 16
        v = ((~x).astype(np.float32) + np.float32(0.5)) * np.float32(2.0 ** -32)  # 1 - u
        with np.errstate(divide="ignore", over="ignore"):  # log1p: small E = -log(u) stays exact
            return int(np.argmax(np.log1p(-v) / np.asarray(probs, dtype=np.float32)))
