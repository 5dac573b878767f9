"""Will the target fit? Parameter count from a config.json, and free GPU memory or available RAM,
checked before a 7B target is loaded so the user gets a sentence instead of an out-of-memory crash."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from models.catalog import PairError

GIB = 1024 ** 3
MEMINFO = Path("/proc/meminfo")
# Families whose MLP has two matrices (up, down); the rest (Llama, Qwen, Gemma, ...) gate with three.
UNGATED_MLP = {"gpt2", "gpt_neox", "gptj", "opt", "bloom", "falcon", "phi", "starcoder2", "gpt_bigcode"}
DTYPE_NAMES = {1: "int8", 2: "bf16", 4: "fp32"}


@dataclass(frozen=True)
class Shape:
    """The sizes of a decoder-only transformer that decide its parameter count."""
    hidden: int
    layers: int
    vocab: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    experts: int = 1
    gated_mlp: bool = True
    tied: bool = False

    @classmethod
    def from_config(cls, config: dict) -> "Shape":
        c = config.get("text_config") or config
        h = _first(c, "hidden_size", "n_embd", "d_model")
        heads = _first(c, "num_attention_heads", "n_head", default=max(1, h // 128))
        return cls(hidden=h, layers=_first(c, "num_hidden_layers", "n_layer", "num_layers"),
                   vocab=_first(c, "vocab_size"),
                   intermediate=_first(c, "intermediate_size", "n_inner", "ffn_dim", default=4 * h),
                   heads=heads, kv_heads=_first(c, "num_key_value_heads", default=heads),
                   head_dim=_first(c, "head_dim", default=h // heads),
                   experts=_first(c, "num_local_experts", "num_experts", default=1),
                   gated_mlp=c.get("model_type") not in UNGATED_MLP,
                   tied=bool(config.get("tie_word_embeddings", c.get("tie_word_embeddings", False))))

    def parameters(self) -> int:
        attn = 2 * self.hidden * self.heads * self.head_dim + 2 * self.hidden * self.kv_heads * self.head_dim
        mlp = (3 if self.gated_mlp else 2) * self.hidden * self.intermediate * self.experts
        embed = self.vocab * self.hidden * (1 if self.tied else 2)
        return self.layers * (attn + mlp + 2 * self.hidden) + embed + self.hidden


def _first(c: dict, *keys: str, default: int | None = None) -> int:
    for k in keys:
        if c.get(k):
            return int(c[k])
    if default is None:
        raise PairError(f"config.json has none of {', '.join(keys)}; cannot size the model")
    return default


def estimate_bytes(config: dict, dtype_bytes: int = 2) -> int:
    """Weights plus headroom for the KV cache and activations (10%, at least 0.5 GiB)."""
    weights = Shape.from_config(config).parameters() * dtype_bytes
    return weights + max(weights // 10, GIB // 2)


def check_target_fits(config: dict, device: str, dtype_bytes: int) -> None:
    """Raise PairError saying how much is needed and how much is free when the target won't fit."""
    free, where = free_bytes(device)
    if free is None:
        return
    need = estimate_bytes(config, dtype_bytes)
    if need > free:
        params = Shape.from_config(config).parameters() / 1e9
        dtype = DTYPE_NAMES.get(dtype_bytes, f"{dtype_bytes}-byte")
        raise PairError(f"the target needs ~{need / GIB:.1f} GiB ({params:.2f}B parameters in {dtype}), "
                        f"only {free / GIB:.1f} GiB free on {where}; pick a smaller pair "
                        f"(python scripts/download_models.py --list) or free some memory")


def check_folder_fits(folder: Path, device: str, dtype_bytes: int) -> None:
    """check_target_fits for a downloaded model folder (the ("hf", folder) of target_source)."""
    check_target_fits(json.loads((Path(folder) / "config.json").read_text()), device, dtype_bytes)


def free_bytes(device: str) -> tuple[int | None, str]:
    """Free memory on the device the target goes to: GPU memory for cuda*, available RAM for cpu."""
    if device.startswith("cuda"):
        return _cuda_free(device)
    if device == "cpu":
        return meminfo_available(), "CPU RAM"
    return None, device


def _cuda_free(device: str) -> tuple[int | None, str]:
    import torch
    if not torch.cuda.is_available():
        return None, device
    dev = torch.device(device)
    free, total = torch.cuda.mem_get_info(dev)
    name = torch.cuda.get_device_name(dev)
    return free, f"{device} ({name}, {total / GIB:.1f} GiB total)"


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


# ---- precision picker (issue 13): weights per precision + KV cache + margin vs free memory ----

