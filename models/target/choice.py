"""Which target runs: the path (`--target-compile auto|on|off`: the compiled static-cache
target or the eager one) and the weights' precision (`--target-quant auto|none|int8|int4`).
`auto` precision: the unquantized weights unless memory forces a smaller precision, on every
device (a smaller one changes the answers: that trade stays the user's). `auto` path: compiled
on cuda; on the CPU what timed faster here as duo runs the target (at its share of the cores,
the compiled one compiled for that count; both give the same float32 outputs), cached beside
the budget profiles and timed again after a loaded start (models/fit/profiler.py.measured).
A compiled CPU target is compiled for duo's share (docs/target-choice.md)."""
from __future__ import annotations

import json
import os
from pathlib import Path

from core.sampling import SamplingConfig
from models.fit.memory import MIN_CTX, trained_window
from models.fit.placement import half_up
from models.target.modes import COMPILE_CHOICES, PACK_CHOICES, QUANT_CHOICES

PROBE_SIZES = (1, 8)  # a plain decoding step and a typical verify chunk
GREEDY = SamplingConfig()


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
                quant_group: int | None = None, pack: str = "auto", remeasure: bool = False,
                threads: int | None = None, cores: int | None = None):
    """The target for these options (`quant` already picked). `threads`: the target's share
    of the cores while duo decodes (models/fit/placement.target_share); on the CPU `auto`
    times both paths at that count (again with `remeasure`) and a compiled target is compiled
    for it (its graphs keep it), so duo's draft and target never outnumber the cores, and for
    `cores` too where that is more (vanilla, sps and duo's solo rounds take every core). On
    `cores`, either path runs a forward only while that measured faster (use_pace)."""
    from models.target.static import StaticTarget
    from models.target.eager import TorchTarget, cpu_threads

    for flag, value, known in (("--target-compile", compile, COMPILE_CHOICES),
                               ("--target-pack", pack, PACK_CHOICES)):
        if value not in known:
            raise ValueError(f"{flag} must be one of {', '.join(known)}, got '{value}'")
    cpu = not device.startswith("cuda")
    threads = threads or (half_up(os.cpu_count() or 1) if cpu else 1)
    on = compile == "on" or (compile == "auto" and not cpu)
    missing = triton_missing() if on and not cpu else None
    if missing and compile == "on":
        raise ValueError(f"--target-compile on: {missing}; use --target-compile off (eager)")
    times = None
    if compile == "auto" and cpu:
        times = cpu_path_times(model_dir, dtype, n_ctx, threads, progress, remeasure, pack)
        on = sum(times["compiled"]) < sum(times["eager"])
    if on and not missing:
        with cpu_threads(threads if cpu else None):
            target = StaticTarget(model_dir, device, n_ctx, dtype, compile=True, buckets=buckets,
                                  progress=progress, quant=quant, quant_group=quant_group,
                                  pack=pack, remeasure=remeasure,
                                  more_threads=cores if cpu and cores else 0)
    else:
        target = TorchTarget(model_dir, device, n_ctx, dtype, quant, quant_group, progress,
                             pack=pack, remeasure=remeasure)
        if cpu and cores and cores > threads:  # vanilla's and sps's every core, while faster
            target.use_pace(threads)
    why = f"eager, since {missing}" if missing else _why(compile, device, on, threads, times,
                                                         getattr(target, "graph_threads", ()))
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


def _why(compile: str, device: str, on: bool, threads: int, times: dict | None,
         counts: tuple[int, ...] = ()) -> str:
    """The placement line's reason: on the CPU, the thread counts the compiled target runs at
    (duo's share; every core, vanilla's and sps's, where more) and, for auto, the timings."""
    cpu = not device.startswith("cuda")
    more = (f" and {counts[1]} (every core: vanilla, sps, duo's solo rounds)"
            if len(counts) > 1 else "; vanilla and sps run it at that count too")
    kept = f"compiled for {threads} thread(s), duo's target share{more}" if on and cpu else ""
    if compile != "auto":
        return "as asked" + (f", {kept}" if kept else "")
    if not cpu:
        return "compiled on cuda"
    ms = lambda name: f"{sum(times[name]) * 1e3:.1f} ms"  # noqa: E731
    timed = (f"as duo runs it on this CPU: {threads} thread(s), 1+8-token forwards compiled "
             f"{ms('compiled')}, eager {ms('eager')}")
    return (f"compiled measured faster {timed}; {kept}" if on
            else f"eager measured faster {timed}")


