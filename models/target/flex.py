"""FlexAttention over the static target's K/V buffers (models/target/attention.py writes them):
a block mask from absolute positions, grouped heads native, fully masked blocks skipped.
Chosen with StaticTarget(attention="flex"); "sdpa" (attention.py) stays the default."""
from __future__ import annotations

import sys

import torch

from models.target import attention as span

NAME = "duo_flex"
CHOICES = ("sdpa", "flex")  # StaticTarget's `attention`: today's packed SDPA, or this
DEVICES = ("cpu", "cuda")   # where torch 2.13 compiles flex_attention (CPU: inductor's template)


def unavailable(device: str) -> str | None:
    """Why flex cannot run on `device` with this torch, or None when it can."""
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention  # noqa: F401
    except ImportError as e:
        return f"torch {torch.__version__} has no FlexAttention ({e})"
    kind = torch.device(device).type
    if kind not in DEVICES:
        return f"FlexAttention runs here only on {' and '.join(DEVICES)}, not {kind}"
    return None


def module_for(attention: str, device: str):
    """The attention module the static target drives: attention.py ("sdpa") or this one
    ("flex"); an unknown name, or flex where it cannot run, is refused by name."""
    if attention not in CHOICES:
        raise ValueError(f"unknown attention {attention!r}: choose one of {', '.join(CHOICES)}")
    if attention == "sdpa":
        return span
    reason = unavailable(device)
    if reason:
        raise ValueError(f"attention 'flex' is not available: {reason}")
    return sys.modules[__name__]


def attach(model, size: int, dtype: torch.dtype, device: str) -> list[torch.Tensor]:
    """attention.attach with this attention registered as "duo_flex"."""
    return span.attach(model, size, dtype, device, NAME, flex_span_attention)


detach = span.detach


def masks(model, pos: torch.Tensor, keys: torch.Tensor, start: torch.Tensor | None = None):
    """Block masks (1 batch, all heads, chunk, span) from absolute positions: the query at
    position p sees slot j when j <= p (the chunk causal, everything before it), and in a
    sliding-window layer also j > p - window; blocks no query sees are skipped. A dict by
    layer type when the model mixes layer types (Gemma 3), as attention.masks. `start[0]` is
    pos[0]: the compiled step passes its upload buffer (a graph input; see `_block_mask`)."""
    cfg = model.config.get_text_config(decoder=True)
    types = set(getattr(cfg, "layer_types", None) or ["full_attention"])
    start = pos[:1] if start is None else start
    full = _block_mask(start, pos.shape[0], keys.shape[0], None)
    if types == {"full_attention"}:
        return full
    out = {t: full for t in types}
    if "sliding_attention" in types:
        out["sliding_attention"] = _block_mask(start, pos.shape[0], keys.shape[0],
                                               cfg.sliding_window)
    return out


def _block_mask(start: torch.Tensor, chunk: int, span_len: int, window: int | None):
    """Query q sits at start[0] + q. Written for torch 2.13's inductor CPU template (measured):
    it takes a captured graph input, not positions computed in the graph (NoValidChoicesError),
    and compares in float32 (an int64 compare fails its C++ VecMask types); exact below 2**24."""
    from torch.nn.attention.flex_attention import create_block_mask

    def seen(b, h, q, kv):
        back, first = (kv - q).to(torch.float32), start[0].to(torch.float32)
        ok = back <= first
        return ok & (back > first - window) if window else ok

    return create_block_mask(seen, None, None, chunk, span_len, device=start.device)


def kernel_options(query: torch.Tensor) -> dict | None:
    """IEEE float32 dots on cuda: torch before 2.13 gives a compiled float32 flex kernel TF32
    unless torch.backends.cuda.matmul.fp32_precision says "ieee" (its default "none" read as
    TF32; 5e-3 off the eager SDPA on the first H100 run, under torch 2.11). float32 is the
    oracle's precision here, and TF32 is never switched on."""
    if query.is_cuda and query.dtype == torch.float32:
        return {"FLOAT32_PRECISION": "'ieee'"}
    return None


def flex_span_attention(module, query, key, value, attention_mask, dropout: float = 0.0,
                        scaling: float | None = None, duo_pos=None, duo_keys=None, **kwargs):
    """Write this chunk's K/V at `duo_pos`, then flex_attention over the first len(duo_keys)
    slots with the block mask; K/V heads are shared by their query heads (enable_gqa)."""
    from torch.nn.attention.flex_attention import flex_attention

    k, v = span.write(module, key, value, duo_pos, duo_keys.shape[0])
    out = flex_attention(query, k, v, block_mask=attention_mask, scale=scaling,
                         enable_gqa=True, kernel_options=kernel_options(query))
    return out.transpose(1, 2).contiguous(), None
