"""Which of two thread counts runs faster now: each count's time per call as it runs (an ema,
per size class), so a side that takes every core gives them back when another program takes
one. The draft (models/draft/llama.py): llama.cpp's own pool spins at its barriers, so a
thread that loses its core stalls every decode. The CPU target on every core
(models/target/eager.py: TorchTarget.paced, for both paths): its OpenMP threads spin briefly
(models/__init__.py), and each of a compiled forward's few hundred parallel regions waits for
a thread that is off its core (on the 2-core Xeon two threads took 27 ms a token idle, 99
beside a busy loop; one 47)."""
from __future__ import annotations

EMA = 0.2
PROBE_EVERY = 32  # a count found slower is timed again after this many calls without it


class Pace:
    def __init__(self):
        self.ema: dict[tuple[int, int], float] = {}  # (threads, size class) -> s a call
        self.passed_over = 0

    def observe(self, threads: int, seconds: float, size: int = 1) -> None:
        key = (threads, size.bit_length())
        old = self.ema.get(key)
        self.ema[key] = seconds if old is None else old + EMA * (seconds - old)

    def prefers(self, more: int, fewer: int, size: int = 1) -> bool:
        """Whether a call of `size` runs on `more` threads rather than `fewer`: until both are
        timed at its size class and while `more` is the faster; else once every PROBE_EVERY
        asks, to time it again."""
        a, b = (self.ema.get((n, size.bit_length())) for n in (more, fewer))
        if a is None or b is None or a < b:
            self.passed_over = 0
            return True
        self.passed_over += 1
        if self.passed_over >= PROBE_EVERY:
            self.passed_over = 0
            return True
        return False

    def forget(self, threads: int, size: int) -> None:
        """Drop the time of `threads` at `size`'s class (a compile's first calls)."""
        self.ema.pop((threads, size.bit_length()), None)
