"""What scripts/gpu_report.py measures with: targets of random weights from a config, the
memory floor of a forward (bytes read over the measured copy bandwidth), forward timing
over a filled cache and its projection from two layer counts."""
from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import torch

from models.fit.memory import kv_cache_bytes, model_dims

# Llama-3.1-8B's shape (random weights: nothing is downloaded or written)
LLAMA_8B = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
            "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
            "vocab_size": 128256, "rope_theta": 500000.0, "max_position_embeddings": 131072,
            "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "head_dim": 128}
# a 2-layer Llama for the CPU mode (seconds); vocabulary room for llama.cpp's byte tokens
TINY = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
        "vocab_size": 320, "rope_theta": 10000.0, "max_position_embeddings": 1024,
        "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "head_dim": 16}
# Full-depth forward rows measured before, (model, precision, dtype) -> ms per chunk@filled:
# a forward projected from fewer layers is checked against them
KNOWN = {("llama8b", "none", "bfloat16"): {
    "machine": "NVIDIA H100 80GB HBM3", "date": "2026-11-27", "path": "compiled",
    "ms": {"1@128": 8.365, "8@128": 8.357, "32@128": 8.491, "1@1024": 8.665,
           "8@1024": 9.480, "32@1024": 9.781, "1@4096": 11.050, "8@4096": 10.941,
           "32@4096": 11.471}}}


def random_model(config: dict, device: str, dtype: torch.dtype):
    """A causal LM of this shape with random weights, built on `device` in `dtype`."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    torch.manual_seed(0)
    cfg = LlamaConfig(**{k: v for k, v in config.items() if k != "model_type"})
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    return model.eval()


def model_source(which: str, device: str, dtype: str, layers: int | None = None):
    """(name, built model or None, int4 group) of a report model: smol-self's converted
    weights, or random weights of the Llama-3.1-8B / tiny shape (`layers` of them: the
    embedding and the head whole)."""
    from models.target.eager import DTYPES

    if which == "smol-self":
        return str(smol_dir(dtype)), None, 32
    config = dict({"llama8b": LLAMA_8B, "tiny": TINY}[which])
    if layers:
        config["num_hidden_layers"] = layers
    return which, random_model(config, device, DTYPES[dtype]), None


def smol_dir(dtype: str) -> Path:
    """smol-self's target converted to safetensors in `dtype` (made on first use)."""
    from models.pairs.catalog import get_pair, target_source
    from models.pairs.convert import converted_dir

    return converted_dir(target_source(get_pair("smol-self"))[1], None, dtype)


def model_config(which: str, dtype: str) -> dict:
    if which == "smol-self":
        return json.loads((smol_dir(dtype) / "config.json").read_text())
    return {"llama8b": LLAMA_8B, "tiny": TINY}[which]


def make_target(path: str, name: str, device: str, dtype: str, n_ctx: int, quant: str,
                buckets: tuple[int, ...], model=None, group: int | None = None):
    """The target of one path ('eager', 'static' or 'compiled') on a built model or a folder."""
    from models.target.static import StaticTarget
    from models.target.eager import TorchTarget

    if path == "eager":
        return TorchTarget(name, device, n_ctx, dtype, quant, group, None, model=model)
    return StaticTarget(name, device, n_ctx, dtype, compile=path == "compiled",
                        buckets=buckets, quant=quant, quant_group=group, model=model)


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def time_forwards(target, lengths: list[int], chunks: list[int], repeats: int = 5) -> dict:
    """Median seconds of a chunk forward after `length` cached tokens: the cache is filled
    once, then rolled back to each length before every timed forward (warm-up excluded)."""
    top = max(lengths) + max(chunks)
    ids = [(i * 37) % 200 + 3 for i in range(top)]
    target.rollback(0)
    target.logits(ids[:top], 1)
    out = {}
    for n in sorted(lengths, reverse=True):  # an eager cache only shrinks: longest first
        for c in chunks:
            times = []
            for _ in range(repeats + 1):
                target.rollback(n)
                target.synchronize()
                t0 = time.perf_counter()
                target.logits(ids[n:n + c], 1)
                target.synchronize()
                times.append(time.perf_counter() - t0)
            out[f"{c}@{n}"] = statistics.median(times[1:])
    target.rollback(0)
    return out


def copy_bandwidth(device: str, nbytes: int, repeats: int = 5) -> float:
    """Bytes/s of a device-to-device copy (each byte read once and written once)."""
    a = torch.empty(nbytes, dtype=torch.uint8, device=device)
    b = torch.empty_like(a)
    times = []
    for _ in range(repeats + 1):
        sync(device)
        t0 = time.perf_counter()
        b.copy_(a)
        sync(device)
        times.append(time.perf_counter() - t0)
    del a, b
    return 2 * nbytes / statistics.median(times[1:])


def read_bytes(config: dict, kind: str, filled: int, base_bytes: int = 2) -> int:
    """Bytes one forward must read: every weight but the input embedding (a few rows), and
    the keys and values of the filled length."""
    dims = model_dims(config)
    embed = 0 if config.get("tie_word_embeddings") else config["vocab_size"] * config[
        "hidden_size"] * base_bytes
    kv = kv_cache_bytes(dims.layers, dims.kv_heads, dims.head_dim, filled, base_bytes)
    return dims.weights(kind, base_bytes) - embed + kv


def floors(config: dict, kind: str, lengths: list[int], bandwidth: float,
           base_bytes: int = 2) -> dict:
    """The memory floor (s) at each filled length."""
    return {str(n): read_bytes(config, kind, n, base_bytes) / bandwidth for n in lengths}


def copy_floors(config: dict, lengths: list[int], bandwidth: float, base_bytes: int = 2) -> dict:
    """int8's floor (s) when the cast to the base dtype does not fold into the matmul (a chunk of 2+
    rows): its int8 bytes, plus a base-dtype copy of every linear weight written and read again."""
    copies = 2 * model_dims(config).linear_params * base_bytes
    return {str(n): (read_bytes(config, "int8", n, base_bytes) + copies) / bandwidth
            for n in lengths}


def per_layer(times: dict[int, float], layers: int) -> float:
    """Project a time to `layers` layers from two measured layer counts (linear)."""
    (a, ta), (b, tb) = sorted(times.items())[:2]
    return ta + (layers - a) * (tb - ta) / (b - a)


def free_cuda() -> None:
    import gc

    torch._dynamo.reset()  # compiled graphs (and their CUDA graph pools) hold the weights
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
