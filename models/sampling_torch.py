"""The sampling transform of core/sampling.py on the target's device, so a verify round
moves to the CPU only what the verifier needs (tested equal to the numpy reference)."""
from __future__ import annotations

import numpy as np
import torch

from core.backends import SampleCheck, Scores
from core.sampling import DRAW, SamplingConfig, mix32, noise_key, uniforms


def device_scores(logits: torch.Tensor, sampling: SamplingConfig,
                  check: SampleCheck | None = None) -> Scores:
    """Greedy: the rows' argmax (n_rows integers); coupled sampling: each row's draw;
    rejection sampling: core/verify.sampled_scores on the device (p_target of the draft tokens,
    residual and bonus draws). One download either way."""
    if sampling.greedy:
        return Scores(choice=logits.argmax(dim=-1).tolist())
    probs = logits_to_probs(logits, sampling).double()
    if check.coupled:
        return Scores(choice=draw(probs, check.noise.seed, check.base).tolist())
    g, dev = len(check.draft), probs.device
    draft = torch.tensor(check.draft, dtype=torch.long, device=dev)
    p_draft = probs[:g].gather(1, draft[:, None])[:, 0]
    rows = probs
    if g:
        q = torch.from_numpy(np.ascontiguousarray(check.q_draft[:g])).to(dev).double()
        resid = (probs[:g] - q).clamp_min(0.0)
        empty = resid.sum(dim=-1, keepdim=True) <= 0  # p == q up to rounding: draw from p
        rows = torch.cat([torch.where(empty, probs[:g], resid), probs[g:]])
    drawn = draw(rows, check.noise.seed, check.base)
    out = torch.cat([p_draft, drawn.double()]).tolist()
    return Scores(p_draft=out[:g], recovered=[int(t) for t in out[g:2 * g]],
                  bonus=int(out[2 * g]))


def draw(rows: torch.Tensor, seed: int, base: int) -> torch.Tensor:
    """One token per row by core/sampling.Noise.draw's exponential race, row i at position
    base + i: the same integer hash on int64 tensors, so the same tokens."""
    n, vocab = rows.shape
    pos = torch.arange(base, base + n, dtype=torch.long, device=rows.device)
    keys = noise_key(seed, DRAW, pos)
    u = uniforms(keys[:, None], _token_mix(vocab, rows.device)[None, :])
    return (-torch.log(u) / rows).argmin(dim=-1)


_MIX: dict = {}


def _token_mix(vocab: int, device: torch.device) -> torch.Tensor:
    key = (vocab, str(device))
    if key not in _MIX:
        _MIX[key] = mix32(torch.arange(vocab, dtype=torch.long, device=device))
    return _MIX[key]


def logits_to_probs(logits: torch.Tensor, cfg: SamplingConfig) -> torch.Tensor:
    """Rows of logits -> rows of probabilities (temperature, top-k, top-p), float32."""
    x = logits.float() / cfg.temperature
    if cfg.top_k and cfg.top_k < x.shape[-1]:
        kth = torch.topk(x, cfg.top_k, dim=-1).values[:, -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    probs = torch.softmax(x, dim=-1)
    if cfg.top_p < 1.0:
        probs = _top_p(probs, cfg.top_p)
    return probs


def _top_p(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    sorted_p, order = torch.sort(probs, dim=-1, descending=True)
    keep_sorted = (torch.cumsum(sorted_p, dim=-1) - sorted_p) < top_p  # keeps the top token
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    out = probs * keep
    return out / out.sum(dim=-1, keepdim=True)
