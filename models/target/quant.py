"""Weight-only int8/int4 quantization of a transformers causal LM's linear layers with torchao,
in place, and a safetensors cache of the quantized weights (never pickle)."""
from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import tempfile
import time
import warnings
from contextlib import contextmanager
from pathlib import Path

import torch

QUANTS = ("none", "int8", "int4")
GROUP_SIZES = (128, 64, 32)  # int4 group size: the largest that divides every in_features
CACHE_FORMAT = 1


def quiet_torchao() -> None:
    """torchao's import notes (models/quiet.py: they change nothing that runs), and a hashing
    note transformers' from_pretrained gives about its tensors."""
    from models.quiet import quiet_imports

    quiet_imports()
    warnings.filterwarnings("ignore", message=".*does not implement _stable_hash_for_caching")


quiet_torchao()


def _torchao():
    import torchao.quantization as q
    return q


def supported(kind: str, device: str, dtype: torch.dtype) -> tuple[bool, str]:
    """Whether `kind` runs for weights of `dtype` on `device`, and why not."""
    if kind not in QUANTS:
        return False, f"unknown target quantization '{kind}'; known: {', '.join(QUANTS)}"
    if kind == "none":
        return True, "unquantized"
    try:
        _torchao()
    except ImportError as e:
        return False, f"{kind} needs torchao (pip install -r requirements.txt): {e}"
    dev = torch.device(device).type
    if dtype not in (torch.float32, torch.bfloat16, torch.float16):
        return False, f"{kind} quantizes float weights, not {dtype}"
    if kind == "int8":
        return (True, "int8 weight-only, per-row scales") if dev in ("cpu", "cuda") else \
            (False, f"int8 is not supported on {device} (cpu and cuda are)")
    if dev == "cpu":
        return _int4_on_cpu(dtype)
    if dev == "cuda":
        return _int4_on_cuda(device, dtype)
    return False, f"int4 is not supported on {device} (cpu and cuda are)"


def _int4_on_cuda(device: str, dtype: torch.dtype) -> tuple[bool, str]:
    """cuda int4 is torch's tinygemm kernel (tile-packed weights): bfloat16, sm80 or newer."""
    if dtype != torch.bfloat16:
        return False, f"int4 on cuda needs bfloat16 weights (tinygemm kernel), not {dtype}; use --target-dtype bfloat16"
    if torch.cuda.is_available():
        cc = torch.cuda.get_device_capability(torch.device(device))
        if cc[0] < 8:
            return False, f"int4 on cuda needs compute capability 8.0 or newer, {device} has {cc[0]}.{cc[1]}"
    return True, "int4 weight-only, cuda tinygemm tile packing"


def _int4_on_cpu(dtype: torch.dtype) -> tuple[bool, str]:
    """torch's CPU int4 kernel is vectorized for bfloat16 only on x86 (AVX2, AVX512); float32
    and float16 run a scalar loop there (measured 4x slower than float32 weights for one token,
    15x for eight). On ARM it is vectorized for every dtype."""
    if not hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu"):
        return False, f"int4 on the CPU needs torch's _weight_int4pack_mm_for_cpu ({torch.__version__} lacks it)"
    isa = torch.backends.cpu.get_cpu_capability()
    if platform.machine().lower() in ("aarch64", "arm64"):
        return True, "int4 weight-only, CPU tinygemm packing (NEON)"
    if isa not in ("AVX2", "AVX512"):
        return False, f"int4 is unavailable on this CPU: torch has no vectorized int4 kernel for it ({isa})"
    if dtype != torch.bfloat16:
        return False, (f"int4 on this CPU needs bfloat16 activations (--target-dtype bfloat16): torch's "
                       f"{isa} int4 kernel is vectorized for bfloat16 only, {dtype} runs a scalar loop")
    return True, f"int4 weight-only, CPU tinygemm packing ({isa})"


def quantize(model: torch.nn.Module, kind: str, device: str, group: int | None = None) -> None:
    """Quantize the model's linear layers in place for `device`; embeddings and lm_head stay as
    they are (as transformers' TorchAoConfig leaves them: lm_head decides the top-1 token, and a
    tied one would be stored twice). A model still on the CPU goes to a GPU layer by layer, each
    linear quantized as it arrives, so a bf16 model larger than the GPU is never whole on it.
    group: int4 group size; None picks the largest of 128/64/32 that fits. A target dequantized
    from a GGUF wants 32, its blocks' size: SmolLM2's Q4_1 weights then stay almost exact
    (top-1 agreement with float32 0.99 at 32, 0.75 at 64)."""
    dtype = getattr(model, "dtype", None) or next(model.parameters()).dtype
    ok, why = supported(kind, device, dtype)
    if not ok:
        raise ValueError(why)
    if kind == "none":
        return
    q = _torchao()
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    linears = {m for m in model.modules() if isinstance(m, torch.nn.Linear) and m is not head}
    move = None if torch.device(device).type == "cpu" else device
    config = config_for(kind, device, group or group_size(linears))
    with process_settings_kept():  # quantize_ sets torchao's inductor settings for good
        q.quantize_(model, config, filter_fn=lambda m, fqn: m in linears, device=move)


