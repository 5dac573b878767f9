"""The eager CPU target's linear layers on oneDNN's packed weights.

torch's float32 product of a few rows (a verify chunk of 3 to 32 tokens) by a weight matrix
runs MKL's generic kernel, which costs far more than reading the weights (Gemma 3 270M's
262k-row LM head, 2-core Intel Xeon VM: 8 rows 171 ms, 16 rows 144). oneDNN's kernel on a
copy of the weight laid out in its blocked format once at load stays near the cost of
reading it (8 rows 64 ms). One or two rows keep torch's own product (as fast for one, faster
for two). Same float32 arithmetic summed in another order: greedy output stays `vanilla`'s
(tests/test_target_packed.py). `duo` on 7 project prompts, 2-core AMD EPYC VM, 2026-12-02:
gemma-smol 17.2 -> 25.7-27.5 tokens/s, smol-self 33.0 -> 33.0-39.4 (two runs each).

The copy doubles the linear layers' memory, so only a float32 CPU target whose copy fits the
available RAM with a margin is packed; cuda never (cuBLAS has no such gap), nor a quantized
or compiled target (inductor lowers the packed product only for a frozen graph)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from models.fit.memory import GIB, meminfo_available

LAYOUT_ROWS = 16  # the row count oneDNN lays the weights out for (chunks run 2..32)
MARGIN = GIB // 2  # RAM left free after the copy, at least
PACKED_FROM = 3  # rows
_OP = torch.ops.mkldnn._linear_pointwise.default


class PackedLinear(nn.Module):
    """An nn.Linear (its weight and bias shared, not copied) whose products of PACKED_FROM
    rows or more run on the packed copy of its weight."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.weight, self.bias = linear.weight, linear.bias
        self.in_features, self.out_features = linear.in_features, linear.out_features
        packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), LAYOUT_ROWS)
        self.register_buffer("packed", packed, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1])
        if rows.shape[0] < PACKED_FROM:
            return F.linear(x, self.weight, self.bias)
        out = _OP(rows, self.packed, self.bias, "none", [], "")
        return out.reshape(*x.shape[:-1], self.out_features)


def choose(device: str, dtype: torch.dtype, quant: str, model: nn.Module,
           free: int | None = None) -> tuple[bool, str]:
    """(pack, why): packed where the target is float32 on the CPU, unquantized, and the copy
    fits `free` bytes of available RAM (None: read it) with MARGIN to spare."""
    if device.startswith("cuda"):
        return False, "not packed: the target is on cuda"
    if quant != "none":
        return False, f"not packed: the {quant} target's layers are torchao's"
    if dtype != torch.float32:
        kind = str(dtype).removeprefix("torch.")
        return False, f"not packed: float32 only (the target is {kind})"
    if not torch.backends.mkldnn.is_available():
        return False, "not packed: this torch build has no oneDNN"
    need = linear_bytes(model)
    free = meminfo_available() if free is None else free
    if free is not None and free < need + MARGIN:
        return False, (f"not packed: the packed copy ({need / GIB:.1f} GiB) does not fit beside "
                       f"{free / GIB:.1f} GiB of available RAM")
    return True, "multi-row products on oneDNN's packed weights"


def linear_bytes(model: nn.Module) -> int:
    return sum(m.weight.numel() * m.weight.element_size() for m in model.modules()
               if isinstance(m, nn.Linear))


def pack(model: nn.Module) -> int:
    """Every nn.Linear of `model` replaced by a PackedLinear; returns how many."""
    done = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Linear):
                setattr(parent, name, PackedLinear(child))
                done += 1
    return done
