"""KV rollback of both real backends: after a rollback, scores equal those of a fresh run."""
from __future__ import annotations

import numpy as np

from core.sampling import PositionRng, SamplingConfig

GREEDY = SamplingConfig()


def test_target_rollback_matches_fresh(smol_pair):
    t = smol_pair.target
    ids = smol_pair.prompt_ids("Name three colours.")
    t.rollback(0)
    t.logits(ids, 1)
    t.logits([100, 200, 300, 400], 4)  # tokens that will be rolled back
    t.rollback(len(ids))
    after = t.logits([11, 12, 13], 3)
    t.rollback(0)
    fresh = t.logits(ids + [11, 12, 13], 3)
    np.testing.assert_allclose(after.cpu().numpy(), fresh.cpu().numpy(), atol=1e-3, rtol=1e-3)
    assert t.n_cached == len(ids) + 3
    t.rollback(0)


def test_drafter_rollback_matches_fresh(smol_pair):
    d = smol_pair.drafter
    rng = PositionRng(0, 1)
    ids = smol_pair.prompt_ids("Write a sentence about rivers.")
    first = d.propose(ids, 12, GREEDY, rng).main
    d.propose(ids + [500, 600, 700], 5, GREEDY, rng)  # a wrong branch, then back
    again = d.propose(ids, 12, GREEDY, rng).main
    assert again.tokens == first.tokens
    d.rollback(0)
    fresh = d.propose(ids, 12, GREEDY, rng).main
    assert fresh.tokens == first.tokens


def test_drafter_returns_draft_probabilities(smol_pair):
    d = smol_pair.drafter
    rng = PositionRng(0, 1)
    ids = smol_pair.prompt_ids("Hello")
    dr = d.propose(ids, 4, SamplingConfig(0.8, top_k=20), rng).main
    assert dr.q_draft.shape == (4, smol_pair.target.vocab_size)
    np.testing.assert_allclose(dr.q_draft.sum(axis=1), 1.0, atol=1e-4)
    assert all(dr.q_draft[i, t] > 0 for i, t in enumerate(dr.tokens))
    assert all((row > 0).sum() <= 20 for row in dr.q_draft)
