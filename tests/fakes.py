"""Fake backends with known small-vocabulary Markov distributions and optional delays, and a
longest-match tokenizer over a VocabSide for the vocabulary fakes (real pairs pass their own)."""
from __future__ import annotations

import time
from contextlib import contextmanager

import numpy as np

from core.align import VocabSide
from core.backends import Draft, Proposal, Scores
from core.budget import DraftBudget, Profile
from core.constraints import apply_row
from core.learned import Learned
from core.sampling import SamplingConfig, logits_to_probs
from tests.reference import reference_scores


def markov(vocab: int, seed: int, sharp: float = 1.0) -> np.ndarray:
    """A random transition matrix P[last token] -> next-token probabilities."""
    rng = np.random.default_rng(seed)
    m = rng.dirichlet(np.ones(vocab) * sharp, size=vocab)
    return m.astype(np.float64)


class Threads:
    """Thread-count bookkeeping of a backend: the counts asked for, in order; `preserved` sets
    its cache (a token list) aside for a probe and puts it back, as the real backends do."""
    threads = 1
    _cache_attr = "tokens"

    @contextmanager
    def preserved(self, extent: int = 0):
        kept = list(getattr(self, self._cache_attr))
        try:
            yield
        finally:
            setattr(self, self._cache_attr, kept)

    def set_threads(self, n):
        self.thread_log = getattr(self, "thread_log", []) + [n]
        prev, self.threads = self.threads, n
        return prev


class FakeTarget(Threads):
    name = "fake-target"
    _cache_attr = "cache"

    def __init__(self, P: np.ndarray, eos_ids=(), delay=(0.0, 0.0), n_ctx: int = 10_000):
        self.P, self.eos_ids, self.delay, self.n_ctx = P, set(eos_ids), delay, n_ctx
        self.vocab_size = P.shape[0]
        self.cache: list[int] = []
        self.device = "cpu"
        self.forwards = 0

    @property
    def n_cached(self) -> int:
        return len(self.cache)

    @property
    def cached_ids(self) -> list[int]:
        return self.cache

    def score(self, tokens, n_rows, sampling, check=None, adjust=None):
        return reference_scores(self.logits(tokens, n_rows), sampling, check, adjust, tokens)

    def logits(self, tokens, n_rows):
        self.cache.extend(tokens)
        self.forwards += 1
        if self.delay[0] or self.delay[1]:
            time.sleep(self.delay[0] + self.delay[1] * len(tokens))
        rows = [np.log(self.P[t] + 1e-30) for t in self.cache[-n_rows:]]
        return np.stack(rows).astype(np.float32)

    def rollback(self, n_keep):
        del self.cache[n_keep:]


class FakeDrafter(Threads):
    """Samples from Q with the shared transform; `script` forces proposals (greedy edge cases)."""
    name = "fake-draft"

    def __init__(self, Q: np.ndarray, delay: float = 0.0, script=None):
        self.Q, self.delay, self.script = Q, delay, script
        self.tokens: list[int] = []
        self.calls: list[tuple[int, int]] = []
        self.branch_counts: list[int] = []
        self.plans: list = []  # the non-empty pre-draft plans it was given
        self.guesses: list[list[int]] = []  # the lookup's guess given with each proposal
        self.ranks = False
        self.ranked_calls = 0  # proposals asked for ranks (a plan, empty or not, was given)

    def propose(self, context, n, sampling: SamplingConfig, draws, stop=None, branching=None,
                adjust=None, predraft=None, guess=()):
        self.calls.append((len(context), n))
        self.guesses.append(list(guess))  # the same proposal with or without it
        self.adjust = adjust
        self.ranks = predraft is not None  # drafts carry the draft's top candidates
        self.ranked_calls += self.ranks
        out = self._branches(context, n, sampling, draws, stop, branching)
        if predraft:
            self.plans.append(predraft)
            keep = self.tokens
            for j, a in predraft.outcomes:  # a stop does not cut them; batched: no delay
                cut = len(context) - predraft.pending + j
                d = self._sequence(list(context[:cut]), [a], predraft.depth + 1, sampling,
                                   draws, None, delay=0.0)
                out.predrafts[(j, a)] = d[1:]
            self.tokens = keep
        return out

    def _branches(self, context, n, sampling, draws, stop, branching) -> Proposal:
        main = self._sequence(list(context), [], n, sampling, draws, stop)
        if branching is None or n < 2 or not main.tokens:
            return Proposal(main)
        p_first = self._q(context, sampling)
        p_first = p_first if not sampling.greedy else self._q(context, SamplingConfig(1.0))
        p2 = self._q(list(context) + main.tokens[:1], SamplingConfig(1.0)).max()
        firsts = branching.extra_firsts(p_first, float(p2), main.tokens[0], n)
        steps = branching.steps(n, 1 + len(firsts))
        main = self._sequence(list(context), [], steps, sampling, draws, stop)
        out = Proposal(main, [self._sequence(list(context), [f], steps, sampling, draws, stop)
                              for f in firsts])
        out.first_ranking = [int(t) for t in np.argsort(-p_first)[:8]]
        out.first_top_p = float(p_first.max())
        self.branch_counts.append(out.n_seqs)
        return out

    def _q(self, tokens, sampling):
        """q after `tokens`, adjusted for that prefix when a generation asks for it."""
        logits = np.log(self.Q[tokens[-1]] + 1e-30)
        if getattr(self, "adjust", None) is not None:
            logits = apply_row(logits, self.adjust.row(tokens))
        return logits_to_probs(logits, sampling)

    def _ranked(self, tokens, sampling) -> tuple[list[int], list[float]]:
        """The draft's top 4 candidates after `tokens` (greedy: by its untransformed rows)."""
        p = self._q(tokens, SamplingConfig(1.0) if sampling.greedy else sampling)
        top = [int(t) for t in np.argsort(-p, kind="stable")[:4] if p[t] > 0]
        return top, [float(p[t]) for t in top]

    def _sequence(self, context, forced, n, sampling, draws, stop, delay=None) -> Draft:
        tokens, out, rows, ranked = context, [], [], []
        delay = self.delay if delay is None else delay
        for i in range(n):
            if stop is not None and stop.is_set():
                break
            if delay:
                time.sleep(delay)
            q = self._q(tokens, sampling)
            tok = forced[i] if i < len(forced) else (self.script(tokens) if self.script else None)
            if tok is None and sampling.greedy:
                tok = int(np.argmax(q))
            elif tok is None:
                tok = draws.draw(q, len(context) + i)
            out.append(tok)
            rows.append(q)
            if self.ranks:
                ranked.append(self._ranked(tokens, sampling))
            tokens = tokens + [tok]
        self.tokens = tokens
        return Draft(out, None if sampling.greedy or not rows else np.stack(rows),
                     ranked if self.ranks else None)

    def rollback(self, n_keep):
        del self.tokens[n_keep:]


