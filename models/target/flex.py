"""FlexAttention over the static target's K/V buffers (models/target/attention.py writes them):
a block mask from absolute positions, grouped heads native, fully masked blocks skipped.
Chosen with StaticTarget(attention="flex"); "sdpa" (attention.py) stays the default."""
from __future__ import annotations

import torch

from models.target import attention as span

NAME = "duo_flex"
CHOICES = ("sdpa", "flex")  # StaticTarget's `attention`: today's packed SDPA, or this
DEVICES = ("cpu", "cuda")   # where flex_attention runs (eagerly: torch's unfused reference)
# torch 2.13's inductor CPU template compiles flex_attention alone (positions a graph input),
# but not inside the static target's step, whose positions are computed from the upload buffer
NO_CPU_COMPILE = ("torch 2.13's inductor CPU FlexAttention template cannot compile the static "
                  "target's mask: positions computed in the graph fail with NoValidChoicesError "
                  "(a Pointwise capture), a captured input scalar with a C++ VecMask type error; "
                  "use attention 'sdpa' or --target-compile off on the CPU")


def unavailable(device: str, compiled: bool = False) -> str | None:
    """Why flex cannot run on `device` (compiled or eagerly) with this torch, or None."""
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention  # noqa: F401
    except ImportError as e:
        return f"torch {torch.__version__} has no FlexAttention ({e})"
    kind = torch.device(device).type
    if kind not in DEVICES:
        return f"FlexAttention runs here only on {' and '.join(DEVICES)}, not {kind}"
    return NO_CPU_COMPILE if compiled and kind == "cpu" else None


def module_for(attention: str, device: str, compiled: bool = False):
    """The attention module the static target drives: attention.py ("sdpa") or this one
    ("flex"); an unknown name, or flex where it cannot run, is refused by name."""
    if attention not in CHOICES:
        raise ValueError(f"unknown attention {attention!r}: choose one of {', '.join(CHOICES)}")
    if attention == "sdpa":
        return span
    reason = unavailable(device, compiled)
    if reason:
        raise ValueError(f"attention 'flex' is not available: {reason}")
    import sys
    return sys.modules[__name__]


def attach(model, size: int, dtype: torch.dtype, device: str) -> list[torch.Tensor]:
    """attention.attach with this attention registered as "duo_flex"."""
    return span.attach(model, size, dtype, device, NAME, flex_span_attention)


detach = span.detach


def masks(model, pos: torch.Tensor, keys: torch.Tensor):
    """Block masks (1 batch, all heads, chunk, span) from absolute positions: the query at
    position p sees slot j when j <= p (the chunk causal, everything before it), and in a
    sliding-window layer also j > p - window; blocks no query sees are skipped. A dict by
    layer type when the model mixes layer types (Gemma 3), as attention.masks."""
    cfg = model.config.get_text_config(decoder=True)
    types = set(getattr(cfg, "layer_types", None) or ["full_attention"])
    full = _block_mask(pos, keys.shape[0], None)
    if types == {"full_attention"}:
        return full
    out = {t: full for t in types}
    if "sliding_attention" in types:
        out["sliding_attention"] = _block_mask(pos, keys.shape[0], cfg.sliding_window)
    return out


def _block_mask(pos: torch.Tensor, span_len: int, window: int | None):
    from torch.nn.attention.flex_attention import create_block_mask

    def seen(b, h, q, kv):
        ok = kv <= pos[q]
        return ok & (kv > pos[q] - window) if window else ok

    return create_block_mask(seen, None, None, pos.shape[0], span_len, device=pos.device)


def flex_span_attention(module, query, key, value, attention_mask, dropout: float = 0.0,
                        scaling: float | None = None, duo_pos=None, duo_keys=None, **kwargs):
    """Write this chunk's K/V at `duo_pos`, then flex_attention over the first len(duo_keys)
    slots with the block mask; K/V heads are shared by their query heads (enable_gqa)."""
    from torch.nn.attention.flex_attention import flex_attention

    k, v = span.write(module, key, value, duo_pos, duo_keys.shape[0])
    out = flex_attention(query, k, v, block_mask=attention_mask, scale=scaling,
                         enable_gqa=True)
    return out.transpose(1, 2).contiguous(), None
