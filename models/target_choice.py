"""Which target runs: the path (`--target-compile auto|on|off`: the compiled static-cache
target or the eager one) and the weights' precision (`--target-quant auto|none|int8|int4`).
`auto`: on cuda, compiled and the best precision that fits the free memory; on the CPU, what
measured faster on this machine (measured once, cached beside the budget profiles)."""
from __future__ import annotations

import json
from pathlib import Path

from models.convert import cache_root
from models.memory import MIN_CTX, trained_window

COMPILE_CHOICES = ("auto", "on", "off")
QUANT_CHOICES = ("auto", "none", "int8", "int4")
PROBE_SIZES = (1, 8)  # a plain decoding step and a typical verify chunk


def pick_ctx(model_dir: Path, device: str, dtype: str, asked: int | None = None,
             quant: str = "auto", group: int | None = None) -> tuple[int, str]:
    """(context window, why) for `--ctx-size`: what was asked, within the trained window; by
    default min(trained window, 8192), shrunk to what fits beside the best precision that still
    holds 4096 tokens (models/memory.pick_window: weights, KV cache, working memory, margin)."""
    from models.memory import DEFAULT_CTX, device_budget, model_dims, pick_window

    config = json.loads((Path(model_dir) / "config.json").read_text())
    trained = trained_window(config)
    if asked is not None:
        check_ctx_size(asked, trained)
        return asked, "as asked"
    want = min(trained, DEFAULT_CTX)
    default = f"the default, min(trained window {trained}, {DEFAULT_CTX})"
    budget = device_budget(device, dtype, group)
    if budget.free is None:
        return want, default
    kinds = _running(device, dtype) if quant == "auto" else (quant,)
    fit, kind = pick_window(model_dims(config), want, budget, kinds)
    if fit >= want:
        return want, default
    return max(MIN_CTX, fit), f"what {budget.where} holds in {kind} ({default})"


def check_ctx_size(asked: int, trained: int | None = None) -> None:
    """The one rule for `--ctx-size`: MIN_CTX up to the target's trained window (checked
    without it before a model loads, then with it)."""
    if trained is None and asked < MIN_CTX:
        raise ValueError(f"--ctx-size must be at least {MIN_CTX}, got {asked}")
    if trained is not None and not MIN_CTX <= asked <= trained:
        raise ValueError(f"--ctx-size must be {MIN_CTX}..{trained} (the target's trained "
                         f"window), got {asked}")


def _running(device: str, dtype: str) -> tuple[str, ...]:
    """The precisions that run on this device in this dtype, best first (on the CPU all of
    them: the measurement picks among those that run)."""
    from models.memory import PRECISIONS
    from models.quant import supported
    from models.target_torch import DTYPES

    if device == "cpu":
        return PRECISIONS
    return tuple(k for k in PRECISIONS if supported(k, device, DTYPES[dtype])[0])


def load_target(model_dir: Path, device: str, dtype: str, n_ctx: int, compile: str = "auto",
                buckets: tuple[int, ...] | None = None, progress=None, quant: str = "none",
                quant_group: int | None = None):
    """The target for these options (`quant` already picked); `auto` on the CPU may time
    both paths first."""
    from models.target_static import StaticTarget
    from models.target_torch import TorchTarget

    if compile not in COMPILE_CHOICES:
        raise ValueError(f"--target-compile must be one of {', '.join(COMPILE_CHOICES)}, "
                         f"got '{compile}'")
    on = compile == "on" or (compile == "auto" and device.startswith("cuda"))
    missing = triton_missing() if on and device.startswith("cuda") else None
    if missing and compile == "on":
        raise ValueError(f"--target-compile on: {missing}; use --target-compile off (eager)")
    if compile == "auto" and not on:
        on = _cpu_prefers_compiled(model_dir, dtype, n_ctx, progress)
    if on and not missing:
        target = StaticTarget(model_dir, device, n_ctx, dtype, compile=True, buckets=buckets,
                              progress=progress, quant=quant, quant_group=quant_group)
    else:
        target = TorchTarget(model_dir, device, n_ctx, dtype, quant, quant_group, progress)
    why = f"eager, since {missing}" if missing else _why(compile, device, on)
    target.compile_choice = f"{compile}: {why}"
    return target


def triton_missing() -> str | None:
    """Why torch.compile cannot make kernels for a GPU here (None when it can): inductor writes
    them in Triton, which Windows lacks unless installed and GPUs before sm70 cannot run."""
    from torch.utils._triton import has_triton, has_triton_package

    if not has_triton_package():
        return "Triton is not installed (pip install triton; on Windows triton-windows)"
    if not has_triton():
        return "Triton does not run on this GPU (compute capability 7.0 or newer)"
    return None