def fake_profile(draft_s=0.01, verify_base=0.04, verify_per_token=0.002) -> Profile:
    return Profile(draft_token_s=draft_s,
                   verify_s=[verify_base + verify_per_token * n for n in range(1, 33)],
                   draft_step_s={k: draft_s for k in range(1, 5)})  # batching is free


def decode(ids):
    return " ".join(map(str, ids))



class LongestMatch:
    """Greedy longest-match tokenizer over a vocabulary's pieces (text ids only)."""

    def __init__(self, side: VocabSide):
        self.ids = {p: i for i, p in enumerate(side.pieces)
                    if side.text_id(i) and i not in side.fallback}
        self.byte_id = side.byte_id
        self.longest = max((len(p) for p in self.ids), default=1)

    def __call__(self, text: str) -> list[int]:
        data, out, i = text.encode("utf-8"), [], 0
        while i < len(data):
            for n in range(min(self.longest, len(data) - i), 0, -1):
                tok = self.ids.get(data[i:i + n])
                if tok is not None:
                    out.append(tok)
                    i += n
                    break
            else:
                if data[i] in self.byte_id:
                    out.append(self.byte_id[data[i]])
                i += 1
        return out


class FakeGrammar:
    """A core.constraints.Grammar over a small vocabulary: token t may follow `prev` (the last
    generated token, -1 at the start) when (2 * prev + t) % 3 != 0; `eos` is always allowed."""

    def __init__(self, vocab: int, eos: int | None = None):
        self.vocab, self.eos, self.consumed = vocab, eos, []
        self.masks = 0  # masks asked for

    @staticmethod
    def allows(prev: int, t: int) -> bool:
        return (2 * prev + t) % 3 != 0

    def allowed(self) -> np.ndarray:
        prev = self.consumed[-1] if self.consumed else -1
        ok = np.array([self.allows(prev, t) for t in range(self.vocab)])
        if self.eos is not None:
            ok[self.eos] = True
        return ok

    def advance(self, tokens) -> int:
        for n, t in enumerate(tokens):
            if not self.allowed()[t]:
                return n
            self.consumed.append(t)
        return len(tokens)

    def rollback(self, n):
        del self.consumed[len(self.consumed) - n:]

    def mask(self):
        self.masks += 1
        bits = np.packbits(self.allowed(), bitorder="little")
        words = np.zeros(4 * ((self.vocab + 31) // 32), np.uint8)
        words[:len(bits)] = bits
        return words.view(np.uint32)

    def fork(self):
        twin = FakeGrammar(self.vocab, self.eos)
        twin.consumed = list(self.consumed)
        return twin


class ScriptedLearned(Learned):
    """A pair's Learned whose budgets see the profile's times x fixed ratios instead of the
    clock's, so a test's rounds, gammas and scales are the same on a busy machine."""

    def __init__(self, draft_ratio: float = 1.0, verify_ratio: float = 1.0):
        super().__init__()
        self.ratios = (draft_ratio, verify_ratio)

    def budget(self, method, profile, overlap, fixed):
        budget = ScriptedBudget(profile, overlap=overlap, fixed=fixed)
        budget.ratios = self.ratios
        budget.restore(self.budgets.get(method))
        return budget


class ScriptedBudget(DraftBudget):
    ratios = (1.0, 1.0)

    def observe(self, drafted, accepted, draft_s=0.0, draft_n=0, verify_s=0.0, verify_n=0):
        draft_s = draft_n * self.profile.draft_token_s * self.ratios[0]
        verify_s = self.profile.verify(verify_n) * self.ratios[1] if verify_n else 0.0
        return super().observe(drafted, accepted, draft_s, draft_n, verify_s, verify_n)
