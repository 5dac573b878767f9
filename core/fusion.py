"""The suffix index's part in a round: what it proposes after the context, priced by
expected tokens per second against the model's chunk (and fused with it where the index
continues it), and cut where a grammar refuses it."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.backends import Draft
from core.bands import LookupBands, expected_tokens
from core.budget import MAX_GAMMA, DraftBudget
from core.suffix import ContextLookup, Lookup

LOOKUP_MAX = MAX_GAMMA  # draft tokens at most with a lookup in it (core/budget.py: MAX_VERIFY)
MARGIN = 0.05  # a lookup must win by this much: smaller priced gains are within its error
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
        if run.prefilling:  # tokens after the prompt's prefill delay the first token
            return Pick(model, "model" if len(model) else "plain")
        room = run.draft_room(LOOKUP_MAX)
        after = self.proposal(run, [], room)
        fused = self.proposal(run, model.tokens, room - len(model)) if len(model) else Lookup()
        own = Pick(model, "model" if len(model) else "plain", bool(after or fused))
        if not own.offered:
            return own
        if self.mode == "on":
            found, base, source = (fused, model, "fused") if fused else (after, Draft(), "lookup")
            return Pick(base.plus(found, self.sampled), source, True)
        model_p, miss = [budget.alpha] * len(model), _miss_s(budget)
        options = []
        for found, base, source, prior in ((after, Draft(), "lookup", []),
                                           (fused, model, "fused", model_p)):
            if found:
                rate, n = self.best_length(budget, prior, found, beside, miss)
                options.append((rate, Pick(base.plus(found.cut(n), self.sampled), source, True)))
        best = max(options, key=lambda o: o[0])
        if best[0] > self._rate(budget, model_p, beside, miss=miss) * (1 + MARGIN):
            self.lost = 0
            return best[1]
        if self.lost >= PROBE_EVERY - 1:  # a probe: priors that never lose are never learned
            self.lost = 0
            return _probe(options, own)
        self.lost += 1
        return own

    def guess(self, run, budget: DraftBudget, pending: list[int], n: int) -> list[int]:
        """The index's continuation of the context + `pending` for the worker drafting n tokens
        after them to evaluate in one batch (its drafts stay its own): as long as the decodes
        it may spare (each token's pass rate from the bands, a proxy for the draft picking it
        too) outweigh the batch's cost (budget.batch_s); none where batching saves nothing."""
        if not budget.batch_pays(n - 1):  # spares at most k steps: nothing to look up
            return []
        found = self.proposal(run, pending, n - 1)
        step, reach, spared, best, keep = budget.draft_s(1), 1.0, 0.0, 0.0, 0
        for g, p in enumerate(self.bands.pass_probs(found.conf, found.source) if found else [],
                              1):
            reach *= p
            spared += reach * step
            if spared - budget.batch_s(g) > best:
                best, keep = spared - budget.batch_s(g), g
        return list(found.tokens[:keep])

    def proposal(self, run, pending: list[int], room: int) -> Lookup:
        """The index's continuation of the context + `pending`, at most `room` tokens (the
        context's or the memory's, whichever the bands expect more of), cut at the first
        token the grammar refuses."""
        if room <= 0:
            return Lookup()
        found = self.index.propose(room, pending, score=self.bands.expected)
        if found and run.adjust is not None and run.adjust.grammar is not None:
            found = found.cut(_allowed(run, pending, found.tokens))
        return found

    def best_length(self, budget: DraftBudget, prior: list[float], found: Lookup,
                    beside: bool, miss: float) -> tuple[float, int]:
        """The priced tokens/s of `found`'s best cut after a draft of pass rates `prior`,
        and that cut's length."""
        probs = self.bands.pass_probs(found.conf, found.source)

        rates = [self._rate(budget, prior + probs[:n], beside, len(prior), miss)
                 for n in range(1, len(probs) + 1)]
        n = int(np.argmax(rates))
        return rates[n], n + 1

    @staticmethod
    def _rate(budget: DraftBudget, probs: list[float], beside: bool, model_n: int = -1,
              miss: float | None = None) -> float:
        """Expected tokens per second of a round that verifies a draft with these pass rates
        (the first `model_n` the model's, -1: all). With the worker beside, drafting after the
        model's part, its chunk is the next round's draft when it wrote what the target kept
        past that part; otherwise the next round starts without one, which costs `_miss_s`
        (charged to this round: a long draft that seldom passes pays for the empty round);
        `miss`: _miss_s(budget), when the caller has it."""
        tokens, _ = expected_tokens(probs)
        t = budget.verify_s(len(probs) + 1)
        if beside:
            model_n = len(probs) if model_n < 0 else model_n
            size = budget.chunk_beside(len(probs), model_n < len(probs))
            ready = _chunk_ready(probs, model_n, budget.alpha, size)
            miss = _miss_s(budget) if miss is None else miss
            t = max(t, budget.draft_s(size)) + (1 - ready) * miss
        return tokens / max(t, 1e-9)


def _chunk_ready(probs: list[float], model_n: int, alpha: float, size: int) -> float:
    """The chance that the chunk drafted after the model's part (`size` tokens, each right
    with the model's `alpha`) goes on past what the round keeps: the model's part passes,
    then j of the lookup's tokens and the target's own, all of which the chunk wrote."""
    reach = 1.0
    for p in probs[:model_n]:
        reach *= p
    ready = 0.0
    for j, p in enumerate(probs[model_n:] + [0.0]):
        if j + 1 >= size:
            break
        ready += reach * (1 - p) * alpha ** (j + 1)
        reach *= p
    return ready


def _miss_s(budget: DraftBudget) -> float:
    """The time a round without a ready draft loses: it yields one token in
    max(verify(1), draft(empty chunk)), where a token takes 1 / rate on average."""
    plain = max(budget.verify_s(1), budget.draft_s(budget.empty_chunk()))
    return max(0.0, plain - 1 / max(budget.expected_rate(budget.gamma), 1e-9))


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
