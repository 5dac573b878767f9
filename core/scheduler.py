"""All of the engine's concurrency: a draft worker thread that drafts while the target verifies,
and what each job hands back (`Drafted`: the proposal and the worker's `DraftTiming`).

llama.cpp and torch both release the GIL, so a thread is enough. `sequential=True` runs each
job inline when it is submitted, giving the same algorithm without overlap (tests, comparison).
"""
from __future__ import annotations

import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import NamedTuple

from core.backends import Branching, Drafter, Proposal
from core.sampling import PositionRng, SamplingConfig

DRAFT_STREAM = 1  # the verifier uses stream 0
GIL_SWITCH_S = 0.0005


@dataclass(frozen=True)
class DraftTiming:
    """When the worker ran one job (perf_counter start/end) and for how long; `busy_s`
    includes the proposal's own `sync_s`."""
    busy_s: float = 0.0
    span: tuple[float, float] = (0.0, 0.0)


class Drafted(NamedTuple):
    """What a job hands back: the drafter's proposal and the worker's clock for it."""
    proposal: Proposal
    timing: DraftTiming

    @classmethod
    def nothing(cls) -> "Drafted":
        """No job ran (no room or no budget to draft this round)."""
        return cls(Proposal(), DraftTiming())


class DraftJob:
    def __init__(self, future: Future, stop: threading.Event):
        self._future, self._stop = future, stop

    def result(self) -> Drafted:
        return self._future.result()

    def cancel(self) -> None:
        """The chunk is not wanted: stop after the current token."""
        self._stop.set()


class DraftWorker:
    def __init__(self, drafter: Drafter, sampling: SamplingConfig, seed: int,
                 sequential: bool = False):
        self.drafter, self.sampling = drafter, sampling
        self.rng_at = PositionRng(seed, DRAFT_STREAM)
        self._pool = None if sequential else ThreadPoolExecutor(1, thread_name_prefix="draft")
        # Both threads spend most time in C code that drops the GIL; with Python's default
        # 5 ms switch interval a thread coming back from C can wait that long for the GIL.
        self._switch = sys.getswitchinterval()
        if self._pool is not None:
            sys.setswitchinterval(GIL_SWITCH_S)

    def submit(self, context: list[int], n: int,
               branching: Branching | None = None) -> DraftJob:
        """Draft up to n tokens after `context` (copied now; the caller may change its list)."""
        stop = threading.Event()
        args = (list(context), n, stop, branching)
        if self._pool is None:
            fut: Future = Future()
            fut.set_result(self._run(*args))
        else:
            fut = self._pool.submit(self._run, *args)
        return DraftJob(fut, stop)

    def _run(self, context, n, stop, branching) -> Drafted:
        t0 = time.perf_counter()
        proposal = self.drafter.propose(context, n, self.sampling, self.rng_at, stop,
                                        branching=branching)
        t1 = time.perf_counter()
        return Drafted(proposal, DraftTiming(t1 - t0, (t0, t1)))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            sys.setswitchinterval(self._switch)
