"""The verifier: draft tokens (+ q_draft) and target probabilities in, accepted tokens out.

Glossary (as in vLLM): *accepted* draft tokens pass the test; on a rejection the target's
*recovered* token replaces the first rejected one; when every draft token passes, the target
adds a *bonus* token from its last row. Either way a round ends with exactly one token that
comes from the target itself.

Two samplers. `coupled` (drafter-invariant; Daliri, Musco and Suresh 2024): the target draws
each position's token by Gumbel-max with noise fixed by (seed, position, token), the draft
proposes with the same noise, and a draft token passes when it equals the target's draw; the
text is then the target-only decoder's, token for token, whatever was drafted. `rejection`
(Leviathan et al.; Chen et al.): accept with min(1, p/q), else draw from the residual; the
same distribution, a slightly higher acceptance, but the text depends on the drafts.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.backends import QRows, SampleCheck, Scores
from core.constraints import Adjustments, apply_rows
from core.logprobs import draft_of, reference_logprobs
from core.sampling import Noise, SamplingConfig, logits_to_probs


@dataclass(frozen=True)
class Verdict:
    accepted: int  # how many draft tokens passed
    token: int  # recovered token (on rejection) or bonus token (all passed)

    def bonus(self, n_draft: int) -> bool:
        return self.accepted == n_draft


def verify_greedy(draft: list[int], target_choice: list[int]) -> Verdict:
    """target_choice[i] is the target's own token at draft position i (len(draft) + 1
    entries): its argmax (greedy) or its draw (coupled sampling)."""
    n = 0
    while n < len(draft) and draft[n] == target_choice[n]:
        n += 1
    return Verdict(n, int(target_choice[n]))


def verify_sampled(draft: list[int], q_draft: np.ndarray | QRows, scores: Scores, noise: Noise,
                   base: int = 0) -> Verdict:
    """Speculative sampling (Leviathan et al.; Chen et al.): accept draft token i with
    min(1, p/q), by the acceptance uniform of its position base + i; on a rejection the
    target's recovered token (its draw from norm(max(0, p - q))), else its bonus draw. A
    lookup token's q is one-hot (QRows): it passes with probability p."""
    for i, tok in enumerate(draft):
        p, q = scores.p_draft[i], float(q_draft[i, tok])
        if q > 0 and noise.accept_u(base + i) * q < p:
            continue
        return Verdict(i, scores.recovered[i])
    return Verdict(len(draft), scores.bonus)


def reference_scores(logits: np.ndarray, sampling: SamplingConfig,
                     check: SampleCheck | None = None, adjust: Adjustments | None = None,
                     tokens: list[int] = ()) -> Scores:
    """The reference reduction of a forward's rows (fakes use it; device targets mirror it):
    the rows adjusted first; logprobs (when asked) of the raw rows, `tokens` being what the
    score() call appended."""
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
    """The reference of what a target hands the sampled verifier (models/target/sampling.py
    computes the same on the device): p_target of each draft token, the draw from each draft
    position's residual, and the bonus draw from the last row, by `check.noise`."""
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
