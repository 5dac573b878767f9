"""The numpy references the device code is tested against (models/target/sampling.py mirrors
them) and the fakes score with: a forward's rows adjusted, reduced to what the verifier reads,
and their logprobs."""
from __future__ import annotations

import numpy as np

from core.backends import SampleCheck, Scores
from core.constraints import Adjustments, apply_row
from core.logprobs import Logprobs, draft_of
from core.sampling import SamplingConfig, logits_to_probs


def apply_rows(logits: np.ndarray, adjust: Adjustments | None) -> np.ndarray:
    """Every row of a forward's logits after its adjustment."""
    x = np.asarray(logits, dtype=np.float32)
    if adjust is None or not adjust.changes_logits:
        return x
    return np.stack([apply_row(r, a) for r, a in zip(x, adjust.rows)])


def reference_scores(logits: np.ndarray, sampling: SamplingConfig,
                     check: SampleCheck | None = None, adjust: Adjustments | None = None,
                     tokens: list[int] = ()) -> Scores:
    """The reduction of a forward's rows: the rows adjusted first; logprobs (when asked) of
    the raw rows, `tokens` being what the score() call appended."""
    rows = apply_rows(logits, adjust)
    if sampling.greedy:
        scores = Scores(choice=rows.argmax(axis=-1).tolist())
    else:
        p_target = logits_to_probs(rows, sampling)
        if check.coupled:
            scores = Scores(choice=[check.noise.draw(p, check.base + i)
                                    for i, p in enumerate(p_target)])
        else:
            scores = sampled_scores(p_target, check)
    if adjust is not None and adjust.logprobs is not None:
        own = scores.choice if scores.choice is not None else scores.recovered + [scores.bonus]
        scores.logprobs = reference_logprobs(logits, draft_of(tokens, len(rows)), own,
                                             adjust.logprobs)
    return scores


def sampled_scores(p_target: np.ndarray, check: SampleCheck) -> Scores:
    """What a target hands the sampled verifier: p_target of each draft token, the draw from
    each draft position's residual, and the bonus draw from the last row, by `check.noise`."""
    g = len(check.draft)
    p_draft = [float(p_target[i, t]) for i, t in enumerate(check.draft)]
    recovered = [check.noise.draw(residual(p_target[i], check.q_draft[i]), check.base + i)
                 for i in range(g)]
    bonus = check.noise.draw(p_target[g], check.base + g)
    return Scores(p_draft=p_draft, recovered=recovered, bonus=bonus)


def residual(p: np.ndarray, q) -> np.ndarray:
    """norm(max(0, p - q)) up to its scale (a draw does not need the sum); p itself when
    p == q up to rounding (any draw from p is right). `q` may be a token id: a lookup's
    one-hot row (QRows), whose residual is p without that token."""
    if isinstance(q, (int, np.integer)):
        r = p.astype(np.float64)
        r[int(q)] = 0.0
    else:
        r = np.maximum(p.astype(np.float64) - q, 0.0)
    return r if r.sum() > 0 else p.astype(np.float64)


def reference_logprobs(logits: np.ndarray, draft: list[int], own: list[int],
                       k: int) -> Logprobs:
    """The raw rows' logprobs of the draft tokens, the target's own picks and the top k."""
    x = np.asarray(logits, dtype=np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    lsm = x - np.log(np.exp(x).sum(axis=-1, keepdims=True))
    top_ids = np.argsort(-lsm, axis=-1, kind="stable")[:, :k]
    return Logprobs(draft=[float(lsm[i, t]) for i, t in enumerate(draft)],
                    own=[float(lsm[i, t]) for i, t in enumerate(own)],
                    top_ids=top_ids.tolist(),
                    top=np.take_along_axis(lsm, top_ids, axis=-1).tolist())
