"""The per-row logits adjustment of a generation: a grammar's allowed tokens (a packed mask), a
sparse additive bias (logit_bias, presence and frequency penalties) and whether logprobs are
wanted. Built for each row from that row's generated prefix; targets apply it on their device,
drafters through `apply_row`, always before the sampling transform."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from core.align import common_prefix
from core.sampling import check_finite


class Grammar(Protocol):
    """A stateful token matcher (models/grammar.py wraps the engine)."""

    def advance(self, tokens: list[int]) -> int:
        """Consume the tokens it accepts, in order, stopping at the first it refuses; how many."""

    def rollback(self, n: int) -> None:
        """Undo the last n consumed tokens."""

    def mask(self) -> np.ndarray:
        """The tokens allowed next, packed: bit t % 32 of uint32 word t // 32 is token t."""

    def fork(self) -> "Grammar":
        """An independent copy in the same state (for another thread)."""

    # Optional: `free` (a bool property), True once every token, EOS included, is allowed from
    # here to the end whatever follows (a tool answer committed to plain text). The Adjuster
    # then stops asking for masks after that prefix (Adjuster._now_free).


@dataclass
class RowAdjust:
    """One row's adjustment: `allowed` packed (None: every token), then `bias_values` added at
    `bias_ids`."""
    allowed: np.ndarray | None = None
    bias_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    bias_values: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))

    @property
    def empty(self) -> bool:
        return self.allowed is None and not len(self.bias_ids)


@dataclass
class Adjustments:
    """What a target applies to one verify: a RowAdjust per row (row i follows draft[:i]), and
    `logprobs`: None, or how many alternatives to report per row (0: only the chosen token)."""
    rows: list[RowAdjust]
    logprobs: int | None = None

    @property
    def changes_logits(self) -> bool:
        return any(not r.empty for r in self.rows)


@dataclass
class Penalties:
    """OpenAI's logit_bias, presence and frequency penalties (counts of generated tokens)."""
    logit_bias: dict[int, float] = field(default_factory=dict)
    presence: float = 0.0
    frequency: float = 0.0

    @property
    def active(self) -> bool:
        return bool(self.logit_bias or self.presence or self.frequency)

    @property
    def counted(self) -> bool:
        return bool(self.presence or self.frequency)

    def bias(self, counts: Counter) -> tuple[np.ndarray, np.ndarray]:
        values: dict[int, float] = dict(self.logit_bias)
        if self.counted:
            for tok, n in counts.items():
                values[tok] = values.get(tok, 0.0) - self.presence - self.frequency * n
        ids = np.fromiter(values.keys(), np.int64, len(values))
        return ids, np.fromiter(values.values(), np.float32, len(values))


