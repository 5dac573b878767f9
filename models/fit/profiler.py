"""Measures draft time per token (and by thread count) and target forward time for 1..32
tokens; cached per machine, pair, draft file, device, target dtype, precision, path and
thread counts. Every measurement is the minimum of several rounds that interleave the
candidates, and is stored with the other processes' share of the CPU while it ran: one
taken under load is taken again at a later start when the machine is quieter. The draft and
the target are timed apart, not side by side as duo runs them: the budget's online scales
(core/learned.py) follow what a generation really gets (docs/target-choice.md)."""
from __future__ import annotations

import functools
import json
import os
import platform
import time
from contextlib import nullcontext

import numpy as np

from core.branching import BranchPolicy
from core.budget import MAX_VERIFY, Profile
from core.sampling import PositionRng, SamplingConfig
from models.pairs.convert import cache_root, write_atomic

GREEDY = SamplingConfig()
MAX_SEQS = 4
ROUNDS = 3  # timed rounds per measurement (after one warm-up round); the minimum is kept
# verify lengths a profile times (the rest interpolated: the budget learns each length
# bucket's own scale as it runs); all 32 took 26-34 CPU seconds for smol-self, 2-core Xeon
VERIFY_SIZES = (1, 2, 4, 8, 16, 32)
BUSY = 0.25  # other processes' share of the cores above which a measurement was "under load"


def machine_key() -> str:
    return f"{platform.node()}|{cpu_name()}"


@functools.cache
def cpu_name() -> str:
    """The CPU's model name, read once (a profile is looked up at every generation)."""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_load(seconds: float = 0.25) -> float | None:
    """Other processes' share of the cores now (0 idle .. 1 all busy), sampled over `seconds`;
    None where psutil cannot tell."""
    with LoadMeter() as meter:
        time.sleep(seconds)
    return meter.share


class LoadMeter:
    """Other processes' share of the cores while a block runs (`share`, None if unknown):
    the machine's busy CPU time less this process's, over the wall time and the cores."""
    share: float | None = None

    def __enter__(self):
        self._start = _cpu_sample()
        return self

    def __exit__(self, *exc) -> None:
        end = _cpu_sample()
        if self._start is None or end is None or end[0] <= self._start[0]:
            return
        wall = end[0] - self._start[0]
        others = (end[1] - self._start[1]) - (end[2] - self._start[2])
        self.share = round(min(max(others / (wall * (os.cpu_count() or 1)), 0.0), 1.0), 3)


def _cpu_sample() -> tuple[float, float, float] | None:
    """(wall clock, the machine's busy CPU seconds, this process's CPU seconds)."""
    try:
        import psutil
    except ImportError:
        return None
    t, me = psutil.cpu_times(), psutil.Process().cpu_times()
    busy = sum(getattr(t, f, 0.0) for f in ("user", "nice", "system", "irq", "softirq", "steal"))
    return time.monotonic(), busy, me.user + me.system


def quieter_now(load: float | None) -> bool:
    """A measurement taken under load (`load` above BUSY) is worth taking again when the other
    processes now take less than half of that."""
    if load is None or load < BUSY:
        return False
    now = machine_load()
    return now is not None and now < load / 2


def measured(file: str, key: str, measure, remeasure: bool = False, progress=None,
             say: str = "", check_load: bool = True) -> dict:
    """{"value": measure(), "load": others' share while it ran}, kept in cache_root()/file
    under key; measured when missing, when asked (`remeasure`) or when quieter_now (unless
    `check_load` is off)."""
    path = cache_root() / file
    known = json.loads(path.read_text()) if path.exists() else {}
    entry = known.get(key)
    if entry is not None and not remeasure and not (check_load and
                                                    quieter_now(entry.get("load"))):
        return entry
    if progress and say:
        progress(say)
    with LoadMeter() as meter:
        value = measure()
    entry = {"value": value, "load": meter.share}
    known = json.loads(path.read_text()) if path.exists() else {}  # another process may have written
    known[key] = entry
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(known, indent=1))
    return entry