def cpu_path_times(model_dir: Path, dtype: str, n_ctx: int, threads: int, progress=None,
                   remeasure: bool = False, pack: str = "auto") -> dict:
    """{"eager": [s per PROBE_SIZES], "compiled": [...]}: the target's forwards on each path
    at `threads` (duo's target share: the path that serves duo, the product's default),
    measured once per machine, model, dtype, window, thread count and --target-pack."""
    from models.fit.profiler import machine_key, measured

    key = (f"v6|{machine_key()}|compile|{Path(model_dir).name}|{dtype}|ctx{n_ctx}|duo|"
           f"threads{threads}|pack-{pack}")
    return measured("target_paths.json", key,
                    lambda: compare_paths(model_dir, dtype, n_ctx, threads, pack), remeasure,
                    progress, f"timing the eager vs the compiled target at {threads} thread(s), "
                    "as duo runs it, on this CPU (first load only)")["value"]


def compare_paths(model_dir: Path, dtype: str, n_ctx: int, threads: int,
                  pack: str = "auto") -> dict:
    """The least forward time (s) at each PROBE_SIZES for both paths on the CPU at `threads`
    torch threads (the compiled one compiled for that count), the two targets timed in turn,
    round by round. The draft is not running beside them (docs/target-choice.md)."""
    from models.fit.memory import device_budget, model_dims
    from models.fit.profiler import interleaved, verify_once
    from models.target.static import StaticTarget
    from models.target.eager import TorchTarget, cpu_threads

    # the compiled one with the app's chunk sizes: the graphs it times are the ones the app
    # runs, and the app's load then finds them in the inductor cache
    makers = {"eager": lambda: TorchTarget(model_dir, "cpu", n_ctx, dtype, pack=pack),
              "compiled": lambda: StaticTarget(model_dir, "cpu", n_ctx, dtype, pack=pack)}
    dims = model_dims(json.loads((Path(model_dir) / "config.json").read_text()))
    budget = device_budget("cpu", dtype)
    copies = 2 if pack == "off" else 4  # a packed target holds its linear weights twice
    both = budget.free is None or copies * budget.needed(dims, "none", n_ctx) <= budget.free
    groups = [list(makers)] if both else [[name] for name in makers]  # two targets fit?
    out = {}
    with cpu_threads(threads):
        for names in groups:
            targets = {name: makers[name]() for name in names}
            ctx = [100 + i for i in range(64)]
            for target in targets.values():
                target.score(ctx, 1, GREEDY)
            best = interleaved({(name, n): (lambda t=t, n=n: verify_once(t, ctx, n))
                                for name, t in targets.items() for n in PROBE_SIZES})
            for name, target in targets.items():
                out[name] = [best[(name, n)] for n in PROBE_SIZES]
                target.close()
    return out


def pick_quant_kind(model_dir: Path, device: str, dtype: str, n_ctx: int,
                    choice: str = "auto", group: int | None = None, progress=None):
    """(kind, reason) for `--target-quant`: what the user asked for when it runs and fits;
    `auto`: the best precision that runs here and whose weights, KV cache, working memory and
    a margin fit the free memory (unquantized > int8 > int4), on cuda and on the CPU alike:
    never a lossy one for speed. DoesNotFit (a PairError) says what would fit when nothing
    does."""
    from models.fit.memory import GIB, DoesNotFit, device_budget, model_dims, pick_quant
    from models.target.quant import supported
    from models.target.eager import DTYPES

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
    pick = pick_quant(dims, n_ctx, budget, runs=runs)
    return pick.kind, pick.reason