@contextmanager
def process_settings_kept():
    """torchao's quantize_ sets process-wide inductor settings (coordinate-descent tuning, the
    int8 matmul fused with its scale, ...; older versions also float32 matmul precision): the
    inductor config and the matmul precision are put back as they were after the block, so a
    later float32 comparison or compile is not changed by an earlier quantized load. The
    quantized target's own compile asks for them (inductor_options)."""
    config = torch._inductor.config
    saved, precision = config.save_config(), torch.get_float32_matmul_precision()
    try:
        yield
    finally:
        config.load_config(saved)
        torch.set_float32_matmul_precision(precision)


def inductor_options(tuning: bool | None = None) -> dict:
    """torchao's recommended inductor settings for quantized weights, as the options of one
    torch.compile (they apply to that compile only): the names and values its
    recommended_inductor_config_setter sets, read from it into a scratch config. Its
    coordinate-descent tuning only with `tuning` (None: DUO_QUANT_TUNING=on): it made the
    compiles of the 8B int4 forward and of smol-self's int8 overrun their minutes on an H100
    (2026-11-27), for a speed not yet measured against the compile without it."""
    _torchao()
    from torchao.quantization.utils import recommended_inductor_config_setter

    if tuning is None:
        tuning = os.environ.get("DUO_QUANT_TUNING", "off") == "on"
    config = torch._inductor.config
    before = config.get_config_copy()
    with process_settings_kept():
        recommended_inductor_config_setter()
        after = config.get_config_copy()
    return {k: v for k, v in after.items() if before.get(k) != v
            and (tuning or not k.startswith("coordinate_descent"))}


def config_for(kind: str, device: str, group: int) -> object:
    """The torchao config: int8 per-row; int4 tile-packed for cuda's tinygemm, opaque-packed
    (torchao.prototype) for the CPU's _weight_int4pack_mm_for_cpu."""
    q = _torchao()
    if kind == "int8":
        return q.Int8WeightOnlyConfig()
    if torch.device(device).type == "cuda":
        return q.Int4WeightOnlyConfig(group_size=group, int4_packing_format="tile_packed_to_4d")
    from torchao.prototype.quantization.int4 import PrototypeInt4WeightOnlyConfig
    return PrototypeInt4WeightOnlyConfig(group_size=group)


def group_size(linears) -> int:
    """The largest int4 group size dividing every layer's in_features (SmolLM2-135M: 576 -> 64)."""
    for g in GROUP_SIZES:
        if all(m.in_features % g == 0 for m in linears):
            return g
    raise ValueError(f"int4 needs in_features divisible by {GROUP_SIZES[-1]}")


# ---- cache: quantized weights as safetensors + JSON metadata (torchao's flatten format) ------

def load_or_quantize(model_dir: str | Path, kind: str, device: str, dtype: torch.dtype,
                     group: int | None = None, progress=None):
    """The target in `kind` on `device`: from the quantized cache when it holds this model for
    this machine, else loaded (on the CPU), quantized onto `device` and cached for next time."""
    from transformers import AutoModelForCausalLM

    from models.pairs.convert import say
    folder = cache_dir(model_dir, kind, device, dtype, group)
    if kind != "none":
        t0 = time.perf_counter()
        model = load_quantized(folder, kind, device, dtype, group)
        if model is not None:
            say(progress, f"loaded the {kind} target from {folder} in {time.perf_counter() - t0:.1f} s")
            return model
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=dtype,
                                                 use_safetensors=True).eval()
    if kind == "none":
        return model.to(device)
    say(progress, f"quantizing the target to {kind} (first load only)")
    t0 = time.perf_counter()
    quantize(model, kind, device, group)
    model.to(device)
    save_quantized(model, folder, kind, device, group)
    say(progress, f"quantized the target to {kind} in {time.perf_counter() - t0:.1f} s -> {folder}")
    return model


def cache_dir(model_dir: str | Path, kind: str, device: str, dtype: torch.dtype, group: int | None = None) -> Path:
    """Where the quantized copy of a model folder goes, named by the folder (a converted GGUF is
    named by its hash, a Hub snapshot by its commit) and a hash of its path."""
    from models.pairs.convert import cache_root
    folder = Path(model_dir).resolve()
    where = hashlib.sha256(str(folder).encode()).hexdigest()[:8]
    g = f"-g{group}" if group and kind == "int4" else ""
    dt = str(dtype).removeprefix("torch.")
    return cache_root() / "quantized" / f"{folder.name}-{where}-{kind}{g}-{torch.device(device).type}-{dt}"


