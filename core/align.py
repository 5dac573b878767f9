"""Runtime vocabulary translation between draft and target token ids: `IdentityVocab` when they
share a tokenizer, `MappedVocab` (through the text, as bytes) when they do not. The mode
(greedy or sampling) is an argument of each call; models/pairs/vocab_build.py does the analysis.

long: one translator whose two directions share the chunk cache and the counters, with the
byte/Unicode rules only it uses; split, the exactness argument would no longer read in one place.
"""
from __future__ import annotations

import re
import unicodedata
from bisect import bisect_left
from collections import OrderedDict
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable, Protocol

import numpy as np

Tokenize = Callable[[str], list[int]]  # text -> ids, no special-token parsing, no prefix


class IdentityVocab:
    """Draft and target share a tokenizer: ids pass through; q rows are padded or cut to the
    target's vocabulary size (padded embedding rows never get probability)."""
    same = True

    def __init__(self, draft_size: int, target_size: int):
        self.draft_size, self.target_size = draft_size, target_size
        self._mask = None if draft_size <= target_size else np.arange(draft_size) < target_size

    def draft_mask(self, greedy: bool) -> np.ndarray | None:
        return self._mask

    def settle(self, context: list[int]) -> None:
        pass

    def to_draft(self, target_ids: list[int]) -> list[int]:
        return target_ids

    def to_target(self, draft_ids: list[int], greedy: bool = False,
                  after: list[int] | None = None) -> list[int]:
        return draft_ids

    def q_to_target(self, q: np.ndarray) -> np.ndarray:
        if q.shape[-1] == self.target_size:
            return q
        out = np.zeros(q.shape[:-1] + (self.target_size,), dtype=q.dtype)
        n = min(self.target_size, q.shape[-1])
        out[..., :n] = q[..., :n]
        return out

    def stats(self) -> dict:
        return {"same_tokenizer": True, "draft_size": self.draft_size,
                "target_size": self.target_size}

    def uncounted(self):
        return nullcontext()


@dataclass
class VocabSide:
    """One tokenizer as the aligner sees it: the bytes each id stands for (b"" for control
    tokens), its control tokens by name, its end-of-text ids and its byte-fallback ids."""
    pieces: list[bytes]
    control: dict[int, str] = field(default_factory=dict)
    eos: frozenset[int] = frozenset()
    fallback: frozenset[int] = frozenset()  # <0xNN> tokens: one raw byte each

    def __post_init__(self):
        self.eos, self.fallback = frozenset(self.eos), frozenset(self.fallback)
        self.byte_id = self._byte_ids()

    def __len__(self) -> int:
        return len(self.pieces)

    def text_id(self, i: int) -> bool:
        return i not in self.control and bool(self.pieces[i])

    def _byte_ids(self) -> dict[int, int]:
        """byte -> the id that spells that one byte (a plain token first, else a fallback)."""
        out: dict[int, int] = {}
        for i, p in enumerate(self.pieces):
            if len(p) == 1 and self.text_id(i):
                if p[0] not in out or (out[p[0]] in self.fallback and i not in self.fallback):
                    out[p[0]] = i
        return out


class Alignment(Protocol):
    """What the translator reads from the load-time analysis (models/pairs/vocab_build.py.VocabMap)."""
    draft: VocabSide
    target: VocabSide
    d2t: np.ndarray  # draft id -> its twin (same bytes) in the target, or -1
    control_t2d: dict[int, int]
    control_d2t: dict[int, int]

    def report(self) -> dict: ...


_ESCAPED = re.compile("([\udc80-\udcff]+)")  # bytes that are not UTF-8, after surrogateescape
WS = b" \t\n\r"
MAX_CHUNK = 48  # target tokens: a longer run with no word start is cut anyway


