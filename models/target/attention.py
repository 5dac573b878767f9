"""Attention over what the sequence holds: each attention layer owns a preallocated K/V
buffer written at absolute positions, and attends over its first `span` slots (a length
bucket just past the filled length), never over the whole window, with grouped queries
packed so K/V are never copied per head. Registered with transformers' AttentionInterface
as "duo_span"; models/target/static.py drives it."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import AttentionInterface, AttentionMaskInterface
from transformers.masking_utils import sdpa_mask

from models.fit.footprint import ALIGN  # noqa: F401 - every span is a multiple of it

NAME = "duo_span"
FIRST_SPAN = 256  # the shortest span (a multiple of ALIGN, as the steps after it)


def spans(size: int) -> list[int]:
    """The length buckets up to `size` (the last is `size` itself): 256, 384, 512, 768, ...
    (steps of about sqrt(2)), so attention reads at most 1.5x what the sequence holds, and a
    graph is recorded per bucket, not per length."""
    out, j = [], 0
    while FIRST_SPAN << j < size:
        out += [b for b in (FIRST_SPAN << j, (FIRST_SPAN * 3 // 2) << j) if b < size]
        j += 1
    return out + [size]


def span_for(end: int, buckets: list[int]) -> int:
    """The smallest bucket that holds `end` tokens."""
    return next(b for b in buckets if b >= end)


def attach(model, size: int, dtype: torch.dtype, device: str) -> list[torch.Tensor]:
    """Give every attention layer its K/V buffers (1, kv heads, size, head dim) and switch the
    model to this attention; returns the buffers (static addresses for CUDA graphs)."""
    cfg = model.config.get_text_config(decoder=True)
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    if getattr(cfg, "attn_logit_softcapping", None):
        raise ValueError("attention logit soft-capping (Gemma 2) is not supported by the "
                         "static target; use --target-compile off")
    buffers = []
    for module in attention_layers(model):
        for name in ("duo_k", "duo_v"):
            buf = torch.zeros(1, kv_heads, size, head_dim, dtype=dtype, device=device)
            module.register_buffer(name, buf, persistent=False)
            buffers.append(buf)
    for buf in buffers:
        torch._dynamo.mark_static_address(buf)
    AttentionInterface.register(NAME, span_attention)
    AttentionMaskInterface.register(NAME, sdpa_mask)  # unused: masks() builds them
    model.set_attn_implementation(NAME)
    return buffers


def detach(model) -> None:
    """Drop the buffers (closing the target frees them with the model)."""
    for module in attention_layers(model):
        for name in ("duo_k", "duo_v"):
            module._buffers.pop(name, None)


def attention_layers(model) -> list[torch.nn.Module]:
    layers = [m for m in model.modules() if hasattr(m, "layer_idx") and hasattr(m, "o_proj")]
    if not layers:
        raise ValueError(f"{type(model).__name__}: no attention layers found for the static "
                         "target; use --target-compile off")
    return layers


def masks(model, pos: torch.Tensor, keys: torch.Tensor):
    """Boolean masks (1, 1, chunk, span): position j is seen by the query at position p when
    j <= p, and, in a sliding-window layer, j > p - window. A dict by layer type when the
    model mixes layer types (Gemma 3), as its forward expects."""
    full = (keys[None, :] <= pos[:, None])[None, None]
    cfg = model.config.get_text_config(decoder=True)
    types = set(getattr(cfg, "layer_types", None) or ["full_attention"])
    if types == {"full_attention"}:
        return full
    out = {t: full for t in types}
    if "sliding_attention" in types:
        window = (keys[None, :] > pos[:, None] - cfg.sliding_window)[None, None]
        out["sliding_attention"] = full & window
    return out


def span_attention(module, query, key, value, attention_mask, dropout: float = 0.0,
                   scaling: float | None = None, duo_pos=None, duo_keys=None, **kwargs):
    """Write this chunk's K/V at `duo_pos`, then attend over the first len(duo_keys) slots,
    never repeating K/V per query head: on the CPU SDPA's `enable_gqa`; elsewhere the query
    heads of one K/V head packed side by side (a boolean mask keeps cuda's memory-efficient
    kernel, which takes no grouped heads)."""
    k_buf, v_buf, span = module.duo_k, module.duo_v, duo_keys.shape[0]
    k_buf.index_copy_(2, duo_pos, key.to(k_buf.dtype))
    v_buf.index_copy_(2, duo_pos, value.to(v_buf.dtype))
    k, v = k_buf[:, :, :span], v_buf[:, :, :span]
    if query.device.type == "cpu":  # its SDPA reads K/V in place with enable_gqa (measured)
        out = F.scaled_dot_product_attention(query, k, v, attn_mask=attention_mask,
                                             scale=scaling, enable_gqa=True)
        return out.transpose(1, 2).contiguous(), None
    b, heads, t, d = query.shape
    groups = heads // k.shape[1]
    q = query.reshape(b, k.shape[1], groups * t, d)  # head h = kv head h // groups
    mask = attention_mask.expand(b, 1, t, span).repeat(1, 1, groups, 1) if groups > 1 \
        else attention_mask
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scaling)
    return out.reshape(b, heads, t, d).transpose(1, 2).contiguous(), None