WEIGHTS = "model.safetensors"
STAMP = "quant.json"


def cache_key(kind: str, device: str, dtype: torch.dtype, group: int | None = None) -> dict:
    """What a cached file is only valid for: the CPU int4 packing depends on the CPU's vector
    width (torch packs 64 columns per block with AVX512, 32 with AVX2), the others on versions."""
    import torchao
    key = {"format": CACHE_FORMAT, "kind": kind, "device": torch.device(device).type,
           "dtype": str(dtype).removeprefix("torch."), "torch": torch.__version__.split("+")[0],
           "torchao": torchao.__version__, "group": group if kind == "int4" else None}
    if key["device"] == "cpu" and kind == "int4":
        key["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    return key


def save_quantized(model: torch.nn.Module, folder: str | Path, kind: str, device: str,
                   group: int | None = None) -> Path:
    """Write the quantized weights (safetensors, tensor-subclass layout in the header's JSON
    metadata), config.json and quant.json; atomic: a folder is complete or absent."""
    from safetensors.torch import save_file
    from torchao.prototype.safetensors.safetensors_support import flatten_tensor_state_dict

    _allow_cpu_int4()
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)  # a folder of this writer's own:
    tmp = Path(tempfile.mkdtemp(prefix=folder.name + ".", suffix=".tmp", dir=folder.parent))
    tied = _tied_keys(model)
    state = {k: v for k, v in model.state_dict().items() if k not in tied}
    tensors, meta = flatten_tensor_state_dict(state)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp / WEIGHTS), metadata=meta)
    model.config.save_pretrained(str(tmp))
    (tmp / STAMP).write_text(json.dumps(cache_key(kind, device, model.dtype, group), indent=1) + "\n")
    try:
        shutil.rmtree(folder, ignore_errors=True)
        tmp.rename(folder)
    except OSError:  # another process saved the same model meanwhile: its copy is as good
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def load_quantized(folder: str | Path, kind: str, device: str, dtype: torch.dtype, group: int | None = None):
    """The model saved by save_quantized, or None when the folder is missing or was written for
    another machine or library version (the caller then quantizes again and saves)."""
    from accelerate import init_empty_weights
    from safetensors import safe_open
    from transformers import AutoConfig, AutoModelForCausalLM
    from torchao.prototype.safetensors.safetensors_support import unflatten_tensor_state_dict

    folder = Path(folder)
    try:
        if json.loads((folder / STAMP).read_text()) != cache_key(kind, device, dtype, group):
            return None
    except (OSError, ValueError):
        return None
    _allow_cpu_int4()
    with safe_open(str(folder / WEIGHTS), framework="pt", device=str(device)) as f:
        meta = f.metadata()
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    state, rest = unflatten_tensor_state_dict(tensors, meta)
    if rest:
        raise ValueError(f"{folder / WEIGHTS}: tensors {sorted(rest)[:3]} belong to no weight")
    with init_empty_weights(include_buffers=False):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(str(folder)), dtype=dtype)
    unexpected = model.load_state_dict(state, strict=False, assign=True).unexpected_keys
    model.tie_weights()
    missing = [n for n, p in model.named_parameters() if p.is_meta]
    if unexpected or missing:
        raise ValueError(f"{folder}: weights do not match the model (missing {missing[:3]}, "
                         f"unexpected {unexpected[:3]})")
    return model.to(device).eval()


def _tied_keys(model: torch.nn.Module) -> set[str]:
    """State-dict keys that are another weight: lm_head of a tied-embedding model (safetensors
    refuses shared tensors; tie_weights restores it on load)."""
    out, inp = model.get_output_embeddings(), model.get_input_embeddings()
    if out is None or inp is None or out is inp or out.weight is not inp.weight:
        return set()
    return {f"{name}.weight" for name, m in model.named_modules() if m is out}


def _allow_cpu_int4() -> None:
    """Add the CPU int4 tensor (torchao.prototype) to torchao's safetensors allow-list, which
    names the tensor classes it will rebuild from a file's JSON metadata (no pickle either way)."""
    _torchao()
    from torchao.prototype.quantization.int4 import Int4OpaqueTensor
    from torchao.prototype.safetensors import safetensors_utils as u
    u.ALLOWED_CLASSES.setdefault("Int4OpaqueTensor", Int4OpaqueTensor)
    if "Int4OpaqueTensor" not in u.ALLOWED_TENSORS_SUBCLASSES:
        u.ALLOWED_TENSORS_SUBCLASSES.append("Int4OpaqueTensor")
