"""Will the target fit? Free GPU memory or available RAM against what the target needs
(models/fit/footprint.py), and the precision and window picked from them, so the user gets a
sentence instead of an out-of-memory crash."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from models.pairs.catalog import PairError
from models.fit.footprint import (GIB, ModelDims, kv_cache_bytes, margin_bytes,  # noqa: F401
                              max_context, model_dims, size_config, trained_window)

MEMINFO = Path("/proc/meminfo")
DTYPE_NAMES = {1: "int8", 2: "bf16", 4: "fp32"}
DTYPE_LABELS = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def estimate_bytes(config: dict, dtype_bytes: int = 2) -> int:
    """Weights plus headroom for the KV cache and activations (10%, at least 0.5 GiB)."""
    weights = model_dims(config).parameters() * dtype_bytes
    return weights + max(weights // 10, GIB // 2)


def free_bytes(device: str) -> tuple[int | None, str]:
    """Free memory on the device the target goes to: GPU memory for cuda*, available RAM for cpu."""
    free, _, where = device_memory(device)
    return free, where


def device_memory(device: str) -> tuple[int | None, int | None, str]:
    """(free, total, where): GPU memory for cuda*, available RAM (no total) for cpu."""
    if device == "cpu":
        return meminfo_available(), None, "CPU RAM"
    import torch

    if not device.startswith("cuda") or not torch.cuda.is_available():
        return None, None, device
    free, total = torch.cuda.mem_get_info(torch.device(device))
    name = torch.cuda.get_device_name(torch.device(device))
    return free, total, f"{device} ({name}, {total / GIB:.1f} GiB total)"


def meminfo_available(path: Path | None = None) -> int | None:
    """MemAvailable from /proc/meminfo in bytes; None where the file is missing (not Linux)."""
    path = path or MEMINFO
    try:
        for line in path.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


# ---- precision picker: weights in each precision + KV cache + working memory + margin --------

PRECISIONS = ("none", "int8", "int4")  # best first; "none" runs in the unquantized dtype
DEFAULT_CTX = 8192  # the default window: min(trained window, this), shrunk to what fits
FLOOR_CTX = 4096    # a precision is kept while it holds this many tokens (or the trained window)
CPU_MARGIN = GIB    # RAM left unused on the CPU
MIN_CTX = 64        # the shortest window --ctx-size takes
GGUF_GROUP = 32     # int4 group of a target converted from a GGUF (its blocks are 32 wide)


def precision_label(kind: str, base_bytes: int = 2) -> str:
    """'none' is shown as the dtype it runs in (bf16 on cuda, fp32 on the CPU by default)."""
    return DTYPE_NAMES.get(base_bytes, f"{base_bytes}-byte") if kind == "none" else kind


@dataclass(frozen=True)
class Budget:
    """The memory a target may take: free bytes on its device (None: unknown), the card's
    total (sizes the margin), its base dtype's width and int4 group (None: 128)."""
    device: str
    free: int | None
    total: int | None = None
    base_bytes: int = 2
    group: int | None = None
    where: str = ""
    dtype: str | None = None  # the base dtype's name, for labels (fp16 and bf16 are both 2 bytes)

    def label(self, kind: str) -> str:
        """How a precision is shown: 'none' as the dtype it runs in."""
        if kind != "none":
            return kind
        return DTYPE_LABELS.get(self.dtype) or precision_label(kind, self.base_bytes)

    @property
    def cuda(self) -> bool:
        return self.device.startswith("cuda")

    @property
    def margin(self) -> int:
        return margin_bytes(self.total or self.free) if self.cuda else CPU_MARGIN

    def needed(self, dims: ModelDims, kind: str, ctx: int) -> int:
        return dims.needed(kind, ctx, self.margin, self.base_bytes, self.group, padded=self.cuda)

    def fits(self, dims: ModelDims, kind: str, ctx: int) -> bool:
        return self.free is None or self.needed(dims, kind, ctx) <= self.free

    def longest(self, dims: ModelDims, kind: str) -> int:
        """The longest window that fits in `kind` (0 when none does)."""
        return max_context(lambda ctx: self.fits(dims, kind, ctx))


def device_budget(device: str, dtype: str = "bfloat16", group: int | None = None) -> Budget:
    """The Budget of `device` now for a target in `dtype` (a torch dtype's name): free and total
    GPU memory on cuda, available RAM on the CPU."""
    free, where = free_bytes(device)
    total = device_memory(device)[1] if free is not None else None
    return Budget(device, free, total, DTYPE_BYTES[dtype], group, where, dtype)


def pick_window(dims: ModelDims, want: int, budget: Budget, kinds=PRECISIONS) -> tuple[int, str]:
    """(window, precision): `want` tokens (or fewer) in the best precision holding at least
    min(want, FLOOR_CTX); with none, what the last one (int4) holds (0: not even one token)."""
    fit = 0
    for kind in kinds:
        fit = min(want, budget.longest(dims, kind))
        if fit >= min(want, FLOOR_CTX):
            return fit, kind
    return fit, kinds[-1]


class DoesNotFit(PairError):
    """No precision of the target fits the free memory; the message says what would."""


@dataclass(frozen=True)
class QuantPick:
    """The precision `auto` picked, what each one needs and why."""
    kind: str
    needed: dict[str, int]
    fits: tuple[str, ...]
    free: int | None
    reason: str


