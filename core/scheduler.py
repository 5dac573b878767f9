"""All of the engine's concurrency: a draft worker thread that drafts while the target verifies.

llama.cpp and torch both release the GIL, so a thread is enough. `sequential=True` runs each
job inline when it is submitted, giving the same rounds without overlap (tests, comparison).
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from core.backends import Draft, Drafter
from core.sampling import SamplingConfig


class DraftJob:
    def __init__(self, future: Future, stop: threading.Event):
        self._future, self._stop = future, stop

    def result(self) -> Draft:
        return self._future.result()

    def cancel(self) -> None:
        """Ask the drafter to stop after its current token; result() is still valid."""
        self._stop.set()


class DraftWorker:
    def __init__(self, drafter: Drafter, sampling: SamplingConfig, seed: int,
                 sequential: bool = False):
        self.drafter, self.sampling, self.seed = drafter, sampling, seed
        self.sequential = sequential
        self._pool = None if sequential else ThreadPoolExecutor(1, thread_name_prefix="draft")
        self._jobs = 0

    def submit(self, context: list[int], n: int, **options) -> DraftJob:
        """Draft up to n tokens after `context` (copied now; the caller may change its list)."""
        stop = threading.Event()
        # one RNG per job, so cancelled work never shifts later draws; the spawn key keeps
        # it independent of the verifier's default_rng(seed)
        rng = np.random.default_rng(np.random.SeedSequence(self.seed, spawn_key=(1, self._jobs)))
        self._jobs += 1
        args = (list(context), n, rng, stop, options)
        if self._pool is None:
            fut: Future = Future()
            fut.set_result(self._run(*args))
        else:
            fut = self._pool.submit(self._run, *args)
        return DraftJob(fut, stop)

    def _run(self, context, n, rng, stop, options) -> Draft:
        t0 = time.perf_counter()
        draft = self.drafter.propose(context, n, self.sampling, rng, stop, **options)
        t1 = time.perf_counter()
        draft.busy_s, draft.span = t1 - t0, (t0, t1)
        return draft

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
