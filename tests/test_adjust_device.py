"""The device-side adjustment and logprobs (models/target/sampling.py) equal core's numpy
references."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from core.constraints import Adjustments, RowAdjust
from core.sampling import SamplingConfig
from models.target.sampling import apply_adjust, device_logprobs, device_scores
from tests.reference import apply_rows, reference_logprobs, reference_scores

VOCAB = 70  # not a multiple of 32: the last word is partly past the vocabulary


def random_rows(rng, n) -> Adjustments:
    rows = []
    for i in range(n):
        allowed = None if i == 1 else rng.integers(0, 2**32, 3, dtype=np.uint64).astype(np.uint32)
        ids = rng.choice(VOCAB, 4, replace=False)
        rows.append(RowAdjust(allowed, ids, rng.normal(size=4).astype(np.float32)))
    return Adjustments(rows, logprobs=3)


def test_apply_adjust_equals_the_reference():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(4, VOCAB)).astype(np.float32)
    adjust = random_rows(rng, 4)
    got = apply_adjust(torch.from_numpy(logits), adjust).numpy()
    np.testing.assert_allclose(got, apply_rows(logits, adjust), rtol=0, atol=1e-6)


def test_masks_and_biases_go_to_the_device_through_the_pinned_upload(monkeypatch):
    """The packed masks, the bias positions and their values: one `upload` each (pinned
    memory on cuda), the same rows as before."""
    import models.target.sampling as sampling

    sent, upload = [], sampling.upload

    def counted(host, device):
        sent.append(host.dtype)
        return upload(host, device)
    monkeypatch.setattr(sampling, "upload", counted)
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(4, VOCAB)).astype(np.float32)
    adjust = random_rows(rng, 4)
    got = apply_adjust(torch.from_numpy(logits), adjust).numpy()
    np.testing.assert_allclose(got, apply_rows(logits, adjust), rtol=0, atol=1e-6)
    assert sorted(map(str, sent)) == ["torch.float32", "torch.int64", "torch.uint8"]


def test_logprobs_equal_the_reference():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(3, VOCAB)).astype(np.float32)
    got = device_logprobs(torch.from_numpy(logits), [5, 9], [1, 2, 3], 4)
    want = reference_logprobs(logits, [5, 9], [1, 2, 3], 4)
    assert got.top_ids == want.top_ids
    for a, b in ((got.draft, want.draft), (got.own, want.own), (got.top, want.top)):
        np.testing.assert_allclose(a, b, atol=1e-5)


@pytest.mark.parametrize("sampling", [SamplingConfig(), SamplingConfig(0.9, top_k=20)])
def test_device_scores_equal_reference_scores(sampling):
    from core.backends import SampleCheck
    from core.sampling import Noise
    rng = np.random.default_rng(2)
    logits = rng.normal(size=(4, VOCAB)).astype(np.float32)
    adjust = random_rows(rng, 4)
    tokens = [7, 3, 4, 5]
    q = rng.dirichlet(np.ones(VOCAB), size=3)
    check = None if sampling.greedy else SampleCheck(tokens[1:], q, Noise(3), 10)
    got = device_scores(torch.from_numpy(logits), sampling, check, adjust, tokens)
    want = reference_scores(logits, sampling, check, adjust, tokens)
    assert (got.choice, got.recovered, got.bonus) == (want.choice, want.recovered, want.bonus)
    assert got.logprobs.top_ids == want.logprobs.top_ids
    np.testing.assert_allclose(got.logprobs.own, want.logprobs.own, atol=1e-5)
