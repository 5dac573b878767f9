"""The suffix index's pass rates per source and confidence band, learned apart from the model
draft's acceptance (core/budget.py), and what a draft with given pass rates is expected to yield."""
from __future__ import annotations

import bisect

BAND_EDGES = (0.3, 0.6, 0.8, 0.9, 0.95)  # lookup confidence bands: <0.3, ..., >=0.95
BAND_PRIOR = (0.05, 0.2, 0.4, 0.6, 0.8, 0.9)  # pass rates before any is measured
# the memory's (earlier requests') bands: an unrelated request's text matches as long as this
# one's own but passes less often (copy-heavy prompts, greedy: 0.46 against 0.83 at 0.8-0.9)
MEMORY_PRIOR = (0.03, 0.15, 0.4, 0.55, 0.7, 0.8)
SOURCES = ("context", "memory")  # Lookup.source: each learned apart
LOCAL_WEIGHT = 4.0  # the carried rate, as tokens of this generation's own (LookupBands.rate)


class LookupBands:
    """The suffix index's pass rate per source and confidence band (a token's `Lookup.conf`),
    learned apart from the model draft's alpha: P(token passes | the tokens before it passed). The
    generation's own context and the memory of earlier requests have bands of their own: a long
    match in another request's text is weaker evidence than one in this text. The rates carried
    between generations (`alpha`, an ema; the context's bands, then the memory's) are a prior of
    LOCAL_WEIGHT tokens that this generation's own passes and failures per band outweigh as they
    come: a text that copies little (a math answer) stops paying for lookups after a few misses, one
    that copies much (a code edit) earns longer ones, whatever the texts before it taught."""

    def __init__(self, alpha: list[float] | None = None, ema: float = 0.1):
        self.alpha = list(alpha) if alpha else list(BAND_PRIOR + MEMORY_PRIOR)
        self.ema = ema
        self.prior = list(self.alpha)  # the carried rates as this generation started
        self.tried = [0] * len(self.alpha)  # this generation's tokens verified per band
        self.passed = [0] * len(self.alpha)

    @staticmethod
    def band(conf: float, source: str = "context") -> int:
        return SOURCES.index(source) * len(BAND_PRIOR) + bisect.bisect_right(BAND_EDGES, conf)

    def rate(self, band: int) -> float:
        """The band's pass rate for this generation: the carried rate as LOCAL_WEIGHT
        pseudo-tokens beside this generation's counts."""
        return ((self.prior[band] * LOCAL_WEIGHT + self.passed[band]) /
                (LOCAL_WEIGHT + self.tried[band]))

    def pass_probs(self, conf: list[float], source: str = "context") -> list[float]:
        return [self.rate(self.band(c, source)) for c in conf]

    def expected(self, found) -> float:
        """Expected lookup tokens that pass of a `Lookup` (its source's bands)."""
        return expected_tokens(self.pass_probs(found.conf, found.source))[0] - 1

    def observe(self, conf: list[float], accepted: int, source: str = "context") -> None:
        """Tokens before the first rejected one passed; that one failed; later ones were not
        tried."""
        for i, c in enumerate(conf[:accepted + 1]):
            b, ok = self.band(c, source), i < accepted
            self.alpha[b] += self.ema * (float(ok) - self.alpha[b])
            self.tried[b] += 1
            self.passed[b] += ok


def expected_tokens(probs: list[float]) -> tuple[float, float]:
    """(expected tokens of a round that verifies a draft with these conditional pass rates,
    including the target's own; the chance that all pass)."""
    reach, total = 1.0, 1.0
    for a in probs:
        reach *= a
        total += reach
    return total, reach
