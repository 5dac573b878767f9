"""Which target runs: the path (`--target-compile auto|on|off`: the compiled static-cache
target or the eager one) and the weights' precision (`--target-quant auto|none|int8|int4`).
`auto` precision: the unquantized weights unless memory forces a smaller precision, on every
device (a smaller one changes the answers: that trade stays the user's). `auto` path: compiled
on cuda, eager on the CPU (docs/target-choice.md)."""
from __future__ import annotations

import json
from pathlib import Path

from models.fit.memory import MIN_CTX, trained_window
from models.target.modes import COMPILE_CHOICES, QUANT_CHOICES

# the CPU's default path: eager. The compiled one costs minutes of compiling at a first start
# and seconds at every later one, for 20% a token (1+8-token forwards 41.0 against 52.3 ms,
# smol-self at 1 thread, 2-core Intel Xeon, 2026-11-27); the static cache uncompiled is no
# faster than eager (1/8/16-token verifies 59/97/122 ms against 57/99/127, one thread,
# 2-core AMD EPYC VM, 2026-12-01)
CPU_PATH = "eager on the CPU (the compiled path: --target-compile on)"


def pick_ctx(model_dir: Path, device: str, dtype: str, asked: int | None = None,
             quant: str = "auto", group: int | None = None) -> tuple[int, str]:
    """(context window, why) for `--ctx-size`: what was asked, within the trained window; by
    default min(trained window, 8192), shrunk to what fits beside the best precision that still
    holds 4096 tokens (models/fit/memory.py.pick_window: weights, KV cache, working memory, margin)."""
    from models.fit.memory import DEFAULT_CTX, device_budget, model_dims, pick_window

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
    """The precisions that run on this device in this dtype, best first."""
    from models.fit.memory import PRECISIONS
    from models.target.quant import supported
    from models.target.eager import DTYPES

    return tuple(k for k in PRECISIONS if supported(k, device, DTYPES[dtype])[0])


def load_target(model_dir: Path, device: str, dtype: str, n_ctx: int, compile: str = "auto",
                buckets: tuple[int, ...] | None = None, progress=None, quant: str = "none",
                quant_group: int | None = None, pack: bool = True):
    """The target for these options (`quant` already picked), at the thread count torch has
    now (the placement's: a compiled CPU target's graphs keep it). `auto`: compiled on cuda,
    eager on the CPU (CPU_PATH says why), its weights packed where that pays (`pack`)."""
    from models.target.static import StaticTarget
    from models.target.eager import TorchTarget

    if compile not in COMPILE_CHOICES:
        raise ValueError(f"--target-compile must be one of {', '.join(COMPILE_CHOICES)}, "
                         f"got '{compile}'")
    cpu = not device.startswith("cuda")
    on = compile == "on" or (compile == "auto" and not cpu)
    missing = triton_missing() if on and not cpu else None
    if missing and compile == "on":
        raise ValueError(f"--target-compile on: {missing}; use --target-compile off (eager)")
    if on and not missing:
        target = StaticTarget(model_dir, device, n_ctx, dtype, compile=True, buckets=buckets,
                              progress=progress, quant=quant, quant_group=quant_group)
    else:
        target = TorchTarget(model_dir, device, n_ctx, dtype, quant, quant_group, progress,
                             pack=pack)
    why = (f"eager, since {missing}" if missing else "as asked" if compile != "auto"
           else "compiled on cuda" if not cpu else CPU_PATH)
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


def pick_quant_kind(model_dir: Path, device: str, dtype: str, n_ctx: int,
                    choice: str = "auto", group: int | None = None, progress=None):
    """(kind, reason) for `--target-quant`: what the user asked for when it runs and fits; `auto`:
    the best precision that runs here and whose weights, KV cache, working memory and a margin fit
    the free memory (unquantized > int8 > int4), on cuda and on the CPU alike: never a lossy one for
    speed. DoesNotFit (a PairError) says what would fit when nothing does."""
    from models.fit.memory import GIB, DoesNotFit, device_budget, model_dims, pick_quant
    from models.target.quant import supported
    from models.target.eager import DTYPES

    if choice not in QUANT_CHOICES:
        raise ValueError(f"--target-quant must be one of {', '.join(QUANT_CHOICES)}, "
                         f"got '{choice}'")
    dims = model_dims(json.loads((Path(model_dir) / "config.json").read_text()))
    budget = device_budget(device, dtype, group)
    if choice != "auto":
        ok, why = supported(choice, device, DTYPES[dtype])
        if not ok:
            raise ValueError(f"--target-quant {choice}: {why}")
        if not budget.fits(dims, choice, n_ctx):
            raise DoesNotFit(f"the target in {choice} needs {budget.needed(dims, choice, n_ctx) / GIB:.1f} "
                             f"GiB at {n_ctx} tokens; {budget.free / GIB:.1f} GiB free on {budget.where}")
        return choice, "as asked"
    pick = pick_quant(dims, n_ctx, budget, runs=_running(device, dtype))
    return pick.kind, pick.reason
