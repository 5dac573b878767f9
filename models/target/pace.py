"""Which thread count a compiled CPU target's forward runs at when it is asked for more than
its first (models/target/static.py: graph_threads): the more, unless its recent forwards of
that size were slower than the first count's. The app's OpenMP threads spin briefly before
they sleep (models/__init__.py): on an idle 2-core Intel Xeon two threads took 27 ms a token
against 47 on one, but beside another busy process 99 ms, since each of the few hundred
parallel regions of a forward waits for a thread that is off its core."""
from __future__ import annotations

EMA = 0.3  # weight of the newest forward in a running time
RETRY = 16  # forwards at the first count between two tries of the more while it is slower


class Pace:
    """Running forward times per (thread count, chunk size class); `pick` the count a forward
    takes, `observe` its time."""

    def __init__(self, counts: tuple[int, ...]):
        self.first = counts[0]
        self.seconds: dict[tuple[int, int], float] = {}
        self.held = 0  # forwards held at the first count since the more was last tried

    def pick(self, asked: int, size: int) -> int:
        """`asked` (a count the target has graphs for), or the first where `asked` was
        slower at this size; every RETRY-th such forward tries `asked` again."""
        if asked == self.first:
            return asked
        more, first = (self.seconds.get((n, size.bit_length())) for n in (asked, self.first))
        if more is None or first is None or more <= first:
            return asked
        self.held += 1
        if self.held >= RETRY:
            self.held = 0
            return asked
        return self.first

    def forget(self, size: int) -> None:
        """Drop this size's times at every count (a compile's first calls are no pace)."""
        self.seconds = {k: v for k, v in self.seconds.items() if k[1] != size.bit_length()}

    def observe(self, count: int, size: int, seconds: float) -> None:
        key = (count, size.bit_length())
        old = self.seconds.get(key)
        self.seconds[key] = seconds if old is None else old + EMA * (seconds - old)