class MappedVocab:
    """Draft and target tokenizers differ: translate through the bytes.

    * Context (`to_draft`): the target context is cut into chunks where the draft's
      pre-tokenizer splits too (word starts, letter/digit/punctuation changes, CJK
      characters) and each chunk is tokenized by the draft's tokenizer (cached); all but the
      last chunk are reused, so consecutive contexts give the same draft prefix and the
      drafter's KV cache is only rolled back to where the text changed.
    * Sampling (`greedy=False`): the draft may only propose tokens that have a target twin
      with the same bytes (`draft_mask(False)`); each draft token is one target token and
      each q row moves to the twins' columns, so p/q is defined on target tokens and the
      verifier stays exact.
    * Greedy (`greedy=True`): any text token may be proposed and the proposal's text is
      re-tokenized by the target's tokenizer, so a draft token may become several target
      tokens or part of one; the verifier needs no q.
    * Stats: `to_target(..., after=context)` names the proposal; `settle(next_context)`
      counts how much of it the next context kept.
    """
    same = False

    def __init__(self, vmap: Alignment, draft_tokenize: Tokenize, target_tokenize: Tokenize,
                 target_size: int | None = None, cache_size: int = 4096):
        self.map = vmap
        self.draft_size = len(vmap.draft)
        # the target's logit width: q rows must match p rows; tokenizer ids past it (added
        # tokens with no embedding row) are never proposed
        self.target_size = target_size or len(vmap.target)
        self.draft_tok, self.target_tok = draft_tokenize, target_tokenize
        self.sample_mask = _injective(np.where(vmap.d2t < self.target_size, vmap.d2t, -1))
        self.greedy_mask = np.array([vmap.draft.text_id(i) or i in vmap.control_d2t
                                     for i in range(self.draft_size)], dtype=bool)
        rep = vmap.report()
        self.coverage = {k: rep[k] for k in ("shared_tokens", "draft_share", "target_share")}
        self._src = np.nonzero(self.sample_mask)[0]
        self._dst = vmap.d2t[self._src]
        self._chunks: OrderedDict[tuple, list[int]] = OrderedDict()
        self._cache_size = cache_size
        self._ctx: list[int] = []  # the last target context
        self._cuts: list[int] = [0]  # where its chunks start (target index)
        self._dpos: list[int] = [0]  # where each chunk's translation starts (draft index)
        self._draft: list[int] = []  # its draft translation
        self._pending: tuple | None = None  # the last proposal, until settle() sees its fate
        self.counts = _Counts()

    # -- the interface the drafter uses ----------------------------------------------------
    def draft_mask(self, greedy: bool) -> np.ndarray:
        """The draft ids that may be proposed in this mode."""
        return self.greedy_mask if greedy else self.sample_mask

    def to_draft(self, target_ids: list[int]) -> list[int]:
        """The draft's context for a target context (the same in both modes)."""
        lcp = common_prefix(self._ctx, target_ids)
        k = max(0, bisect_left(self._cuts, lcp) - 1)  # chunks before k are kept
        start = self._dpos[k]
        old_tail = self._draft[start:]
        del self._cuts[k + 1:], self._dpos[k + 1:], self._draft[start:]
        self._ctx = list(target_ids)
        self._extend(self._cuts[k])
        self._count_context(start, old_tail)
        return list(self._draft)

    def to_target(self, draft_ids: list[int], greedy: bool = False,
                  after: list[int] | None = None) -> list[int]:
        """Target ids for draft ids. Sampling: one per draft id. Greedy: the text
        re-tokenized, never more target ids than draft ids, at least one when given any.
        `after`: the target context the draft follows, given for the proposal (the one the
        stats follow); branches and first-token ranks leave it out."""
        out, used = self._retokenize(draft_ids) if greedy else self._twins(draft_ids)
        if not out and draft_ids:  # e.g. half a character: how the target would start it
            out, used = self._first_guess(draft_ids[0]), [0, 1]
        c = self.counts
        if after is None:
            c.extra_translations += 1
            return out
        c.proposals += 1
        c.draft_in += len(draft_ids)
        c.draft_used += used[len(out)]
        c.target_out += len(out)
        self._pending = (list(after), out, used)
        return out

    def settle(self, context: list[int]) -> None:
        """How much of the last proposal `context` (the next one) kept: exact for sps; for
        duo the next context may still hold draft tokens that are not verified yet."""
        if self._pending is None:
            return
        after, out, used = self._pending
        self._pending = None
        if list(context[:len(after)]) != after:
            return
        a = common_prefix(out, context[len(after):])
        self.counts.settled_target += a
        self.counts.settled_draft += used[a]

    def q_to_target(self, q: np.ndarray) -> np.ndarray:
        """Rows over the draft vocabulary -> rows over the target's: each twin's column."""
        out = np.zeros(q.shape[:-1] + (self.target_size,), dtype=q.dtype)
        out[..., self._dst] = q[..., self._src]
        return out

    @contextmanager
    def uncounted(self):
        """Translations inside (the profiler's probes) leave no trace: the counters, the
        pending proposal and the last context's translation (the drafter's cache, which
        `LlamaDrafter.preserved` puts back, follows it) are as before."""
        saved = (self.counts, self._pending, self._ctx, self._cuts, self._dpos, self._draft)
        self.counts, self._ctx, self._cuts, self._dpos, self._draft = _Counts(), [], [0], [0], []
        try:
            yield
        finally:
            (self.counts, self._pending, self._ctx, self._cuts, self._dpos,
             self._draft) = saved

    def stats(self) -> dict:
        """Counters since the last call (one generation), with the vocabularies' overlap."""
        s = self.counts.to_dict()
        s.update(same_tokenizer=False, draft_size=self.draft_size,
                 target_size=self.target_size, **self.coverage)
        self.counts = _Counts()
        return s

    # -- target -> draft (the context) ------------------------------------------------------
    def _count_context(self, start: int, old_tail: list[int]) -> None:
        kept = start + common_prefix(old_tail, self._draft[start:])
        c = self.counts
        if c.ctx_calls:  # the first context of a generation follows another prompt
            c.ctx_draft_redone += start + len(old_tail) - kept
        c.ctx_calls += 1
        c.ctx_draft_kept += kept
        c.ctx_draft_new += len(self._draft) - kept

    def _extend(self, start: int) -> None:
        """Cut self._ctx into chunks from `start` (a chunk start) on and translate them."""
        ctx, pieces, ctrl = self._ctx, self.map.target.pieces, self.map.target.control
        i = start
        while i < len(ctx):
            j = i + 1
            if ctx[i] not in ctrl:
                while (j < len(ctx) and ctx[j] not in ctrl and j - i < MAX_CHUNK
                       and not _cut_before(pieces[ctx[j - 1]], pieces[ctx[j]])):
                    j += 1
            if i != self._cuts[-1]:
                self._cuts.append(i)
                self._dpos.append(len(self._draft))
            self._draft += self._chunk(tuple(ctx[i:j]))
            i = j

    def _chunk(self, ids: tuple) -> list[int]:
        hit = self._chunks.get(ids)
        if hit is not None:
            self._chunks.move_to_end(ids)
            return hit
        self.counts.ctx_chunks_translated += 1
        self.counts.ctx_target_translated += len(ids)
        if len(ids) == 1 and ids[0] in self.map.target.control:
            d = self.map.control_t2d.get(ids[0])
            out = [] if d is None else [d]
        else:
            out = self._draft_ids(b"".join(self.map.target.pieces[t] for t in ids))
        self._chunks[ids] = out
        if len(self._chunks) > self._cache_size:
            self._chunks.popitem(last=False)
        return out

    def _draft_ids(self, data: bytes) -> list[int]:
        """Any bytes -> draft ids: text through the tokenizer, stray bytes one by one."""
        out, byte_id = [], self.map.draft.byte_id
        for k, part in enumerate(_ESCAPED.split(data.decode("utf-8", "surrogateescape"))):
            if k % 2 == 0:
                out += self.draft_tok(part) if part else []
            else:
                out += [byte_id[b] for b in _unescape(part) if b in byte_id]
        return out

    # -- draft -> target (the proposal) ------------------------------------------------------
    def _twins(self, draft_ids: list[int]) -> tuple[list[int], list[int]]:
        out = []
        for d in draft_ids:
            t = int(self.map.d2t[d])
            if t < 0:
                raise ValueError(f"draft token {d} has no target twin: a sampled draft must "
                                 "apply vocab.draft_mask(greedy=False)")
            out.append(t)
        return out, list(range(len(out) + 1))

    def _first_guess(self, d: int) -> list[int]:
        t = int(self.map.d2t[d])
        if t < 0 and self.map.draft.pieces[d]:
            t = self.map.target.byte_id.get(self.map.draft.pieces[d][0], -1)
        return [t] if 0 <= t < self.target_size else []

    def _retokenize(self, draft_ids: list[int]) -> tuple[list[int], list[int]]:
        """Greedy: the proposal's text re-tokenized by the target. Returns the target ids and,
        for each prefix of them, how many draft ids it covers. Stops at a draft control
        token with no counterpart, and before a character the draft has not finished."""
        out, used, run = [], [0], []
        for n, d in enumerate(draft_ids):
            if d not in self.map.draft.control:
                run.append(d)
                continue
            self._flush(run, n, out, used, final=False)
            run = []
            t = self.map.control_d2t.get(d)
            if t is None or t >= self.target_size:
                return _capped(out, used, len(draft_ids))
            out.append(t)
            used.append(n + 1)
        self._flush(run, len(draft_ids), out, used, final=True)
        return _capped(out, used, len(draft_ids))

    def _flush(self, run: list[int], end: int, out: list, used: list, final: bool) -> None:
        """Append the target ids for the text of draft ids `run` (which end at `end`)."""
        if not run:
            return
        pieces, ends, pos = self.map.draft.pieces, [], 0
        for d in run:
            pos += len(pieces[d])
            ends.append(pos)
        start, pos = end - len(run), 0
        for t, size in self._target_ids(b"".join(pieces[d] for d in run), final):
            pos += size
            out.append(t)
            used.append(start + bisect_left(ends, pos + 1))  # the draft ids that spell it

    def _target_ids(self, data: bytes, final: bool) -> list[tuple[int, int]]:
        """(target id, byte length) for bytes, stray bytes as byte-fallback ids; the start
        of a character at the very end is left out (the next draft token may finish it)."""
        parts = _ESCAPED.split(data.decode("utf-8", "surrogateescape"))
        if final and len(parts) > 1 and not parts[-1]:
            parts[-2] = _drop_unfinished(parts[-2])
        out, target = [], self.map.target
        for k, part in enumerate(parts):
            if not part:
                continue
            if k % 2 == 0:
                for t in self.target_tok(part):
                    if t >= self.target_size or not target.text_id(t):  # <unk>, special: stop
                        return out
                    out.append((t, len(target.pieces[t])))
                continue
            for b in _unescape(part):
                if target.byte_id.get(b, self.target_size) >= self.target_size:
                    return out
                out.append((target.byte_id[b], 1))
        return out