PRECISIONS = ("none", "int8", "int4")  # best first; "none" runs in the unquantized dtype
DEFAULT_CTX = 4096
DEFAULT_MARGIN = GIB  # CUDA context, activations, logits, compile workspace
INT4_GROUP = 128      # int4 weights carry a bf16 scale and zero per group of 128
SCALE_BYTES = 2       # int8 carries one bf16 scale per output row


def precision_label(kind: str, base_bytes: int = 2) -> str:
    """'none' is shown as the dtype it runs in (bf16 on cuda, fp32 on the CPU by default)."""
    return DTYPE_NAMES.get(base_bytes, f"{base_bytes}-byte") if kind == "none" else kind


@dataclass(frozen=True)
class ModelDims:
    """What sizes a target without loading it: parameters (and how many sit in quantizable linear
    layers; embeddings and lm_head stay unquantized) and the KV cache per token of context."""
    params: int
    linear_params: int
    layers: int
    kv_heads: int
    head_dim: int
    sliding_window: int | None = None  # tokens a sliding-window layer keeps
    sliding_layers: int = 0

    def kv_bytes(self, ctx: int, dtype_bytes: int = 2) -> int:
        full = kv_cache_bytes(self.layers - self.sliding_layers, self.kv_heads, self.head_dim, ctx, dtype_bytes)
        window = min(ctx, self.sliding_window or ctx)
        return full + kv_cache_bytes(self.sliding_layers, self.kv_heads, self.head_dim, window, dtype_bytes)

    def weights(self, kind: str, base_bytes: int = 2) -> int:
        return weights_bytes(self.linear_params, kind, base_bytes) + (self.params - self.linear_params) * base_bytes

    def needed(self, kind: str, ctx: int, margin: int = DEFAULT_MARGIN, base_bytes: int = 2) -> int:
        return self.weights(kind, base_bytes) + self.kv_bytes(ctx, base_bytes) + margin


def model_dims(config: dict) -> ModelDims:
    """ModelDims of a llama / mistral / qwen2 / gemma3 style config.json (nested text_config too)."""
    shape = Shape.from_config(config)
    c = config.get("text_config") or config
    linear = shape.parameters() - shape.vocab * shape.hidden * (1 if shape.tied else 2) \
        - shape.layers * 2 * shape.hidden - shape.hidden
    types = c.get("layer_types") or []
    window = c.get("sliding_window") if c.get("use_sliding_window", True) else None
    sliding = sum(t == "sliding_attention" for t in types) if window else 0
    return ModelDims(params=shape.parameters(), linear_params=linear, layers=shape.layers,
                     kv_heads=shape.kv_heads, head_dim=shape.head_dim,
                     sliding_window=window if sliding else None, sliding_layers=sliding)


SIZE_KEYS = ("model_type", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
             "head_dim", "intermediate_size", "vocab_size", "tie_word_embeddings", "num_local_experts",
             "num_experts", "sliding_window", "use_sliding_window", "layer_types")


def size_config(config: dict) -> dict:
    """The part of a config.json that model_dims reads (the catalog's target_config)."""
    c = config.get("text_config") or config
    out = {k: c[k] for k in SIZE_KEYS if c.get(k) is not None}
    if "tie_word_embeddings" in config:
        out["tie_word_embeddings"] = config["tie_word_embeddings"]
    return out


def weights_bytes(n_params: int, kind: str, base_bytes: int = 2) -> int:
    """Bytes of n_params weights in one precision: none = base_bytes (bf16 2, fp32 4) per
    parameter, int8 ~1 B + a scale per row (~0.1%), int4 0.5 B + scale and zero per group of 128."""
    if kind == "none":
        return n_params * base_bytes
    if kind == "int8":
        return n_params + n_params * SCALE_BYTES // 2048
    if kind == "int4":
        return n_params // 2 + n_params * 2 * SCALE_BYTES // INT4_GROUP
    raise ValueError(f"unknown precision '{kind}'; known: {', '.join(PRECISIONS)}")


def kv_cache_bytes(n_layers: int, n_kv_heads: int, head_dim: int, ctx: int, dtype_bytes: int = 2) -> int:
    """Keys and values of ctx tokens in every layer."""
    return 2 * n_layers * n_kv_heads * head_dim * ctx * dtype_bytes


class DoesNotFit(PairError):
    """No precision of the target fits the free memory; the message says what would."""


@dataclass(frozen=True)
class QuantPick:
    """The precision `auto` picked (None on the CPU until measured), what each one needs and why."""
    kind: str | None
    needed: dict[str, int]
    fits: tuple[str, ...]
    free: int | None
    reason: str


