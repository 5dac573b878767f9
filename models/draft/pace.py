"""Which of two thread counts the draft decodes faster on now: each count's time per decode
as it runs (an ema), so a draft that takes every core alone gives them back when another
program takes one (llama.cpp's own pool spins at its barriers: a thread that loses its core
stalls every decode)."""
from __future__ import annotations

EMA = 0.2
PROBE_EVERY = 32  # a count found slower is timed again after this many decodes without it


class Pace:
    def __init__(self):
        self.ema: dict[int, float] = {}  # threads -> s a one-token decode
        self.passed_over = 0

    def observe(self, threads: int, seconds: float) -> None:
        old = self.ema.get(threads)
        self.ema[threads] = seconds if old is None else old + EMA * (seconds - old)

    def prefers(self, more: int, fewer: int) -> bool:
        """Whether to decode on `more` threads rather than `fewer`: until both are timed and
        while `more` is the faster; else once every PROBE_EVERY asks, to time it again."""
        a, b = self.ema.get(more), self.ema.get(fewer)
        if a is None or b is None or a < b:
            self.passed_over = 0
            return True
        self.passed_over += 1
        if self.passed_over >= PROBE_EVERY:
            self.passed_over = 0
            return True
        return False