def elapsed(fn) -> float:
    """Seconds one call of fn takes."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def interleaved(probes: dict, rounds: int = ROUNDS) -> dict:
    """The least time (s) of each probe (a callable returning one timing) over a warm-up round
    and `rounds` timed rounds, every round running every probe in turn."""
    times = {name: [] for name in probes}
    for r in range(rounds + 1):
        for name, probe in probes.items():
            t = probe()
            if r:
                times[name].append(t)
    return {name: min(ts) for name, ts in times.items()}


_PROFILES_LOOKED_UP: set[str] = set()  # profile keys this process has looked up


def load_or_measure(pair_name: str, drafter, target, threads: tuple[int, int],
                    remeasure: bool = False, progress=None) -> Profile:
    """The budget profile, looked up at every generation: its load is checked at this process's
    first lookup only (at every one it delayed each generation by the reading and, beside a busy
    neighbour, profiled again and again); a running generation's budget scales it to what it
    measures."""
    key = (f"v6|{machine_key()}|{pair_name}|{drafter.name}|{target.device}|{target.dtype}|"
           f"{target.quant}|{target.path}|draft{threads[0]}|target{threads[1]}")
    first = key not in _PROFILES_LOOKED_UP
    _PROFILES_LOOKED_UP.add(key)
    entry = measured("profiles.json", key, lambda: measure(drafter, target).to_dict(),
                     remeasure, progress, "profiling the draft budget (draft time per token, "
                     "target verify time at 1 to 32 tokens)", check_load=first)
    profile = Profile.from_dict(entry["value"])
    profile.load = entry["load"]
    return profile


def pick_draft_threads(pair_name: str, drafter, cap: int, progress=None,
                       remeasure: bool = False) -> dict[int, float]:
    """Draft s/token at 1, 2, 4, 8, ... threads up to `cap` (the draft's share), the target
    idle, measured per machine, pair and draft file; the caller takes the fastest."""
    candidates = sorted({n for n in (1, 2, 4, 8, 16, 32) if n < cap} | {cap})
    if len(candidates) == 1:
        return {cap: 0.0}
    key = f"v4|{machine_key()}|{pair_name}|{drafter.name}|cap{cap}"
    entry = measured("draft_threads.json", key, lambda: _time_threads(drafter, candidates),
                     remeasure, progress,
                     f"timing the draft at {', '.join(map(str, candidates))} threads")
    return {int(n): s for n, s in entry["value"].items()}


def _time_threads(drafter, candidates: list[int]) -> dict[str, float]:
    ctx = [int(t) for t in np.random.default_rng(0).integers(100, 1000, 64)]
    prev = drafter.set_threads(candidates[0])

    def probe(n):
        drafter.set_threads(n)
        return draft_once(drafter, ctx, 16) / 16
    try:
        with drafter.preserved():
            best = interleaved({n: (lambda n=n: probe(n)) for n in candidates})
    finally:
        drafter.set_threads(prev)
    return {str(n): s for n, s in best.items()}


def fastest_threads(times: dict[int, float], tolerance: float = 0.03) -> int:
    """The fewest threads within `tolerance` of the fastest (spare cores serve the target)."""
    best = min(times.values())
    return min(n for n, s in times.items() if s <= best * (1 + tolerance))


def measure(drafter, target, context_len: int = 64, rounds: int = ROUNDS,
            verify_n: int = MAX_VERIFY, seqs: int = MAX_SEQS) -> Profile:
    """The draft's time per token and per batched step of 2..seqs sequences and the target's
    forward of 1..verify_n tokens (timed at VERIFY_SIZES and verify_n, the rest interpolated),
    interleaved round by round; the probes fit a small window (a shorter context first, then
    fewer verify sizes: the profile extrapolates those)."""
    verify_n = max(1, min(verify_n, target.n_ctx // 2))
    context_len = max(1, min(context_len, target.n_ctx - verify_n))
    ctx = [int(t) for t in np.random.default_rng(0).integers(100, 1000, context_len)]
    probes = {"draft": lambda: draft_once(drafter, ctx, 16) / 16}
    probes |= {k: (lambda k=k: step_once(drafter, ctx, k)) for k in range(2, seqs + 1)}
    sizes = sorted({n for n in VERIFY_SIZES if n < verify_n} | {verify_n})
    probes |= {f"verify{n}": (lambda n=n: verify_once(target, ctx, n)) for n in sizes}
    with drafter.preserved(), target.preserved(context_len + verify_n):  # a chat's caches kept
        target.score(ctx, 1, GREEDY)  # the context is cached once; each verify rolls back to it
        best = interleaved(probes, rounds)
    steps = {1: best["draft"]} | {k: best[k] for k in range(2, seqs + 1)}
    verify = np.interp(range(1, verify_n + 1), sizes,
                       [best[f"verify{n}"] for n in sizes]).tolist()
    return Profile(draft_token_s=best["draft"], verify_s=verify, draft_step_s=steps,
                   device=target.device)



def step_once(drafter, ctx: list[int], k: int, n: int = 12) -> float:
    """Time of one batched draft step over k sequences (the prefill before the clock)."""
    policy = BranchPolicy(max_seqs=k, static_k=k)
    rng = PositionRng(0, 1)
    with uncounted(drafter):
        drafter.propose(ctx, 1, GREEDY, rng)
        t0 = time.perf_counter()
        drafter.propose(ctx + [ctx[-1]], n, GREEDY, rng, branching=policy)
        return (time.perf_counter() - t0) / policy.steps(n, k)


def draft_once(drafter, ctx: list[int], n: int) -> float:
    """Time to draft n tokens after ctx (the prefill is done before the clock)."""
    rng = PositionRng(0, 1)
    with uncounted(drafter):
        drafter.propose(ctx, 1, GREEDY, rng)
        t0 = time.perf_counter()
        drafter.propose(ctx + [ctx[-1]], n, GREEDY, rng)
        return time.perf_counter() - t0


def uncounted(drafter):
    """The probes' translations stay out of the vocabulary's counters (a generation's stats;
    a profile measured again between two turns)."""
    vocab = getattr(drafter, "vocab", None)
    return vocab.uncounted() if vocab is not None else nullcontext()


def draft_time(drafter, ctx: list[int], n: int, rounds: int = ROUNDS) -> float:
    """The least time to draft n tokens after ctx, over `rounds` after a warm-up."""
    return interleaved({"draft": lambda: draft_once(drafter, ctx, n)}, rounds)["draft"]


def verify_once(target, ctx: list[int], n: int) -> float:
    """Time of one target forward of n tokens after the cached ctx (clocks synchronised)."""
    target.rollback(len(ctx))
    _sync(target)
    t0 = time.perf_counter()
    target.score(ctx[:n] if n <= len(ctx) else (ctx * 2)[:n], n, GREEDY)
    _sync(target)
    return time.perf_counter() - t0


def verify_time(target, ctx: list[int], n: int, rounds: int = ROUNDS) -> float:
    """The least time of one target forward of n tokens after a cached ctx."""
    target.rollback(0)
    target.score(ctx, 1, GREEDY)
    best = interleaved({n: lambda: verify_once(target, ctx, n)}, rounds)[n]
    target.rollback(0)
    return best


def _sync(target) -> None:
    if hasattr(target, "synchronize"):
        target.synchronize()
