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
