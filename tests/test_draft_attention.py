"""The draft's attention kernel (models/draft/attention.py): `auto` keeps the one that decoded
faster, the plain kernel is really another kernel that drafts as flash attention does, its
prompt prefill moves from the Q8_0 copy, and the output stays the target's (greedy, against
the oracle)."""
from __future__ import annotations

import numpy as np
import pytest

from models.draft import attention
from models.draft.attention import pick_attention, time_attention
from models.draft.format import q8_copy
from models.draft.llama import LlamaDrafter
from models.draft.prefill import CopyPrefill
from models.pairs.catalog import draft_path, get_pair
from tests.test_draft_prefill import LONG, greedy, greedy_long


@pytest.fixture(scope="module")
def q4_path():
    return draft_path(get_pair("smol-self"))


def test_auto_keeps_the_kernel_that_decoded_faster():
    plain = pick_attention("auto", lambda: {"flash": 0.030, "plain": 0.020})
    assert plain.kind == "plain" and "1.50x" in plain.reason
    alike = pick_attention("auto", lambda: {"flash": 0.0204, "plain": 0.020})
    assert alike.kind == "flash"  # within FASTER: llama.cpp's default stays
    assert pick_attention("flash", None).kind == "flash"  # asked: nothing timed
    assert pick_attention("plain", None).kind == "plain"
    with pytest.raises(ValueError, match="draft attention 'fast'"):
        pick_attention("fast", None)


def test_plain_attention_is_another_kernel_that_drafts_alike(q4_path):
    flash = LlamaDrafter(q4_path, n_threads=1, n_ctx=1024)
    plain = LlamaDrafter(q4_path, n_threads=1, n_ctx=1024, attention="plain")
    try:
        assert plain.name != flash.name  # its timings are kept apart
        ids = flash.tokenize(LONG)
        a, b = flash._sync(ids), plain._sync(ids)
        assert not np.array_equal(a, b)  # another summation order: llama.cpp took the setting
        assert np.allclose(a, b, atol=0.05 * np.abs(a).max())
        assert sum(x == y for x, y in zip(greedy(flash, ids, 16), greedy(plain, ids, 16))) >= 14
    finally:
        flash.close()
        plain.close()


def test_timing_gives_both_kernels_a_decode_time(q4_path, monkeypatch):
    monkeypatch.setattr(attention, "PROBE_CONTEXT", 48)
    monkeypatch.setattr(attention, "PROBE_STEPS", 2)
    times = time_attention(q4_path, cores=2)
    assert set(times) == {"flash", "plain"} and all(t > 0 for t in times.values())


@pytest.fixture
def plain_draft(smol_pair, q4_path):
    """smol_pair drafting with the plain kernel, its prompt prefill on a plain Q8_0 copy."""
    own = smol_pair.drafter
    plain = LlamaDrafter(q4_path, n_threads=1, n_ctx=own.n_ctx, attention="plain")
    plain.vocab = own.vocab
    plain.prefill = CopyPrefill(q8_copy(q4_path), own.n_ctx, attention="plain")
    smol_pair.drafter = plain
    yield plain
    smol_pair.drafter = own
    plain.close()


def test_greedy_with_plain_attention_is_the_oracles(smol_pair, plain_draft):
    """duo (the kernel drafts beside the verify; sps runs the same drafter in turn)."""
    ids, events = greedy_long(smol_pair, "duo")
    assert plain_draft.prefill.copy.tokens[:len(ids) - 1] == ids[:-1]  # moved from the copy
    assert events[-1].stats["accepted"] > 0  # the moved cache drafts: tokens passed
