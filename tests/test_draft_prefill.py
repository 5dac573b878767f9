"""The draft's prompt prefill on its Q8_0 copy (models/draft/prefill.py): the cache moved into
the draft holds the prompt, the draft proposes from it much as from its own prefill, the
choice follows the timing, and the output stays the target's (greedy, against the oracle)."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from core.engine import GenConfig
from models.draft.format import q8_copy
from models.draft.llama import LlamaDrafter, common_prefix
from models.draft.prefill import MIN_TOKENS, CopyPrefill, pick_prefill
from models.pairs.catalog import draft_path, get_pair
from tests.conftest import UNTIMED

PASSAGE = ("The lighthouse keeper climbed the spiral stairs every evening at dusk, carrying "
           "a lantern, a notebook and a flask of tea. From the gallery he watched the ships "
           "pass the reef, wrote down their names and the hour, and trimmed the wick so the "
           "beam would reach the far side of the bay. ")
LONG = f"Copy this text exactly:\n\n{PASSAGE * 2}\nThe copy:\n\n"


@pytest.fixture(scope="module")
def q4_path():
    return draft_path(get_pair("smol-self"))


def greedy(drafter: LlamaDrafter, ids: list[int], n: int) -> list[int]:
    out, ctx = [], list(ids)
    for _ in range(n):
        tok = int(np.argmax(drafter._sync(ctx)))
        out.append(tok)
        ctx.append(tok)
    return out


def greedy_long(pair, method: str) -> tuple[list[int], list]:
    """LONG's 24 greedy tokens by `method` (cold, no lookup; duo's draft prefill in one round,
    not beside as many as fit in it), asserted to be vanilla's; the prompt's ids and the
    events."""
    from tests.conftest import vanilla_ids

    ids = pair.prompt_ids(LONG)
    expected = vanilla_ids(pair, ids, 24)
    pair.lookup_memory.clear()
    untimed = UNTIMED if method == "duo" else {"lookup": "off"}
    events = list(pair.generate(ids, GenConfig(method=method, max_new_tokens=24, gamma=4,
                                               cache_prompt=False, **untimed)))  # it drafts
    assert [t for e in events for t in e.tokens] == expected
    return ids, events


@pytest.fixture
def drafters(q4_path):
    """The draft prefilling itself, and the draft prefilling on its Q8_0 copy."""
    own = LlamaDrafter(q4_path, n_threads=1, n_ctx=1024)
    moved = LlamaDrafter(q4_path, n_threads=1, n_ctx=1024)
    moved.prefill = CopyPrefill(q8_copy(q4_path), 1024)
    yield own, moved
    own.close()
    moved.close()


def test_the_copys_cache_moved_into_the_draft_drafts_as_its_own(drafters):
    own, moved = drafters
    ids = own.tokenize(LONG)
    assert len(ids) > MIN_TOKENS + 1
    ref, got = greedy(own, ids, 16), greedy(moved, ids, 16)
    assert moved.prefill.copy.tokens == ids[:-1]  # the copy evaluated the prompt
    assert moved.tokens[:len(ids)] == ids  # the draft holds it, then its own drafts
    assert sum(a == b for a, b in zip(ref, got)) >= 12, (ref, got)
    moved.rollback(len(ids) - 3)  # a short catch-up stays on the draft itself
    greedy(moved, ids, 1)
    assert moved.prefill.copy.tokens == ids[:-1]
    moved.rollback(0)  # forgotten: a cold run prefills on the copy again
    assert moved.tokens == [] and moved.prefill.copy.tokens == []


def test_a_stopped_prefill_ends_between_batches_with_a_prefix_cached(q4_path, drafters):
    """A job's stop (a cancelled chunk) is checked between batches: unstopped, the next token
    is the one-batch prefill's; stopped after a batch, no logits, and the cache holds that
    batch; on the copy, the draft's cache is left as it was."""
    stop, batch = threading.Event(), 32
    d = LlamaDrafter(q4_path, n_threads=1, n_ctx=1024, n_batch=batch)
    try:
        ids = d.tokenize(LONG)
        assert len(ids) > batch + 1
        whole = d._sync(ids)
        d.rollback(0)
        assert np.argmax(d._sync(ids, stop)) == np.argmax(whole)
        d.rollback(0)
        decode = d._decode
        d._decode = lambda: (decode(), stop.set())  # stopped once the first batch is in
        assert d._sync(ids, stop) is None and d.tokens == ids[:batch]
    finally:
        d.close()
    copying = drafters[1]
    assert copying._sync(ids, stop) is None and copying.tokens == []


def test_auto_takes_the_copy_only_where_it_measured_faster(q4_path):
    drafter = LlamaDrafter(q4_path, n_threads=1, n_ctx=512)
    try:
        faster = pick_prefill(drafter, q4_path, "auto", 2, lambda m: {"own": 2.0, "copy": 1.0})
        assert isinstance(faster[0], CopyPrefill) and faster[1].kind == "copy"
        assert "2.0x" in faster[1].reason
        faster[0].close()
        alike = pick_prefill(drafter, q4_path, "auto", 2, lambda m: {"own": 1.1, "copy": 1.0})
        assert alike[0] is None and alike[1].kind == "own"
        assert pick_prefill(drafter, q4_path, "own", 2, None)[0] is None
        forced = pick_prefill(drafter, q4_path, "copy", 2, None)
        assert isinstance(forced[0], CopyPrefill)
        forced[0].close()
        eight = pick_prefill(drafter, q8_copy(q4_path), "copy", 2, None)
        assert eight[0] is None and "Q8_0" in eight[1].reason  # no faster copy of a Q8_0 file
        with pytest.raises(ValueError, match="draft prefill 'fast'"):
            pick_prefill(drafter, q4_path, "fast", 2, None)
    finally:
        drafter.close()


@pytest.mark.parametrize("method", ["sps", "duo"])
def test_greedy_from_a_copied_prefill_is_the_oracles(smol_pair, method, monkeypatch):
    """The suite's timing says the copy is faster (tests/profiles.py), as on its machines:
    the default pair prefills long prompts on it, and the output is vanilla's."""
    assert smol_pair.prefill_choice.kind == "copy"
    ids, events = greedy_long(smol_pair, method)
    copied = smol_pair.drafter.prefill.copy.tokens  # duo: after the target's first token too
    assert copied[:len(ids) - 1] == ids[:-1] and len(copied) <= len(ids)  # the prompt
    stats = events[-1].stats
    assert stats["draft_prefill"]["kind"] == "copy" and stats["accepted"] > 0
    copy, evaluated = smol_pair.drafter.prefill.copy, []
    sync = copy._sync
    monkeypatch.setattr(copy, "_sync", lambda got, stop=None: evaluated.append(
        len(got) - common_prefix(copy.tokens, got)) or sync(got, stop))
    list(smol_pair.generate(ids, GenConfig(method=method, max_new_tokens=4, lookup="off",
                                           cache_prompt=False, gamma=4)))  # sps drafts
    assert evaluated and evaluated[0] >= len(ids) - 1  # cold: the whole prompt (+ 1: the
    # target's first token, sps's first round's)
