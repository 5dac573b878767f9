"""All of the engine's concurrency: a draft worker thread that drafts while the target verifies,
and what each job hands back (`Drafted`: the proposal and the worker's `DraftTiming`).

llama.cpp and torch both release the GIL, so a thread is enough. `sequential=True` waits for
each job when it is submitted, giving the same algorithm without overlap (tests, comparison).
`inline` drafts on the caller's thread (sps: nothing to overlap), watched by a `Watchdog`.
A draft that raises or hangs is caught here; the engine then goes on with the target alone.
"""
from __future__ import annotations

import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import NamedTuple

from core.backends import Branching, Drafter, Plan, Proposal
from core.sampling import SamplingConfig, draft_draws

GIL_SWITCH_S = 0.0005
CATCH_UP_S = 0.01  # the timeout grows by this per context token: a long prompt's prefill


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
    def __init__(self, future: Future, stop: threading.Event, worker: "DraftWorker",
                 timeout_s: float | None = None):
        self._future, self._stop, self._worker = future, stop, worker
        self._timeout_s = timeout_s
        self._started = time.perf_counter()
        self._drafted: Drafted | None = None

    def result(self) -> Drafted:
        """The job's Drafted; Drafted.nothing() when the draft failed or gave no answer in
        time (the worker then says why in its `warnings` and drafts no more)."""
        if self._drafted is None:
            wait = self._timeout_s
            if wait is not None and self.overdue():  # its time ran out while the target went on
                wait = 0.0
            self._drafted = self._worker.collect(self._future, self._stop, wait, self._timeout_s)
        return self._drafted

    def overdue(self) -> bool:
        """Running past its timeout since it was submitted."""
        return (self._timeout_s is not None and not self._future.done() and
                time.perf_counter() - self._started > self._timeout_s)

    def cancel(self) -> None:
        """The chunk is not wanted: stop after the current token."""
        self._stop.set()

    def done(self) -> bool:
        return self._future.done()

    def finished(self) -> Drafted | None:
        """Without waiting: what the job drafted if it has ended well, else None."""
        if not self._future.done() or self._future.cancelled():
            return None
        drafted = self._future.result()  # _run never raises: a failure is Drafted.nothing()
        return drafted if drafted.timing.span != (0.0, 0.0) else None