def pick_quant(dims: ModelDims, ctx: int, free: int | None, device: str, margin: int = DEFAULT_MARGIN,
               base_bytes: int = 2, cpu_choice=None, where: str | None = None) -> QuantPick:
    """The best precision whose weights, KV cache for ctx tokens and margin fit `free` bytes
    (bf16 > int8 > int4) on a GPU. On the CPU the fastest one that fits is picked by measurement:
    cpu_choice(fits) -> kind does that (or is the kind itself); without it kind is None.
    Raises DoesNotFit when nothing fits, naming the largest context that would at int4."""
    where = where or device
    needed = {k: dims.needed(k, ctx, margin, base_bytes) for k in PRECISIONS}
    fits = tuple(k for k in PRECISIONS if free is None or needed[k] <= free)
    if not fits:
        raise DoesNotFit(_refusal(dims, ctx, free, where, margin, base_bytes))
    label = lambda k: precision_label(k, base_bytes)  # noqa: E731
    room = "free memory unknown" if free is None else f"{free / GIB:.1f} GiB free on {where}"
    table = (f"[at {ctx} tokens: " + ", ".join(f"{label(k)} {needed[k] / GIB:.1f}" for k in PRECISIONS)
             + f" GiB, each with {dims.kv_bytes(ctx, base_bytes) / GIB:.1f} GiB KV cache and "
             f"{margin / GIB:.1f} GiB margin]")
    if device == "cpu":
        kind = cpu_choice(fits) if callable(cpu_choice) else cpu_choice
        if kind is None:
            return QuantPick(None, needed, fits, free, f"cpu: the fastest of {', '.join(map(label, fits))} "
                                                       f"by measurement ({room}) {table}")
        if kind not in fits:
            raise DoesNotFit(f"{label(kind)} needs {needed[kind] / GIB:.1f} GiB, {room} {table}")
        return QuantPick(kind, needed, fits, free, f"cpu: picked {label(kind)}, measured fastest ({room}) {table}")
    kind = fits[0]
    better = PRECISIONS[:PRECISIONS.index(kind)]
    why = "; ".join(f"{label(k)} needs {needed[k] / GIB:.1f} GiB" for k in better)
    reason = f"picked {label(kind)} ({needed[kind] / GIB:.1f} GiB{': ' + why if why else ''}; {room}) {table}"
    return QuantPick(kind, needed, fits, free, reason)


def _refusal(dims: ModelDims, ctx: int, free: int, where: str, margin: int, base_bytes: int) -> str:
    weights = dims.weights("int4", base_bytes)
    head = (f"the target does not fit {free / GIB:.1f} GiB free on {where}, not even in int4: it needs "
            f"{dims.needed('int4', ctx, margin, base_bytes) / GIB:.1f} GiB at {ctx} tokens "
            f"({weights / GIB:.1f} GiB weights, {dims.kv_bytes(ctx, base_bytes) / GIB:.1f} GiB KV cache, "
            f"{margin / GIB:.1f} GiB margin)")
    best = max_context(dims, free - weights - margin, base_bytes)
    if best < 1:
        return (f"{head}; its int4 weights and the margin alone do not fit: pick a smaller pair "
                f"(python scripts/download_models.py --list) or free some memory")
    return f"{head}; in int4 it fits with a context of at most {best} tokens"


def max_context(dims: ModelDims, room: int, dtype_bytes: int = 2) -> int:
    """The longest context whose KV cache fits `room` bytes (0 when none does)."""
    if room <= 0:
        return 0
    lo, hi = 0, 1 << 24
    while lo < hi:  # kv_bytes is monotonic; sliding windows make it piecewise linear
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if dims.kv_bytes(mid, dtype_bytes) <= room else (lo, mid - 1)
    return lo


# ---- per pair: what each precision needs, and what this machine would use ------------------

def precision_sizes(s, gpu_free: int | None) -> tuple[dict | None, str]:
    """GiB each precision needs on a GPU (from the catalog's target_config, else a downloaded
    config.json), and what this machine would use: 'cpu' without a GPU, else what `auto` picks."""
    try:
        dims = model_dims(target_config(s))
    except PairError:
        return None, "cpu" if gpu_free is None else "-"
    vram = {precision_label(k): round(dims.needed(k, DEFAULT_CTX) / GIB, 1) for k in PRECISIONS}
    if gpu_free is None:
        return vram, "cpu"
    try:
        return vram, precision_label(pick_quant(dims, DEFAULT_CTX, gpu_free, "cuda").kind)
    except DoesNotFit:
        return vram, "too big"


def target_config(s) -> dict:
    """The target's sizes: the catalog's target_config, or config.json of a downloaded target."""
    if isinstance(s.extra.get("target_config"), dict):
        return s.extra["target_config"]
    from models.catalog import target_source

    kind, folder = target_source(s)
    if kind != "hf":
        raise PairError(f"pair '{s.name}': no target_config and no config.json")
    try:
        return json.loads((folder / "config.json").read_text())
    except (OSError, ValueError) as e:
        raise PairError(f"pair '{s.name}': cannot read {folder / 'config.json'}: {e}") from None
