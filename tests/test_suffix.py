"""The suffix index (core/suffix.py): its matches and walks against a brute-force reference,
incremental appends, the memory's cap and eviction, and sharing between threads."""
from __future__ import annotations

import threading
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.suffix import MAX_MATCH, ContextLookup, SuffixIndex, SuffixMemory


def brute_match(seq: list[int], tail: list[int]) -> tuple[int, list[int]]:
    """The longest suffix of tail occurring in seq with a token after it, and the end
    positions of its occurrences."""
    best = (0, [])
    for m in range(1, min(MAX_MATCH, len(tail)) + 1):
        pat = tail[-m:]
        ends = [e for e in range(m - 1, len(seq) - 1) if seq[e - m + 1:e + 1] == pat]
        if not ends:
            break
        best = (m, ends)
    return best


def brute_walk(seq: list[int], ends: list[int], max_len: int) -> list[int]:
    """The most frequent next token again and again (ties: the latest occurrence's)."""
    out = []
    for _ in range(max_len):
        ends = [e for e in ends if e + 1 < len(seq)]
        if not ends:
            break
        nxt = [seq[e + 1] for e in ends]
        counts = Counter(nxt)
        top = max(counts.values())
        tok = max((i for i, t in enumerate(nxt) if counts[t] == top), key=lambda i: ends[i])
        tok = nxt[tok]
        out.append(tok)
        ends = [e + 1 for e in ends if seq[e + 1] == tok]
    return out


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=2, max_size=80), st.integers(1, 12))
def test_propose_matches_a_brute_force_reference(seq, max_len):
    idx = SuffixIndex()
    for t in seq:  # built token by token, as a generation grows it
        idx.append(t)
    m, ends = idx.match(seq)
    ref_m, ref_ends = brute_match(seq, seq)
    assert (m, sorted(ends.tolist())) == (ref_m, ref_ends)
    found = idx.propose(max_len)
    if not m:
        assert not found.tokens
        return
    ref = brute_walk(seq, ref_ends, max_len)
    assert found.tokens == ref[:len(found.tokens)]  # the walk may stop early, on MIN_CONF
    assert found.match == m and len(found.conf) == len(found.tokens)
    assert all(0 < c < 1 for c in found.conf)


def test_a_copy_is_proposed_with_growing_confidence():
    doc = list(range(100, 140))
    idx = SuffixIndex(doc + [7, 8] + doc[:5])
    found = idx.propose(10)
    assert found.tokens == doc[5:15] and found.match == 5
    assert found.conf == sorted(found.conf)  # a longer match is better evidence


def test_pending_tokens_extend_the_tail():
    idx = SuffixIndex([1, 2, 3, 4, 5, 9, 1, 2])
    assert idx.propose(3).tokens == [3, 4, 5]
    lookup = ContextLookup([1, 2, 3, 4, 5, 9, 1, 2])
    assert lookup.propose(2, pending=[3, 4]).tokens == [5, 9]
    assert len(lookup.index) == 8  # pending tokens are not indexed


def test_the_most_frequent_next_token_is_proposed():
    idx = SuffixIndex([5, 1, 5, 2, 5, 1, 5, 3, 5])
    assert idx.propose(1).tokens == [1]  # 1 twice


def test_no_match_proposes_nothing():
    assert not SuffixIndex([1, 2, 3]).propose(4)
    assert not SuffixIndex().propose(4)


def test_memory_is_consulted_beside_the_context_and_never_crosses_documents():
    memory = SuffixMemory(cap_tokens=100)
    memory.add([10, 11, 12, 13, 14])
    memory.add([20, 21])
    lookup = ContextLookup([1, 2, 10, 11], memory)
    found = lookup.propose(5)
    assert found.tokens == [12, 13, 14] and found.source == "memory"  # stops at the document
    assert ContextLookup([1, 2, 10, 11]).propose(5).tokens == []


def test_the_context_wins_a_tie_with_the_memory():
    memory = SuffixMemory()
    memory.add([3, 4, 9])
    found = ContextLookup([3, 4, 5, 6, 3, 4], memory).propose(2)
    assert found.tokens == [5, 6] and found.source == "context"


def test_memory_cap_evicts_the_oldest_documents():
    memory = SuffixMemory(cap_tokens=10)
    memory.add([1, 2, 3, 4])
    memory.add([5, 6, 7, 8])
    assert len(memory) == 8
    memory.add([9, 10, 11, 12])  # 12 > 10: the first document goes
    assert len(memory) == 8
    assert not memory.propose([1, 2], 2).tokens
    assert memory.propose([5, 6], 2).tokens == [7, 8]
    memory.add(list(range(50, 80)))  # longer than the cap: its last 10 tokens are kept
    assert len(memory) == 10
    assert memory.propose([75], 3).tokens == [76, 77, 78]
    memory.clear()
    assert len(memory) == 0 and not memory.propose([75], 3).tokens
    with pytest.raises(ValueError, match="cap_tokens"):
        SuffixMemory(cap_tokens=-1)


def test_memory_is_safe_to_share_between_threads():
    memory, errors = SuffixMemory(cap_tokens=2000), []
    rng = np.random.default_rng(0)
    docs = [rng.integers(0, 30, 50).tolist() for _ in range(40)]

    def writer(part):
        for doc in part:
            memory.add(doc)

    def reader():
        try:
            for doc in docs:
                found = memory.propose(doc[:6], 8)
                assert len(found.tokens) == len(found.conf) <= 8
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(docs[i::2],)) for i in range(2)]
    threads += [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(memory) == 2000
    assert memory.propose(docs[-1][:10], 5).tokens  # what was added last is still there


def test_appends_grow_the_buffer_and_keep_every_token():
    idx, seq = SuffixIndex(capacity=2), list(range(3000))
    for t in seq[:1000]:
        idx.append(t)
    idx.extend(seq[1000:])
    assert idx.tokens.tolist() == seq
