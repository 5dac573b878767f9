"""The CPU target's linear layers on packed weights (`--target-pack auto|on|off`).

torch's float32 product of a few rows (a verify chunk of 2 to 32 tokens) by a weight matrix
runs MKL's generic kernel, which on the 2-core Intel Xeon VM cost more for 4-15 rows than
for 16 (Gemma 3 270M's 262k-row LM head: 1 row 48 ms, 8 rows 171, 16 rows 144). oneDNN's
kernel on a copy of the weight laid out in its blocked format once at load (what inductor's
freezing pass does for a frozen graph) stays near the cost of reading the weights: 8 rows
64 ms. One or two rows (vanilla's step, a plain round, a one-token draft) keep torch's own
product: as fast for one, faster for two (smol-self compiled: 50 ms against 59 packed).
Same float32 arithmetic, summed in another order: greedy output stays `vanilla`'s (tested).

The copy doubles the linear layers' memory, so `auto` packs only a float32 CPU target whose
copy fits the available RAM with a margin and whose largest layer's 8-row product measured
faster packed on this machine (cached per machine, layer shape and thread count); `on`
packs or says why it cannot; cuda never (cuBLAS has no such gap). Compiled targets call the
packed product as an extern kernel: inductor's own lowering of it assumes a frozen graph's
constant weight (`_graph_calls`)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from models.fit.memory import GIB, meminfo_available
from models.target.modes import PACK_CHOICES

LAYOUT_ROWS = 16  # the row count oneDNN lays the weights out for (chunks run 2..32)
MARGIN = GIB // 2  # RAM left free after the copy, at least
PROBE_ROWS = 8  # auto's timing: a typical verify chunk
PACKED_FROM = 3  # rows (a compiled target keeps a graph for 2 rows apart: one more compile)
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


def choose(mode: str, device: str, dtype: torch.dtype, quant: str, model: nn.Module,
           free: int | None = None, times: dict | None = None,
           remeasure: bool = False) -> tuple[bool, str]:
    """(pack, why) for `--target-pack`; ValueError, naming the option, where `on` cannot be
    honoured. `free`: available RAM in bytes (None: read it); `times`: auto's product times,
    {"torch": s, "packed": s} (None: measured, or read from the cache; `remeasure`: timed
    again)."""
    if mode not in PACK_CHOICES:
        raise ValueError(f"--target-pack must be one of {', '.join(PACK_CHOICES)}, got '{mode}'")
    if mode == "off":
        return False, "off"
    why = _cannot(device, dtype, quant)
    if why is None:
        need = linear_bytes(model)
        free = meminfo_available() if free is None else free
        if free is not None and free < need + MARGIN:
            why = (f"the packed copy ({need / GIB:.1f} GiB) does not fit beside "
                   f"{free / GIB:.1f} GiB of available RAM")
    if why is None and mode == "auto":
        times = times or product_times(model, remeasure)
        if times["packed"] >= times["torch"]:
            why = (f"torch's {PROBE_ROWS}-row product measured faster here "
                   f"({_ms(times['torch'])} against {_ms(times['packed'])} packed)")
    if why is None:
        return True, f"{mode}: multi-row products on oneDNN's packed weights"
    if mode == "on":
        raise ValueError(f"--target-pack on: {why}")
    return False, f"auto: not packed, {why}"


def _cannot(device: str, dtype: torch.dtype, quant: str) -> str | None:
    if device.startswith("cuda"):
        return "packed weights are for a CPU target (this one is on cuda)"
    if quant != "none":
        return f"the {quant} target's layers are torchao's, not packed"
    if dtype != torch.float32:
        return f"packed for float32 only (the target is {str(dtype).removeprefix('torch.')})"
    if not torch.backends.mkldnn.is_available():
        return "this torch build has no oneDNN"
    return None


def product_times(model: nn.Module, remeasure: bool = False) -> dict:
    """{"torch": s, "packed": s}: the least time of a PROBE_ROWS-row product by the model's
    largest linear layer (the LM head, mostly), each way, at torch's thread count now."""
    from models.fit.profiler import machine_key, measured

    weight = max((m.weight for m in model.modules() if isinstance(m, nn.Linear)),
                 key=lambda w: w.numel())
    key = (f"v1|{machine_key()}|pack|{tuple(weight.shape)}|{weight.dtype}|"
           f"threads{torch.get_num_threads()}")
    return measured("target_paths.json", key, lambda: _time_products(weight),
                    remeasure)["value"]


@torch.inference_mode()
def _time_products(weight: torch.Tensor) -> dict:
    from models.fit.profiler import elapsed, interleaved

    x = torch.randn(PROBE_ROWS, weight.shape[1], dtype=weight.dtype)
    packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), LAYOUT_ROWS)
    return interleaved({"torch": lambda: elapsed(lambda: F.linear(x, weight)),
                        "packed": lambda: elapsed(lambda: _OP(x, packed, None, "none", [], ""))})


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms"


def linear_bytes(model: nn.Module) -> int:
    return sum(m.weight.numel() * m.weight.element_size() for m in model.modules()
               if isinstance(m, nn.Linear))


def pack(model: nn.Module) -> int:
    """Every nn.Linear of `model` replaced by a PackedLinear; returns how many."""
    _graph_calls()
    done = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Linear):
                setattr(parent, name, PackedLinear(child))
                done += 1
    return done


_WRAPPED = False


def _graph_calls() -> None:
    """Inductor lowers the packed product only for a frozen graph's constant weight (it
    asserts so); here the packed weight is a buffer, an input of the graph, so the product is
    called as the aten kernel it is. Frozen graphs keep inductor's lowering."""
    global _WRAPPED
    if _WRAPPED:
        return
    from torch._inductor import lowering
    from torch._inductor.virtualized import V

    own = lowering.lowerings[_OP]
    extern = lowering.fallback_handler(_OP, add_to_fallback_set=False)

    def lower(x, w, *args, **kwargs):
        frozen = w.get_name() in V.graph.constants
        return (own if frozen else extern)(x, w, *args, **kwargs)

    lowering.lowerings[_OP] = lower
    _WRAPPED = True