def _why(compile: str, device: str, on: bool) -> str:
    if compile != "auto":
        return "as asked"
    if device.startswith("cuda"):
        return "compiled on cuda"
    return "compiled measured faster on this CPU" if on else "eager measured faster on this CPU"


def _cpu_prefers_compiled(model_dir: Path, dtype: str, n_ctx: int, progress=None) -> bool:
    """True when the compiled forward timed faster than the eager one on this CPU."""
    times = _measured(f"compile|{Path(model_dir).name}|{dtype}|ctx{n_ctx}",
                      lambda: compare_paths(model_dir, dtype, n_ctx), progress,
                      "timing the eager vs the compiled target on this CPU (first load only)")
    return sum(times["compiled"]) < sum(times["eager"])


def compare_paths(model_dir: Path, dtype: str, n_ctx: int) -> dict:
    """Median forward time (s) at each PROBE_SIZES for both paths on the CPU."""
    from models.target_static import StaticTarget
    from models.target_torch import TorchTarget

    return {"eager": _timed(lambda: TorchTarget(model_dir, "cpu", n_ctx, dtype)),
            "compiled": _timed(lambda: StaticTarget(model_dir, "cpu", n_ctx, dtype,
                                                    buckets=PROBE_SIZES))}


def pick_quant_kind(model_dir: Path, device: str, dtype: str, n_ctx: int,
                    choice: str = "auto", group: int | None = None, progress=None):
    """(kind, reason) for `--target-quant`: what the user asked for when it runs and fits;
    `auto`: on cuda the best precision whose weights, KV cache, working memory and a margin fit
    the free memory (bf16 > int8 > int4), on the CPU the fastest measured. DoesNotFit (a
    PairError) says what would fit when nothing does."""
    from models.memory import GIB, PRECISIONS, DoesNotFit, device_budget, model_dims, pick_quant
    from models.quant import supported
    from models.target_torch import DTYPES

    if choice not in QUANT_CHOICES:
        raise ValueError(f"--target-quant must be one of {', '.join(QUANT_CHOICES)}, "
                         f"got '{choice}'")
    dims = model_dims(json.loads((Path(model_dir) / "config.json").read_text()))
    budget = device_budget(device, dtype, group)
    runs = [k for k in ("none", "int8", "int4") if supported(k, device, DTYPES[dtype])[0]]
    if choice != "auto":
        ok, why = supported(choice, device, DTYPES[dtype])
        if not ok:
            raise ValueError(f"--target-quant {choice}: {why}")
        if not budget.fits(dims, choice, n_ctx):
            raise DoesNotFit(f"the target in {choice} needs {budget.needed(dims, choice, n_ctx) / GIB:.1f} "
                             f"GiB at {n_ctx} tokens; {budget.free / GIB:.1f} GiB free on {budget.where}")
        return choice, "as asked"
    fastest = lambda fits: _cpu_fastest_quant(  # noqa: E731
        model_dir, dtype, n_ctx, [k for k in fits if k in runs], group, progress)
    pick = pick_quant(dims, n_ctx, budget, cpu_choice=fastest if device == "cpu" else None,
                      runs=runs if device != "cpu" else PRECISIONS)
    if pick.kind not in runs:
        raise ValueError(f"--target-quant auto picked {pick.kind}, which does not run here: "
                         f"{supported(pick.kind, device, DTYPES[dtype])[1]}")
    return pick.kind, pick.reason


def _cpu_fastest_quant(model_dir: Path, dtype: str, n_ctx: int, kinds: list[str],
                       group: int | None, progress=None) -> str:
    """The precision whose eager forward timed fastest on this CPU (once per model)."""
    from models.target_torch import TorchTarget

    if len(kinds) < 2:
        return kinds[0] if kinds else "none"
    times = _measured(f"quant|{Path(model_dir).name}|{dtype}|{'-'.join(kinds)}|g{group}",
                      lambda: {k: _timed(lambda: TorchTarget(model_dir, "cpu", n_ctx, dtype,
                                                             k, group)) for k in kinds},
                      progress, f"timing the target in {', '.join(kinds)} on this CPU "
                                "(first load only)")
    return min(kinds, key=lambda k: sum(times[k]))


def _timed(make) -> list[float]:
    """Median forward times (s) at PROBE_SIZES of a freshly built target."""
    from models.profiler import verify_time

    target = make()
    out = [verify_time(target, [100 + i for i in range(64)], n, repeats=5)
           for n in PROBE_SIZES]
    target.close()
    return out


def _measured(what: str, measure, progress, say: str):
    """A measurement of this machine, made once and kept in target_paths.json."""
    from models.profiler import machine_key

    path = cache_root() / "target_paths.json"
    key = f"v3|{machine_key()}|{what}"  # v3: the span-attention static target
    known = json.loads(path.read_text()) if path.exists() else {}
    if key not in known:
        if progress:
            progress(say)
        known[key] = measure()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(known, indent=1))
    return known[key]