@dataclass
class _Counts:
    proposals: int = 0
    draft_in: int = 0  # draft tokens handed over for translation
    draft_used: int = 0  # of those, covered by the target tokens returned
    target_out: int = 0  # target tokens returned
    settled_draft: int = 0  # draft tokens of proposals that the next context kept
    settled_target: int = 0  # ... and the target tokens they became
    extra_translations: int = 0  # other to_target calls (branches, first-token ranks)
    ctx_calls: int = 0
    ctx_draft_kept: int = 0  # draft context ids equal to the previous call's (KV reused)
    ctx_draft_new: int = 0  # draft context ids after those (to evaluate)
    ctx_draft_redone: int = 0  # of the previous call's draft ids, those that changed
    ctx_chunks_translated: int = 0  # chunk translations not found in the cache
    ctx_target_translated: int = 0

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["target_per_draft"] = _ratio(self.target_out, self.draft_used)
        d["target_per_accepted_draft"] = _ratio(self.settled_target, self.settled_draft)
        return d


def _injective(d2t: np.ndarray) -> np.ndarray:
    """Draft ids with a twin, one per target id (two draft EOS ids map to one target EOS):
    then each q row moves to the target's columns without two draft ids sharing one."""
    mask = d2t >= 0
    _, first = np.unique(d2t, return_index=True)
    keep = np.zeros_like(mask)
    keep[first] = True
    return mask & keep


