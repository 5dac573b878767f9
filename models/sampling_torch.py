"""The sampling transform of core/sampling.py on the target's device, so a verify round
moves to the CPU only what the verifier needs (tested equal to the numpy reference)."""
from __future__ import annotations

import torch

from core.backends import Scores
from core.sampling import SamplingConfig


def device_scores(logits: torch.Tensor, sampling: SamplingConfig) -> Scores:
    """Greedy: the rows' argmax (n_rows integers); sampling: the probability rows. One copy."""
    if sampling.greedy:
        return Scores(choice=logits.argmax(dim=-1).tolist())
    return Scores(p_target=logits_to_probs(logits, sampling).cpu().numpy())


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
