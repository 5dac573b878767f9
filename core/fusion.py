"""The suffix index's part in a round (issue 30): what it proposes after the context, priced by
expected tokens per second against the model's chunk (and fused with it where the index
continues it), and cut where a grammar refuses it."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.backends import Draft
from core.budget import DraftBudget, LookupBands, expected_tokens
from core.suffix import ContextLookup, Lookup

LOOKUP_MAX = 32  # tokens in one verified draft at most, with a lookup in it (verify buckets)
PROBE_EVERY = 8  # auto: a lookup that lost this many rounds running is tried (bands learn)


@dataclass
class Pick:
    """What a round verifies: `source` is model, lookup, fused (the model's chunk extended by
    the lookup) or plain (no draft); `offered`: the index had a proposal this round."""
    draft: Draft
    source: str
    offered: bool = False


class LookupPolicy:
    """A generation's lookup: the index over its context (and the app's memory), the learned
    pass rate per confidence band, and the mode: `auto` prices every option (and tries the
    lookup after PROBE_EVERY lost rounds, so its bands are measured), `on` takes the lookup
    whenever it proposes (fused first)."""

    def __init__(self, index: ContextLookup, bands: LookupBands, mode: str, sampled: bool):
        self.index, self.bands, self.mode, self.sampled = index, bands, mode, sampled
        self.lost = 0  # rounds running in which the index proposed and the pricing said no

    def extend(self, tokens: list[int]) -> None:
        self.index.extend(tokens)

    def pick(self, run, budget: DraftBudget, model: Draft, beside: bool) -> Pick:
        """The best of: `model` (the chunk drafted last round, or no draft), the lookup's
        continuation of the context, and `model` extended by the lookup's continuation of
        context + model. `beside`: the worker drafts the next chunk during this verify (the
        chunk is used when every token passes)."""
        room = run.draft_room(LOOKUP_MAX)
        alone = self.proposal(run, [], room)
        fused = self.proposal(run, model.tokens, room - len(model)) if len(model) else Lookup()
        own = Pick(model, "model" if len(model) else "plain", bool(alone or fused))
        if not own.offered:
            return own
        if self.mode == "on":
            found, base, source = (fused, model, "fused") if fused else (alone, Draft(), "lookup")
            return Pick(base.plus(found.tokens, found.conf, self.sampled), source, True)
        model_p = [budget.alpha] * len(model)
        options = []
        for found, base, source, prior in ((alone, Draft(), "lookup", []),
                                           (fused, model, "fused", model_p)):
            if found:
                rate, n = self._best_length(budget, prior, found, beside)
                draft = base.plus(found.tokens[:n], found.conf[:n], self.sampled)
                options.append((rate, Pick(draft, source, True)))
        best = max(options, key=lambda o: o[0])
        if best[0] > self._rate(budget, model_p, beside):
            self.lost = 0
            return best[1]
        if self.lost >= PROBE_EVERY - 1:  # a probe: priors that never lose are never learned
            self.lost = 0
            return _probe(options, own)
        self.lost += 1
        return own

    def proposal(self, run, pending: list[int], room: int) -> Lookup:
        """The index's continuation of the context + `pending`, at most `room` tokens, cut
        at the first token the grammar refuses."""
        if room <= 0:
            return Lookup()
        found = self.index.propose(room, pending)
        if found and run.adjust is not None and run.adjust.grammar is not None:
            found = found.cut(_allowed(run, pending, found.tokens))
        return found

    def _best_length(self, budget: DraftBudget, prior: list[float], found: Lookup,
                     beside: bool) -> tuple[float, int]:
        probs = self.bands.pass_probs(found.conf)
        rates = [self._rate(budget, prior + probs[:n], beside) for n in range(1, len(probs) + 1)]
        n = int(np.argmax(rates))
        return rates[n], n + 1

    @staticmethod
    def _rate(budget: DraftBudget, probs: list[float], beside: bool) -> float:
        """Expected tokens per second of a round that verifies a draft with these pass rates;
        with the worker beside, a full pass also leaves the next chunk ready (worth the
        model's expected accepted tokens of a chunk, when its guess is right)."""
        tokens, reach = expected_tokens(probs)
        t = budget.verify_s(len(probs) + 1)
        if beside:
            a, g = budget.alpha, max(budget.gamma, 1)
            tokens += reach * a * sum(a ** k for k in range(1, g + 1))
            size = budget.gamma + 1 if probs else budget.empty_chunk()
            t = max(t, budget.draft_s(size))
        return tokens / max(t, 1e-9)


def _probe(options: list[tuple[float, Pick]], own: Pick) -> Pick:
    """The option a probe verifies: the model's chunk extended by the lookup where it has a
    chunk (a miss then costs only the extension), the lookup alone only in a plain round."""
    fused = [pick for _, pick in options if pick.source == "fused"]
    alone = [pick for _, pick in options if pick.source == "lookup"]
    return fused[0] if fused else (alone[0] if alone and own.source == "plain" else own)


def _allowed(run, pending: list[int], tokens: list[int]) -> int:
    """How many of `tokens` (after the context and `pending`) the grammar allows in a row."""
    rows = run.adjust.rows(run.ctx, list(pending) + list(tokens)).rows[len(pending):]
    for i, (tok, row) in enumerate(zip(tokens, rows)):
        allowed = row.allowed
        if allowed is not None and (tok >> 5 >= len(allowed) or
                                    not (int(allowed[tok >> 5]) >> (tok & 31)) & 1):
            return i
    return len(tokens)
