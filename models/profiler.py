"""Measures draft time per token (and by thread count) and target forward time for 1..32
tokens; cached per machine, pair, draft file, device, target dtype, precision, path and
thread counts."""
from __future__ import annotations

import json
import platform
import statistics
import time

import numpy as np

from core.branching import BranchPolicy
from core.budget import MAX_GAMMA, Profile
from core.sampling import PositionRng, SamplingConfig
from models.convert import cache_root

GREEDY = SamplingConfig()
MAX_SEQS = 4


def machine_key() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{platform.node()}|{cpu}"


def load_or_measure(pair_name: str, drafter, target, threads: tuple[int, int],
                    remeasure: bool = False, progress=None) -> Profile:
    path = cache_root() / "profiles.json"
    key = (f"v3|{machine_key()}|{pair_name}|{drafter.name}|{target.device}|{target.dtype}|"
           f"{target.quant}|{target.path}|draft{threads[0]}|target{threads[1]}")
    known = json.loads(path.read_text()) if path.exists() else {}
    if key in known and not remeasure:
        return Profile.from_dict(known[key])
    if progress:
        progress("profiling the draft budget (draft time per token, target verify time 1..32)")
    prof = measure(drafter, target, context_len=64)
    known[key] = prof.to_dict()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(known, indent=1))
    return prof


def pick_draft_threads(pair_name: str, drafter, cap: int, progress=None) -> dict[int, float]:
    """Draft s/token at 1, 2, 4, 8, ... threads up to `cap` (the cores the target leaves),
    measured once per machine, pair and draft file; the caller takes the fastest."""
    candidates = sorted({n for n in (1, 2, 4, 8, 16, 32) if n < cap} | {cap})
    if len(candidates) == 1:
        return {cap: 0.0}
    path = cache_root() / "draft_threads.json"
    key = f"v1|{machine_key()}|{pair_name}|{drafter.name}|cap{cap}"
    known = json.loads(path.read_text()) if path.exists() else {}
    if key not in known:
        if progress:
            progress(f"timing the draft at {', '.join(map(str, candidates))} threads")
        ctx = [int(t) for t in np.random.default_rng(0).integers(100, 1000, 64)]
        prev = drafter.set_threads(candidates[0])
        known[key] = {}
        for n in candidates:
            drafter.set_threads(n)
            known[key][str(n)] = draft_time(drafter, ctx, 16) / 16
        drafter.set_threads(prev)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(known, indent=1))
    return {int(n): s for n, s in known[key].items()}


def fastest_threads(times: dict[int, float], tolerance: float = 0.03) -> int:
    """The fewest threads within `tolerance` of the fastest (spare cores serve the target)."""
    best = min(times.values())
    return min(n for n, s in times.items() if s <= best * (1 + tolerance))


def measure(drafter, target, context_len: int = 64, repeats: int = 3) -> Profile:
    ctx = [int(t) for t in np.random.default_rng(0).integers(100, 1000, context_len)]
    draft_s = draft_time(drafter, ctx, 16, repeats) / 16
    steps = {1: draft_s} | {k: step_time(drafter, ctx, k, repeats) for k in range(2, MAX_SEQS + 1)}
    verify = [verify_time(target, ctx, n, repeats) for n in range(1, MAX_GAMMA + 1)]
    return Profile(draft_token_s=draft_s, verify_s=verify, draft_step_s=steps,
                   device=target.device)


def step_time(drafter, ctx: list[int], k: int, repeats: int = 3, n: int = 12) -> float:
    """Median time of one batched draft step over k sequences."""
    policy = BranchPolicy(max_seqs=k, static_k=k)
    steps = policy.steps(n, k)
    rng = PositionRng(0, 1)
    times = []
    for _ in range(repeats + 1):
        drafter.propose(ctx, 1, GREEDY, rng)
        t0 = time.perf_counter()
        drafter.propose(ctx + [ctx[-1]], n, GREEDY, rng, branching=policy)
        times.append((time.perf_counter() - t0) / steps)
    return statistics.median(times[1:])


def draft_time(drafter, ctx: list[int], n: int, repeats: int = 3) -> float:
    """Median time to draft n tokens after ctx (the prefill is done before the clock)."""
    rng = PositionRng(0, 1)
    times = []
    for _ in range(repeats + 1):  # the first is warm-up
        drafter.propose(ctx, 1, GREEDY, rng)
        t0 = time.perf_counter()
        drafter.propose(ctx + [ctx[-1]], n, GREEDY, rng)
        times.append(time.perf_counter() - t0)
    return statistics.median(times[1:])


def verify_time(target, ctx: list[int], n: int, repeats: int = 3) -> float:
    """Median time of one target forward of n tokens after a cached ctx."""
    target.rollback(0)
    target.score(ctx, 1, GREEDY)
    times = []
    for _ in range(repeats + 1):
        target.rollback(len(ctx))
        _sync(target)
        t0 = time.perf_counter()
        target.score(ctx[:n] if n <= len(ctx) else (ctx * 2)[:n], n, GREEDY)
        _sync(target)
        times.append(time.perf_counter() - t0)
    target.rollback(0)
    return statistics.median(times[1:])


def _sync(target) -> None:
    if hasattr(target, "synchronize"):
        target.synchronize()
