"""The two seams between the algorithm and the models: who proposes (`Drafter` -> `Proposal`)
and who verifies (`Target` -> `Scores`), and the `Draft` the verifier reads."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from core.constraints import Adjuster, Adjustments
from core.logprobs import Logprobs
from core.sampling import Noise, SamplingConfig


class QRows:
    """q_draft rows of a draft that holds lookup tokens: a lookup token's row is one-hot on it
    (stored as the token id: no vocabulary-wide row is made), a model token's row is dense. Indexed
    like the dense array: q[i, tok], q[i] (a row: an array, or the one-hot token), q[a:b]."""

    def __init__(self, rows: list):
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, key):
        if isinstance(key, slice):
            return QRows(self.rows[key])
        if isinstance(key, tuple):
            row, tok = self.rows[key[0]], int(key[1])
            return float(row == tok) if _one_hot(row) else float(row[tok])
        return self.rows[key]

    def parts(self) -> tuple[list[int], np.ndarray | None, list[int], list[int]]:
        """(positions of dense rows, those rows stacked, positions of one-hot rows, their
        tokens): what a device needs to build the rows itself."""
        dense = [i for i, r in enumerate(self.rows) if not _one_hot(r)]
        hot = [i for i, r in enumerate(self.rows) if _one_hot(r)]
        stacked = np.stack([self.rows[i] for i in dense]) if dense else None
        return dense, stacked, hot, [int(self.rows[i]) for i in hot]


def _one_hot(row) -> bool:
    return isinstance(row, (int, np.integer))


@dataclass
class Draft:
    """Draft tokens (target ids) proposed after some context, with their q_draft rows: what the
    verifier reads."""
    tokens: list[int] = field(default_factory=list)
    # (len(tokens), target vocab), or QRows when lookup tokens are in it; None when greedy
    q_draft: np.ndarray | QRows | None = None
    # per token, the draft's top candidates there (target ids, probabilities, best first):
    # where the draft was unsure, for pre-drafting (filled when a drafter is asked to)
    ranked: list[tuple[list[int], list[float]]] | None = None
    # per token, who proposed it: "draft" (the model) or "lookup"; None: all the model's
    origins: list[str] | None = None
    conf: list[float] | None = None  # per token, the lookup's confidence (model's: 0.0)
    lookup_source: str = "context"  # the lookup tokens' Lookup.source (context or memory)

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, part: slice) -> "Draft":
        """The tokens of slice `part`, with their q rows, ranks, origins and confidences."""
        q, ranked, origins, conf = (None if x is None else x[part] for x in
                                    (self.q_draft, self.ranked, self.origins, self.conf))
        return Draft(self.tokens[part], q, ranked, origins, conf, self.lookup_source)

    def sources(self) -> list[str]:
        return self.origins if self.origins is not None else ["draft"] * len(self.tokens)

    def n_model(self) -> int:
        """The model's tokens before the first lookup token (a fused draft's model part)."""
        src = self.sources()
        return src.index("lookup") if "lookup" in src else len(src)

    def n_lookup(self) -> int:
        return self.sources().count("lookup")

    def plus(self, found, sampled: bool) -> "Draft":
        """This draft followed by a `Lookup`'s tokens (one-hot q rows when sampling)."""
        rows = self.q_draft.rows if isinstance(self.q_draft, QRows) else self.q_draft
        q = QRows([*(() if rows is None else rows), *map(int, found.tokens)]) if sampled else None
        return Draft(self.tokens + list(found.tokens), q, self.ranked,
                     self.sources() + ["lookup"] * len(found),
                     (self.conf or [0.0] * len(self)) + list(found.conf), found.source)


@dataclass
class Plan:
    """Rejection outcomes to pre-draft while the target verifies the last `pending` tokens of
    the context: (j, a) means draft tokens 0..j-1 pass and the target puts `a` in place of
    token j; each gets `depth` draft tokens after `a`. Empty: drafting as before."""
    outcomes: list[tuple[int, int]] = field(default_factory=list)
    depth: int = 0
    pending: int = 0

    def __len__(self) -> int:
        return len(self.outcomes) if self.depth else 0

    def covers(self, accepted: int, token: int) -> bool:
        return bool(self) and (accepted, token) in self.outcomes


@dataclass
class Proposal:
    """A drafter's answer for one context: its own draft, the drafts that start with other
    likely first tokens (when the branch policy asked for them), what it saw at the first
    position, and how long it took to catch up with the context."""
    main: Draft = field(default_factory=Draft)
    alternatives: list[Draft] = field(default_factory=list)  # other first tokens
    first_ranking: list[int] = field(default_factory=list)  # draft's top first tokens
    first_top_p: float = 0.0  # the draft's probability of its top first token
    sync_s: float = 0.0  # time catching up with the context (prefill, rollback)
    predrafts: dict[tuple[int, int], Draft] = field(default_factory=dict)  # Plan's outcomes

    @property
    def n_seqs(self) -> int:
        return 1 + len(self.alternatives)

    def branch_for(self, first: int) -> Draft | None:
        """The sequence that starts with `first` (the target's own token), if any."""
        for d in [self.main] + self.alternatives:
            if d.tokens[:1] == [first]:
                return d
        return None

    def follow(self, committed: list[int]) -> Draft | None:
        """The rest of the sequence that starts with `committed` (the tokens the target added
        after this proposal's context), if one does; `[token]` alone is `branch_for`."""
        branch = self.branch_for(committed[0]) if committed else None
        if branch is None or branch.tokens[:len(committed)] != list(committed):
            return None
        return branch[len(committed):]

    def predraft_for(self, accepted: int, token: int) -> Draft | None:
        """The draft to verify next when `accepted` tokens passed and the target put `token`
        in place of the next one (pre-drafted from there), if any."""
        return self.predrafts.get((accepted, token)) or None

    def rank_of(self, token: int) -> int:
        """1-based rank of `token` among the draft's first-position candidates; 0 if absent."""
        return self.first_ranking.index(token) + 1 if token in self.first_ranking else 0


