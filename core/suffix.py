"""Model-free drafts: a suffix index over the context (`SuffixIndex`) and over earlier requests
(`SuffixMemory`) that proposes the likeliest continuation of the context's tail (`Lookup`).

The index is the token array itself (numpy, grown by doubling: appending is amortised O(1)).
A query walks SuffixDecoding's suffix tree (arXiv 2411.04975) implicitly: the occurrences of
the tail's longest earlier match are the node's leaves; the counts of the tokens that follow
them are the node's children's counts, and the walk goes on along the most frequent child,
each step keeping the occurrences that agree. One vectorised scan finds the occurrences of
the last token; each longer match only filters the survivors.
"""
from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

MAX_MATCH = 32  # longest tail matched (SuffixDecoding's tree depth is 64; 32 tokens decide)
MIN_CONF = 0.05  # a walk ends below this path confidence
SEP = -1  # between documents in the memory: no match crosses it
PAST = -2  # past the end of the index (a walk's gathered rows)
MAX_OCC = 256  # occurrences a walk counts: the latest (a frequent short match needs no more)


@dataclass
class Lookup:
    """A proposed continuation (target ids) and each token's confidence given the ones
    before it passed: the share of the matched occurrences that continue with it, scaled by
    how long the match is so far (a long match is better evidence than a frequent short one)."""
    tokens: list[int] = field(default_factory=list)
    conf: list[float] = field(default_factory=list)
    match: int = 0  # tokens of the context's tail matched
    source: str = "context"  # or "memory"

    def __len__(self) -> int:
        return len(self.tokens)

    def cut(self, n: int) -> "Lookup":
        return Lookup(self.tokens[:n], self.conf[:n], self.match, self.source)


class SuffixIndex:
    """The tokens of one sequence (a generation's context, or the memory's documents)."""

    def __init__(self, tokens=(), capacity: int = 1024):
        tokens = np.asarray(tokens, dtype=np.int64)
        self._buf = np.empty(max(capacity, 2 * len(tokens)), dtype=np.int64)
        self._buf[:len(tokens)] = tokens
        self.n = len(tokens)

    def __len__(self) -> int:
        return self.n

    @property
    def tokens(self) -> np.ndarray:
        return self._buf[:self.n]

    def append(self, token: int) -> None:
        if self.n == len(self._buf):
            self._grow(self.n + 1)
        self._buf[self.n] = token
        self.n += 1

    def extend(self, tokens) -> None:
        tokens = np.asarray(tokens, dtype=np.int64)
        if self.n + len(tokens) > len(self._buf):
            self._grow(self.n + len(tokens))
        self._buf[self.n:self.n + len(tokens)] = tokens
        self.n += len(tokens)

    def _grow(self, need: int) -> None:
        buf = np.empty(max(need, 2 * len(self._buf)), dtype=np.int64)
        buf[:self.n] = self._buf[:self.n]
        self._buf = buf

    # -- queries ---------------------------------------------------------------------------
    def match(self, tail: list[int], max_match: int = MAX_MATCH) -> tuple[int, np.ndarray]:
        """The longest suffix of `tail` (up to max_match) that occurs in the index with a
        token after it: (its length, the positions of its last token). (0, []) if none."""
        if not tail or self.n < 2:
            return 0, np.zeros(0, dtype=np.int64)
        toks = self.tokens
        ends = np.flatnonzero(toks[:-1] == tail[-1])
        m = 1
        while len(ends) and m < min(max_match, len(tail)):
            back = ends - m
            ok = back >= 0
            keep = ends[ok][toks[back[ok]] == tail[-1 - m]]
            if not len(keep):
                break
            ends, m = keep, m + 1
        return (m, ends) if len(ends) else (0, ends)

    def walk(self, ends: np.ndarray, match: int, max_len: int) -> Lookup:
        """From the occurrences `ends` of a `match`-token tail (the latest MAX_OCC of them): the
        most frequent next token, again and again (ties: the latest occurrence's), while the path
        confidence stays above MIN_CONF. The tokens after each occurrence are gathered once; the
        walk itself runs over Python lists (a few small steps cost less than numpy calls)."""
        ends = ends[ends + 1 < self.n][-MAX_OCC:]
        if len(ends) == 1:  # one occurrence: a copy
            return self._copy(Lookup(match=match), int(ends[0]), match, max_len, 1.0)
        pos = ends[:, None] + 1 + np.arange(max_len)
        rows = np.where(pos < self.n, self.tokens[np.minimum(pos, self.n - 1)], PAST).tolist()
        out, path, alive = Lookup(match=match), 1.0, list(range(len(rows)))
        for d in range(max_len):
            col = [rows[i][d] for i in alive]
            valid = [t for t in col if t != PAST]
            if not valid:
                break
            tok = _most_frequent(valid)
            if tok == SEP:
                break
            share = valid.count(tok) / len(valid)
            seen = match + d
            conf = share * seen / (seen + 1)
            path *= conf
            if path < MIN_CONF:
                break
            out.tokens.append(int(tok))
            out.conf.append(conf)
            alive = [i for i, t in zip(alive, col) if t == tok]
        return out

    def _copy(self, out: Lookup, end: int, seen: int, n: int, path: float) -> Lookup:
        """The rest of a walk down one occurrence: the tokens after it, each with
        confidence seen / (seen + 1), until a separator or MIN_CONF."""
        run = self.tokens[end + 1:end + 1 + n].tolist()
        for tok in run:
            conf = seen / (seen + 1)
            path *= conf
            if tok == SEP or path < MIN_CONF:
                break
            out.tokens.append(int(tok))
            out.conf.append(conf)
            seen += 1
        return out

    def propose(self, max_len: int, tail: list[int] | None = None) -> Lookup:
        """The continuation of the index's own tail (or of `tail`: the context plus tokens not
        yet in the index), up to max_len tokens."""
        tail = self._tail() if tail is None else tail
        m, ends = self.match(tail)
        return self.walk(ends, m, max_len) if m else Lookup()

    def _tail(self) -> list[int]:
        return self.tokens[-MAX_MATCH:].tolist()