class DraftWorker:
    """Runs the drafter on its own thread. A drafter that raises, or gives no answer within
    `timeout_s` (plus CATCH_UP_S per context token), is a failure: it is recorded in
    `warnings`, `failed` turns true and later jobs draft nothing, so the engine goes on with
    the target alone."""

    def __init__(self, drafter: Drafter, sampling: SamplingConfig, seed: int,
                 sequential: bool = False, timeout_s: float | None = None,
                 sampler: str = "coupled", adjust=None):
        self.drafter, self.sampling = drafter, sampling
        self.draws = draft_draws(seed, sampler)
        self.adjust = {} if adjust is None else {"adjust": adjust}  # its own, for this thread
        self.sequential, self.timeout_s = sequential, timeout_s
        self.warnings: list[str] = []
        self._hung: Future | None = None
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="draft")  # a thread on first use
        self._watchdog: Watchdog | None = None
        # Both threads spend most time in C code that drops the GIL; with Python's default
        # 5 ms switch interval a thread coming back from C can wait that long for the GIL.
        self._switch = sys.getswitchinterval()
        sys.setswitchinterval(GIL_SWITCH_S)

    @property
    def failed(self) -> bool:
        return bool(self.warnings)

    def submit(self, context: list[int], n: int, branching: Branching | None = None,
               predraft: Plan | None = None, guess: list[int] = ()) -> DraftJob:
        """Draft up to n tokens after `context` (copied now; the caller may change its list).
        `sequential`: wait for the answer here (the same rounds without overlap). `guess`: the
        lookup's continuation, for the drafter to evaluate in one batch (Drafter.propose)."""
        stop = threading.Event()
        if self.failed:
            fut: Future = Future()
            fut.set_result(Drafted.nothing())
            return DraftJob(fut, stop, self)
        fut = self._pool.submit(self._run, list(context), n, stop, branching, predraft, list(guess))
        job = DraftJob(fut, stop, self, self._timeout(context))
        if self.sequential:
            job.result()
        return job

    def inline(self, context: list[int], n: int, branching: Branching | None = None) -> Drafted:
        """Draft on the caller's thread, no hand-off. Past the timeout the watchdog sets the
        job's stop, so the draft ends at its next token; that late answer is a failure like
        a hung job's (a draft stuck inside one call holds the caller until it returns)."""
        if self.failed:
            return Drafted.nothing()
        stop, timeout = threading.Event(), self._timeout(context)
        if timeout is None:
            return self._run(list(context), n, stop, branching, None)
        if self._watchdog is None:
            self._watchdog = Watchdog()
        fired = self._watchdog.arm(timeout, stop)
        try:
            drafted = self._run(list(context), n, stop, branching, None)
        finally:
            self._watchdog.disarm()
        if fired.is_set() and not self.failed:
            self.warnings.append(f"the draft gave no answer within {timeout:.3g} s; the "
                                 "target went on alone")
            return Drafted.nothing()
        return drafted

    def _timeout(self, context: list[int]) -> float | None:
        return None if self.timeout_s is None else self.timeout_s + CATCH_UP_S * len(context)

    def _run(self, context, n, stop, branching, predraft, guess=()) -> Drafted:
        t0 = time.perf_counter()
        try:
            extra = {"predraft": predraft} if predraft is not None else {}
            if guess:
                extra["guess"] = guess
            proposal = self.drafter.propose(context, n, self.sampling, self.draws, stop,
                                            branching=branching, **self.adjust, **extra)
        except Exception as e:  # noqa: BLE001 - any draft failure: the target goes on alone
            self.warnings.append(f"the draft failed ({type(e).__name__}: {e}); the target went "
                                 "on alone")
            return Drafted.nothing()
        t1 = time.perf_counter()
        return Drafted(proposal, DraftTiming(t1 - t0, (t0, t1)))

    def collect(self, future: Future, stop: threading.Event, timeout_s: float | None,
                said: float | None = None) -> Drafted:
        """Wait for a job, at most timeout_s (`said`: the job's own timeout, for the warning)."""
        try:
            return future.result(timeout=timeout_s)
        except FutureTimeout:
            stop.set()
            self._hung = future
            self.warnings.append(f"the draft gave no answer within {said or timeout_s:.3g} s; "
                                 "the target went on alone")
            return Drafted.nothing()

    def close(self) -> Future | None:
        """End the thread; returns the job still running when the draft hung (None else):
        the drafter may not be used until it is done."""
        hung = self._hung if self._hung is not None and not self._hung.done() else None
        self._pool.shutdown(wait=hung is None, cancel_futures=True)
        if self._watchdog is not None:
            self._watchdog.close()
        sys.setswitchinterval(self._switch)
        return hung


class Watchdog:
    """One thread that sets an inline job's stop event at its deadline. Arming wakes it only
    when it sleeps past the new deadline, so a round costs a lock, not a thread switch."""

    def __init__(self):
        self._cv = threading.Condition()
        self._job: tuple[float, threading.Event, threading.Event] | None = None
        self._until = float("inf")  # when the watcher wakes next on its own
        self._closed = False
        threading.Thread(target=self._watch, daemon=True, name="draft-watchdog").start()

    def arm(self, timeout_s: float, stop: threading.Event) -> threading.Event:
        """Watch a job from now; returns the event set when it ran past timeout_s."""
        fired = threading.Event()
        with self._cv:
            self._job = (time.monotonic() + timeout_s, stop, fired)
            if self._job[0] < self._until:
                self._cv.notify()
        return fired

    def disarm(self) -> None:
        with self._cv:
            self._job = None

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify()

    def _watch(self) -> None:
        with self._cv:
            while not self._closed:
                job = self._job
                if job is not None and time.monotonic() >= job[0]:
                    job[2].set()
                    job[1].set()
                    self._job = None
                    continue
                self._until = job[0] if job is not None else float("inf")
                self._cv.wait(None if job is None else self._until - time.monotonic())
                self._until = float("inf")