@dataclass
class SampleCheck:
    """What a sampled verify tests, handed to the target so it can reduce its rows on the
    device: the draft tokens, their q_draft rows, the noise, and the first draft position.
    `coupled`: the target only draws each row with the noise (q_draft is not needed)."""
    draft: list[int]
    q_draft: np.ndarray | QRows | None  # (len(draft), target vocab)
    noise: Noise
    base: int
    coupled: bool = False


@dataclass
class Scores:
    """What the verifier needs from one target forward, and no more: greedy, the argmax of
    each row; coupled sampling, the target's draw of each row; rejection sampling, p_target
    of each draft token, the residual draw at each draft position (the recovered token if it
    is rejected) and the bonus draw from the last row."""
    choice: list[int] | None = None  # greedy and coupled
    p_draft: list[float] | None = None  # sampling
    recovered: list[int] | None = None
    bonus: int | None = None
    logprobs: Logprobs | None = None  # only when the Adjustments asked for them


def check_chunk(tokens: list[int], n_rows: int, n_cached: int, n_ctx: int) -> None:
    """What Target.score takes: 1..len(tokens) rows of a chunk that fits the window."""
    if not tokens or not 1 <= n_rows <= len(tokens):
        raise ValueError(f"score() needs 1..{len(tokens)} rows of at least one token")
    if n_cached + len(tokens) > n_ctx:
        raise ValueError(f"the context window is full: {n_cached} + {len(tokens)} tokens "
                         f"> {n_ctx}")


class TargetOutOfMemory(RuntimeError):
    """The target's device ran out of memory during a generation (torch's OutOfMemoryError,
    recognised by name: core imports no torch); its cache is rolled back, the pair usable."""

    @staticmethod
    def caused(e: BaseException) -> bool:
        return any(t.__name__ == "OutOfMemoryError" for t in type(e).__mro__)


class Draws(Protocol):
    """How a drafter draws a token from its probability row at a target position
    (core/sampling: `Noise` for the coupled sampler, `PositionRng` for rejection)."""

    def draw(self, probs: np.ndarray, pos: int) -> int: ...


class Branching(Protocol):
    """The multi-sequence policy a drafter consults mid-draft (core/branching.BranchPolicy)."""

    def extra_firsts(self, p_first: np.ndarray, p_second_top: float, chosen: int,
                     n: int = 8, ranked: list[int] | None = None) -> list[int]:
        """First tokens of the extra sequences, given the draft's first-position probabilities."""

    def steps(self, n: int, k: int) -> int:
        """Tokens per sequence when k sequences share the time of n single steps."""


class Drafter(Protocol):
    """Owns its KV cache; contexts and proposals are in target token ids."""
    name: str

    def propose(self, context: list[int], n: int, sampling: SamplingConfig, draws: Draws,
                stop: threading.Event | None = None,
                branching: Branching | None = None, adjust: Adjuster | None = None,
                predraft: Plan | None = None, guess: list[int] = ()) -> Proposal:
        """Roll back to the longest common prefix with `context`, then draft up to n tokens;
        draws.draw(q, len(context) + i) picks draft token i when sampling. With `branching`,
        extra sequences may start from other first tokens (Proposal.alternatives). `adjust`
        (this thread's own): each step's logits adjusted for its prefix, before the sampling
        transform (drafters in target ids; a translating vocabulary may ignore it). With
        `predraft` (even empty), drafts carry `ranked`; its outcomes are drafted in the same
        batch (Proposal.predrafts), and are finished even when `stop` cuts the main chunk.
        `guess` (the lookup's continuation of `context`, target ids) may be evaluated in one
        batch to spare decodes; the proposal must be the same as without it."""

    def rollback(self, n_keep: int) -> None: ...

    def set_threads(self, n: int) -> int:
        """Use n threads from now on; returns the previous count."""


class Target(Protocol):
    """Owns its KV cache: `n_cached` tokens of the context are in it."""
    name: str
    n_ctx: int
    eos_ids: set[int]

    @property
    def n_cached(self) -> int: ...

    @property
    def cached_ids(self) -> list[int]:
        """The n_cached tokens in the cache, in order (a new prompt keeps its common prefix)."""

    def score(self, tokens: list[int], n_rows: int, sampling: SamplingConfig,
              check: SampleCheck | None = None, adjust: Adjustments | None = None) -> Scores:
        """Append `tokens` to the cache; the verifier's Scores of the last n_rows positions
        (sampling: `check` says which draft they test; n_rows == len(check.draft) + 1).
        `adjust`: one RowAdjust per row, applied to the logits before the sampling transform;
        its `logprobs` asks for Scores.logprobs of the raw logits."""

    def rollback(self, n_keep: int) -> None: ...

    def set_threads(self, n: int) -> int:
        """CPU threads for the forwards; returns the previous count."""
