"""Logprobs a response reports: the target's raw distribution (its logits before the grammar,
biases, penalties and the sampling transform, as OpenAI and vLLM report them), reduced per
verify row on the device, then picked for the tokens a round emits."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Logprobs:
    """Per verify row: the logprob of the draft token it tests (rows 0..g-1), of the target's
    own pick there (the token the row emits if the verify reaches it), and the top-k."""
    draft: list[float]
    own: list[float]
    top_ids: list[list[int]]
    top: list[list[float]]


@dataclass
class TokenLogprob:
    """One emitted token's logprob and its alternatives (most likely first)."""
    token: int
    logprob: float
    top: list[tuple[int, float]]


def draft_of(tokens: list[int], n_rows: int) -> list[int]:
    """The draft tokens a score() call tests: the last n_rows - 1 of its tokens."""
    return list(tokens[len(tokens) - n_rows + 1:]) if n_rows > 1 else []


def emitted(lp: Logprobs, draft: list[int], accepted: int, token: int) -> list[TokenLogprob]:
    """The round's tokens: the accepted draft tokens, then the target's own at row `accepted`."""
    tokens = list(draft[:accepted]) + [token]
    values = lp.draft[:accepted] + [lp.own[accepted]]
    return [TokenLogprob(t, v, list(zip(lp.top_ids[i], lp.top[i])))
            for i, (t, v) in enumerate(zip(tokens, values))]
