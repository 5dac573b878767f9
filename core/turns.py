"""duo's choice, where the draft and the target share the cores (a CPU target that can take
every core), between overlapped rounds and rounds in turns (the chunk drafted, then verified
on every core, as sps does). The choice is made at each round without a ready chunk, and
what follows until the next such round is an episode of its way; the rates the two ways
realized (tokens per second of their episodes, everything counted: a chunk's catching up,
an empty round) decide once both are measured, the budget's prices until then, and the
other way is tried every PROBE_EVERY choices so both stay measured. On the 2-core Xeon the
priced overlap was 69 tokens/s where its rounds made about 45 (the draft's catching up at
each chunk is not in its per-token time), and sps beat it."""
from __future__ import annotations

EMA = 0.3  # weight of the newest episode in a way's rate
PROBE_EVERY = 8  # every 8th choice takes the other way, once both ways have a rate


class Turns:
    def __init__(self, rates: dict | None = None):
        self.rates: dict[str, float] = dict(rates or {})  # overlap / serial -> tokens/s
        self.choices = 0
        self._episode: tuple[str, float, int] | None = None  # way, start, tokens then

    def choose(self, now: float, n_tokens: int, priced_serial: bool) -> bool:
        """Whether the episode starting now (`n_tokens` in the context) goes in turns; ends
        the last episode and keeps its rate."""
        self.end(now, n_tokens)
        self.choices += 1
        if len(self.rates) == 2:
            serial = self.rates["serial"] > self.rates["overlap"]
        else:
            serial = priced_serial
        if self.rates and self.choices % PROBE_EVERY == 0:
            serial = not serial
        self._episode = ("serial" if serial else "overlap", now, n_tokens)
        return serial

    def end(self, now: float, n_tokens: int) -> None:
        """The current episode ends (its tokens and time kept); none: nothing."""
        if self._episode is None:
            return
        way, start, before = self._episode
        self._episode = None
        if now > start and n_tokens > before:
            self.observe(way, (n_tokens - before) / (now - start))

    def observe(self, way: str, rate: float) -> None:
        old = self.rates.get(way)
        self.rates[way] = rate if old is None else old + EMA * (rate - old)