class Adjuster:
    """Builds a generation's Adjustments. Its grammar tracks the generated tokens it was last
    asked about (like a KV cache: keeps the common prefix, rolls back, advances), so any
    context may be asked for; `fork()` gives the draft thread its own."""

    def __init__(self, n_prompt: int, grammar: Grammar | None = None,
                 penalties: Penalties | None = None, logprobs: int | None = None):
        self.n_prompt, self.grammar, self.logprobs = n_prompt, grammar, logprobs
        self.penalties = penalties if penalties is not None else Penalties()
        self.seen: list[int] = []  # generated tokens the grammar has consumed
        self.free_after: list[int] | None = None  # a generated prefix the grammar is free after

    @property
    def changes_logits(self) -> bool:
        return self.grammar is not None or self.penalties.active

    def for_draft(self) -> "Adjuster | None":
        """The draft thread's own copy (logprobs are the target's alone); None when it would
        change nothing."""
        return self.fork() if self.changes_logits else None

    def fork(self, logprobs: int | None = None) -> "Adjuster":
        grammar = self.grammar.fork() if self.grammar is not None else None
        twin = Adjuster(self.n_prompt, grammar, self.penalties, logprobs)
        twin.seen, twin.free_after = list(self.seen), self.free_after
        return twin

    def rows(self, context: list[int], draft: list[int] = ()) -> Adjustments:
        """Row i adjusts the logits after context + draft[:i] (len(draft) + 1 rows); rows past a
        token the grammar refuses, or past its end, are unconstrained (never emitted), and so
        are rows after a prefix the grammar is free after (no mask is computed there)."""
        generated, draft = list(context[self.n_prompt:]), list(draft)
        counts = Counter(generated) if self.penalties.counted else Counter()
        free = self._free(generated)
        if not free:
            self._sync(generated)
            free = self._now_free(generated)
        out, reachable = [], True
        for i in range(len(draft) + 1):
            if i:
                counts[draft[i - 1]] += 1
                if reachable and not free:
                    reachable = self._step(draft[i - 1])
                    free = reachable and self._now_free(generated + draft[:i])
            ids, values = self.penalties.bias(counts)
            mask = self._mask() if reachable and not free else None
            out.append(RowAdjust(mask, ids, values))
        return Adjustments(out, self.logprobs)

    def for_verify(self, context: list[int], draft: list[int] = ()) -> Adjustments | None:
        """rows(), or None when they change nothing and no logprobs are asked (the target
        then takes its plain path, as without an Adjuster)."""
        adjust = self.rows(context, draft)
        return adjust if adjust.changes_logits or adjust.logprobs is not None else None

    def row(self, context: list[int]) -> RowAdjust | None:
        """The adjustment after `context` alone (a drafter's next step); None when the grammar
        refuses that context (a draft gone astray: draft no further)."""
        try:
            return self.rows(context).rows[0]
        except ValueError:
            return None

    def _sync(self, generated: list[int]) -> None:
        """Move the grammar to the state after `generated` (keep the common prefix)."""
        if self.grammar is None:
            return
        keep = common_prefix(self.seen, generated)
        if keep < len(self.seen):
            self.grammar.rollback(len(self.seen) - keep)
            del self.seen[keep:]
        rest = generated[keep:]
        taken = self.grammar.advance(rest) if rest else 0
        self.seen += rest[:taken]
        if taken < len(rest):
            raise ValueError(f"the grammar refuses generated token {rest[taken]}")

    def _free(self, generated: list[int]) -> bool:
        """Whether `generated` extends the prefix the grammar was found free after."""
        after = self.free_after
        return after is not None and generated[:len(after)] == after

    def _now_free(self, generated: list[int]) -> bool:
        """Whether the grammar, just advanced to `generated`, is free from here on (it is
        then asked nothing more for contexts that extend `generated`)."""
        if getattr(self.grammar, "free", False):  # None, or a grammar without `free`: False
            self.free_after = list(generated)
            return True
        return False

    def _mask(self) -> np.ndarray | None:
        """The grammar's mask here; None (every token) when it allows none: past its end
        (after EOS), where nothing is emitted."""
        if self.grammar is None:
            return None
        allowed = self.grammar.mask()
        return allowed if allowed.any() else None

    def _step(self, token: int) -> bool:
        if self.grammar is None:
            return True
        if self.grammar.advance([token]) != 1:
            return False
        self.seen.append(token)
        return True


def adjuster(n_prompt: int, grammar: Grammar | None, penalties: Penalties,
             logprobs: int | None) -> Adjuster | None:
    """A generation's Adjuster; None when nothing changes the logits or is reported (the
    rounds then run as before)."""
    if grammar is None and not penalties.active and logprobs is None:
        return None
    return Adjuster(n_prompt, grammar, penalties, logprobs)


def check_adjustments(logit_bias: dict[int, float], presence: float, frequency: float,
                      logprobs: int | None) -> None:
    """OpenAI's ranges: penalties in [-2, 2], biases in [-100, 100], 0..20 alternatives."""
    for name, value in (("presence_penalty", presence), ("frequency_penalty", frequency)):
        check_finite(name, value)
        if not -2.0 <= value <= 2.0:
            raise ValueError(f"{name} must be in [-2, 2], got {value}")
    for tok, value in logit_bias.items():
        check_finite(f"logit_bias[{tok}]", value)
        if tok < 0 or not -100.0 <= value <= 100.0:
            raise ValueError(f"logit_bias: token {tok}: ids are >= 0, values in [-100, 100]")
    if logprobs is not None and not 0 <= logprobs <= 20:
        raise ValueError(f"logprobs must be 0..20 alternatives, got {logprobs}")


def unpack(allowed: np.ndarray, vocab: int) -> np.ndarray:
    """Packed uint32 words -> a bool row of `vocab` entries (tokens past the words: refused)."""
    bits = np.unpackbits(np.ascontiguousarray(allowed).view(np.uint8), bitorder="little")
    out = np.zeros(vocab, dtype=bool)
    n = min(vocab, len(bits))
    out[:n] = bits[:n].astype(bool)
    return out


def apply_row(logits: np.ndarray, row: RowAdjust | None) -> np.ndarray:
    """One row of logits after its adjustment (a new array; float32)."""
    x = np.array(logits, dtype=np.float32)
    if row is None or row.empty:
        return x
    if len(row.bias_ids):
        np.add.at(x, row.bias_ids, row.bias_values)
    if row.allowed is not None:
        x[~unpack(row.allowed, len(x))] = -np.inf
    return x