def _most_frequent(nxt: list[int]) -> int:
    """The most frequent token, ties to the latest (the list is in occurrence order)."""
    if nxt.count(nxt[-1]) == len(nxt):  # all agree: the common case in a copy
        return nxt[-1]
    counts = Counter(nxt)
    top = max(counts.values())
    return next(t for t in reversed(nxt) if counts[t] == top)


class SuffixMemory:
    """Earlier prompts and outputs of this app process (a regenerate, the next turn, an agent
    sending the same tool output again), at most `cap_tokens` of them: the oldest documents
    go first. Safe to share between threads (the app's jobs, the benchmark)."""

    def __init__(self, cap_tokens: int = 1 << 18):
        if cap_tokens < 0:
            raise ValueError(f"cap_tokens must be >= 0, got {cap_tokens}")
        self.cap_tokens = cap_tokens
        self._docs: list[np.ndarray] = []
        self._index = SuffixIndex()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """Tokens held (separators not counted)."""
        with self._lock:
            return sum(len(d) for d in self._docs)

    def add(self, ids) -> None:
        doc = np.asarray(ids, dtype=np.int64)[-self.cap_tokens:] if self.cap_tokens else []
        if not len(doc):
            return
        with self._lock:
            self._docs.append(doc)
            held = sum(len(d) for d in self._docs)
            if held <= self.cap_tokens:
                self._index.extend(np.append(doc, SEP))
                return
            while held > self.cap_tokens:
                held -= len(self._docs.pop(0))
            self._index = SuffixIndex(np.concatenate([np.append(d, SEP) for d in self._docs]))

    def clear(self) -> None:
        with self._lock:
            self._docs, self._index = [], SuffixIndex()

    def propose(self, tail: list[int], max_len: int) -> Lookup:
        with self._lock:
            found = self._index.propose(max_len, tail)
        found.source = "memory"
        return found


class ContextLookup:
    """A generation's lookup: its own context's index, with the app's memory beside it; the
    longer match wins (the context's on a tie: it is the more recent evidence)."""

    def __init__(self, context: list[int], memory: SuffixMemory | None = None):
        self.index, self.memory = SuffixIndex(context), memory

    def extend(self, tokens: list[int]) -> None:
        self.index.extend(tokens)

    def propose(self, max_len: int, pending: list[int] = (), score=None) -> Lookup:
        """The continuation after the context plus `pending` tokens not committed yet: the
        context's or the memory's, the higher by `score` (a Lookup's expected passes; the
        context's on a tie: it is the more recent evidence), or without one the longer match.
        A context that matches the whole tail is not looked up in the memory (each round
        asks: a scan of up to the memory's cap)."""
        tail = self.index.tokens[-MAX_MATCH:].tolist() + list(pending)
        tail = tail[-MAX_MATCH:]
        found = self.index.propose(max_len, tail)
        if self.memory is None or found.match == len(tail):
            return found
        other = self.memory.propose(tail, max_len)
        if not other:
            return found
        if score is not None:
            return other if not found or score(other) > score(found) else found
        longer = other.match > found.match or (other.match == found.match and
                                               len(other) > len(found))
        return other if longer else found