def pick_quant(dims: ModelDims, ctx: int, budget: Budget, runs=PRECISIONS) -> QuantPick:
    """The best precision whose weights, KV cache for ctx tokens, working memory and margin fit
    the budget (unquantized > int8 > int4), on a GPU and on the CPU alike: a smaller one only
    when memory forces it. Only the kinds in `runs` (those that run here) are picked. Raises
    DoesNotFit when nothing fits, naming the longest context that would in int4."""
    needed = {k: budget.needed(dims, k, ctx) for k in PRECISIONS}
    fits = tuple(k for k in PRECISIONS if k in runs and budget.fits(dims, k, ctx))
    if not fits:
        raise DoesNotFit(_refusal(dims, ctx, budget))
    label = budget.label
    room = "free memory unknown" if budget.free is None else \
        f"{budget.free / GIB:.1f} GiB free on {budget.where or budget.device}"
    kind = fits[0]
    why = "; ".join(f"{label(k)} needs {needed[k] / GIB:.1f} GiB"
                    for k in PRECISIONS[:PRECISIONS.index(kind)] if k in runs)
    note = f"; {INT8_COST}" if kind == "int8" and budget.cuda else ""
    reason = (f"picked {label(kind)} ({needed[kind] / GIB:.1f} GiB{': ' + why if why else ''}; "
              f"{room}{note}) {_table(dims, ctx, budget, needed)}")
    return QuantPick(kind, needed, fits, budget.free, reason)


INT8_COST = ("int8 saves memory and costs speed on cuda: a verify chunk of 2+ rows writes and "
             "reads a bf16 copy of each weight (about 5 bytes a weight against bf16's 2)")


def _table(dims: ModelDims, ctx: int, budget: Budget, needed: dict[str, int]) -> str:
    b = budget.base_bytes
    return (f"[at {ctx} tokens: " + ", ".join(f"{budget.label(k)} {needed[k] / GIB:.1f}" for k in PRECISIONS)
            + f" GiB, each with {dims.kv_bytes(ctx, b) / GIB:.1f} GiB KV cache, "
            f"{dims.work_bytes(ctx, b) / GIB:.1f} GiB working memory and {budget.margin / GIB:.1f} GiB margin]")


def _refusal(dims: ModelDims, ctx: int, budget: Budget) -> str:
    b, where = budget.base_bytes, budget.where or budget.device
    weights = dims.weights("int4", b, budget.group, budget.cuda)
    head = (f"the target does not fit {budget.free / GIB:.1f} GiB free on {where}, not even in int4: it "
            f"needs {budget.needed(dims, 'int4', ctx) / GIB:.1f} GiB at {ctx} tokens ({weights / GIB:.1f} GiB "
            f"weights, {dims.kv_bytes(ctx, b) / GIB:.1f} GiB KV cache, {dims.work_bytes(ctx, b) / GIB:.1f} GiB "
            f"working memory, {budget.margin / GIB:.1f} GiB margin)")
    best = budget.longest(dims, "int4")
    if best < 1:
        return (f"{head}; its int4 weights and the margin alone do not fit: pick a smaller pair "
                f"(python scripts/download_models.py --list) or free some memory")
    return f"{head}; in int4 it fits with a context of at most {best} tokens (--ctx-size {best})"


# ---- per pair: what each precision needs, and what this machine would use ------------------

def pair_window(config: dict) -> int:
    """The default window of a target: min(trained window, DEFAULT_CTX)."""
    return min(trained_window(config), DEFAULT_CTX)


def pair_sizes(s, gpu_free: int | None, gpu_total: int | None = None) -> dict:
    """For --list and the app: the pair's default window, the GiB each precision needs there on
    a GPU (weights, KV cache, working memory; the margin comes on top) and what this machine
    would use: 'cpu' without a GPU, else the precision and window `auto` picks."""
    try:
        config = target_config(s)
        dims = model_dims(config)
    except PairError:
        return {"window": None, "vram": None, "use": "cpu" if gpu_free is None else "-", "use_ctx": None}
    want = pair_window(config)
    group = GGUF_GROUP if str(s.target.get("file", "")).endswith(".gguf") else None
    bare = Budget("cuda", None, group=group)
    vram = {precision_label(k): round((bare.needed(dims, k, want) - bare.margin) / GIB, 1) for k in PRECISIONS}
    out = {"window": want, "vram": vram, "use": "cpu", "use_ctx": None}
    if gpu_free is not None:
        ctx, kind = pick_window(dims, want, Budget("cuda", gpu_free, gpu_total, group=group))
        out.update(use=precision_label(kind) if ctx >= MIN_CTX else "too big",
                   use_ctx=ctx if ctx >= MIN_CTX else None)
    return out


def target_config(s) -> dict:
    """The target's sizes: the catalog's target_config, or config.json of a downloaded target."""
    if isinstance(s.extra.get("target_config"), dict):
        return s.extra["target_config"]
    from models.pairs.catalog import target_source

    kind, folder = target_source(s)
    if kind != "hf":
        raise PairError(f"pair '{s.name}': no target_config and no config.json")
    try:
        return json.loads((folder / "config.json").read_text())
    except (OSError, ValueError) as e:
        raise PairError(f"pair '{s.name}': cannot read {folder / 'config.json'}: {e}") from None