def _ratio(a: int, b: int) -> float:
    return round(a / b, 3) if b else 0.0


# -- bytes and characters: where the draft's pre-tokenizer cuts, unfinished UTF-8 ------------
def _cut_before(prev: bytes, cur: bytes) -> bool:
    """A chunk may start at `cur` where byte-level BPE pre-tokenizers split too: a word
    (' x' after a non-space), a change between letters, digits and punctuation (not after
    an apostrophe: "'s" is one piece), and each character of a script written without
    spaces (CJK). Never next to other whitespace ('\n\nThe' is cut '\n', '\nThe')."""
    if not prev or not cur:
        return True
    if cur[0] == 0x20 and len(cur) > 1 and cur[1] not in WS and prev[-1] not in WS:
        return True
    a, b = _char_class(prev, -1), _char_class(cur, 0)
    if a is None or b is None or "S" in (a, b) or prev[-1] == 0x27:
        return False
    return a != b or a == "W"


@lru_cache(maxsize=1 << 16)
def _char_class(piece: bytes, where: int) -> str | None:
    """Class of the first (0) or last (-1) character: S space, L letter, W letter of a
    script without spaces, N digit, P anything else; None when it is not whole."""
    text = piece.decode("utf-8", "replace")
    ch = text[where]
    if ch == "\ufffd" and "\ufffd".encode() not in piece:
        return None
    if ch.isspace():
        return "S"
    cat = unicodedata.category(ch)
    if cat[0] == "L":
        return "W" if unicodedata.east_asian_width(ch) in "WF" else "L"
    return "N" if cat[0] == "N" else "P"


def _unescape(part: str) -> bytes:
    return bytes(ord(c) - 0xDC00 for c in part)


def _drop_unfinished(part: str) -> str:
    """Stray bytes at the very end: drop the start of a UTF-8 character that is not
    complete yet, keep the rest (continuation bytes finish a character the context began)."""
    raw = _unescape(part)
    for back in range(1, min(4, len(raw)) + 1):
        lead = raw[-back]
        need = 2 if lead >> 5 == 0b110 else 3 if lead >> 4 == 0b1110 else \
            4 if lead >> 3 == 0b11110 else 0
        if need:
            if back < need:
                raw = raw[:-back]
            break
        if lead >> 6 != 0b10:
            break
    return "".join(chr(0xDC00 + b) for b in raw)


def _capped(out: list[int], used: list[int], n: int) -> tuple[list[int], list[int]]:
    """No more target tokens than draft tokens: the engine sized the room in tokens."""
    return out[:n], used[:n + 1]


def common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two id lists."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
