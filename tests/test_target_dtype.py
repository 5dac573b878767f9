"""The target's dtype: float32 on the CPU by default (exact greedy, tested in
test_real_lossless.py); in bfloat16, as on cuda, verifying n tokens at once rounds differently
from n single steps, so greedy output may leave the oracle's, but only at rounding ties."""
from __future__ import annotations

import numpy as np
import pytest

from core.engine import GenConfig
from models.target.eager import pick_dtype
from scripts.benchmark import run_one
from tests.conftest import vanilla_ids

PROMPTS = ["Why is the sky blue?", "What is 17 times 23? Show the steps.",
           "Write a Python function that reverses a linked list.",
           "Explain recursion to a ten-year-old.", "Write a short poem about autumn leaves.",
           "Translate into French: 'Where is the train station?'"]
N = 64
TIE = 0.5  # logits: a few bfloat16 steps at their size (0.125 between 16 and 32)


def test_dtype_defaults_and_errors():
    assert pick_dtype("cpu") == "float32"
    assert pick_dtype("cuda") == pick_dtype("cuda:1") == "bfloat16"
    assert pick_dtype("cpu", "bfloat16") == "bfloat16"
    with pytest.raises(ValueError, match="unknown target dtype 'int3'; known: auto, float32"):
        pick_dtype("cpu", "int3")


@pytest.fixture(scope="module")
def bf16_pair(pair_with):
    return pair_with(dtype="bfloat16")


def tokens(pair, ids, method):
    stats = run_one(pair, ids, GenConfig(method=method, max_new_tokens=N))
    return stats["token_ids"], stats


@pytest.mark.parametrize("method", ["sps", "duo"])
def test_bfloat16_leaves_the_oracle_only_at_rounding_ties(bf16_pair, method):
    for prompt in PROMPTS:
        ids = bf16_pair.prompt_ids(prompt)
        expected = vanilla_ids(bf16_pair, ids, N)  # bfloat16's own oracle, once per prompt
        got, stats = tokens(bf16_pair, ids, method)
        assert stats["target_dtype"] == "bfloat16"
        i = next((i for i, (a, b) in enumerate(zip(expected, got)) if a != b), None)
        if i is None:
            assert got == expected
            continue
        bf16_pair.target.rollback(0)
        logits = bf16_pair.target.logits(ids + expected[:i], 1)[0].cpu().numpy()
        top = float(np.max(logits))
        assert top - logits[expected[i]] <= TIE and top - logits[got[i]] <= TIE, \
            f"{method} left the oracle at token {i} of {prompt!r} without a tie"
