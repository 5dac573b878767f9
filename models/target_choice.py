"""Which target path runs (`--target-compile auto|on|off`): the compiled static-cache target,
or the eager one. `auto` is on for cuda; on the CPU it is what measured faster on this
machine (measured once, cached beside the budget profiles)."""
from __future__ import annotations

import json
from pathlib import Path

from models.convert import cache_root

COMPILE_CHOICES = ("auto", "on", "off")
PROBE_SIZES = (1, 8)  # a plain decoding step and a typical verify chunk


def load_target(model_dir: Path, device: str, dtype: str, n_ctx: int, compile: str = "auto",
                buckets: tuple[int, ...] | None = None, progress=None):
    """The target for these options; `auto` on the CPU may time both paths first."""
    from models.target_static import StaticTarget
    from models.target_torch import TorchTarget

    if compile not in COMPILE_CHOICES:
        raise ValueError(f"--target-compile must be one of {', '.join(COMPILE_CHOICES)}, "
                         f"got '{compile}'")
    on = compile == "on" or (compile == "auto" and device.startswith("cuda"))
    if compile == "auto" and not on:
        on = _cpu_prefers_compiled(model_dir, dtype, n_ctx, progress)
    if on:
        target = StaticTarget(model_dir, device, n_ctx, dtype, compile=True, buckets=buckets,
                              progress=progress)
    else:
        target = TorchTarget(model_dir, device, n_ctx, dtype)
    target.compile_choice = f"{compile}: {_why(compile, device, on)}"
    return target


def _why(compile: str, device: str, on: bool) -> str:
    if compile != "auto":
        return "as asked"
    if device.startswith("cuda"):
        return "compiled on cuda"
    return "compiled measured faster on this CPU" if on else "eager measured faster on this CPU"


def _cpu_prefers_compiled(model_dir: Path, dtype: str, n_ctx: int, progress=None) -> bool:
    """Time the eager and the compiled forward at PROBE_SIZES once per machine, model, dtype
    and window; True when the compiled one is faster."""
    from models.profiler import machine_key

    path = cache_root() / "target_paths.json"
    key = f"v1|{machine_key()}|{Path(model_dir).name}|cpu|{dtype}|ctx{n_ctx}"
    known = json.loads(path.read_text()) if path.exists() else {}
    if key not in known:
        if progress:
            progress("timing the eager vs the compiled target on this CPU (first load only)")
        known[key] = compare_paths(model_dir, dtype, n_ctx)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(known, indent=1))
    times = known[key]
    return sum(times["compiled"]) < sum(times["eager"])


def compare_paths(model_dir: Path, dtype: str, n_ctx: int) -> dict:
    """Median forward time (s) at each PROBE_SIZES for both paths on the CPU."""
    from models.profiler import verify_time
    from models.target_static import StaticTarget
    from models.target_torch import TorchTarget

    ctx, out = [100 + i for i in range(64)], {}
    for name, make in (("eager", lambda: TorchTarget(model_dir, "cpu", n_ctx, dtype)),
                       ("compiled", lambda: StaticTarget(model_dir, "cpu", n_ctx, dtype,
                                                         buckets=PROBE_SIZES))):
        target = make()
        out[name] = [verify_time(target, ctx, n, repeats=5) for n in PROBE_SIZES]
        target.close()
    return out
