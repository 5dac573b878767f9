"""The one thread that owns a target: its loads, warm-ups, profiles, generations and close run
there (inductor keeps CUDA graphs, and OpenMP its thread count, per thread); other threads send
it work and read a generation's events from a queue."""
from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from contextlib import closing
from typing import Callable, Iterator, TypeVar

T = TypeVar("T")
_ITEM, _END, _ERROR = range(3)


class Owner:
    """A long-lived worker thread running one piece of work at a time, in the order sent.
    A call made on the owner thread itself runs in place (no deadlock on nesting)."""

    def __init__(self, name: str = "target-owner"):
        self._work: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, daemon=True, name=name)
        self._thread.start()

    @property
    def ident(self) -> int | None:
        return self._thread.ident

    def here(self) -> bool:
        return threading.get_ident() == self._thread.ident

    def _serve(self) -> None:
        while (job := self._work.get()) is not None:
            job()

    def call(self, fn: Callable[..., T], *args, **kwargs) -> T:
        """fn(*args, **kwargs) on the owner thread; its result, or its exception raised here."""
        if self.here():
            return fn(*args, **kwargs)
        if not self._thread.is_alive():
            raise RuntimeError("the target's owner thread has stopped")
        done: Future = Future()

        def job():
            try:
                done.set_result(fn(*args, **kwargs))
            except BaseException as e:  # noqa: BLE001 - raised again in the caller
                done.set_exception(e)
        self._work.put(job)
        return done.result()

    def stream(self, make: Callable[[], Iterator[T]]) -> Iterator[T]:
        """The generator `make()` runs on the owner thread; its items are yielded here as they
        come. Closing this iterator closes that generator at its next item."""
        if self.here():
            yield from make()
            return
        out: queue.SimpleQueue = queue.SimpleQueue()
        left = threading.Event()  # the reader is gone: stop at the next item
        self._work.put(lambda: _pump(make, out, left))
        try:
            while True:
                kind, item = out.get()
                if kind == _END:
                    return
                if kind == _ERROR:
                    raise item
                yield item
        finally:
            left.set()

    def stop(self) -> None:
        """End the thread after the work already sent."""
        self._work.put(None)


def _pump(make, out: queue.SimpleQueue, left: threading.Event) -> None:
    """Run on the owner thread: every item of make() into `out`, then the end or the error."""
    try:
        with closing(make()) as items:
            for item in items:
                out.put((_ITEM, item))
                if left.is_set():
                    break
    except BaseException as e:  # noqa: BLE001 - raised again in the reader
        out.put((_ERROR, e))
    else:
        out.put((_END, None))
