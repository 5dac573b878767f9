"""Cancelling a duo generation (multi-sequence on) at each event, by `stop()` or by closing
the generator: at a prefill, after a verify, while a dropped (possibly branched) chunk is
still drafting. Both caches stay consistent and the next greedy generation equals a fresh
vanilla one, on the same prompt (the draft reuses its cache) and on another."""
from __future__ import annotations

import pytest

from core.engine import GenConfig

PROMPTS = ["Write a haiku about a cat sleeping in the sun.",
           "List three tips for staying focused while studying."]
N = 16  # at gamma 4 several events a generation (the test cuts at two at least)


def tokens(pair, ids, method, stop=None) -> list[int]:
    cfg = GenConfig(method=method, max_new_tokens=N, multi_seq=True)
    return [t for e in pair.generate(ids, cfg, stop) for t in e.tokens]


@pytest.fixture(scope="module")
def fresh(smol_pair):
    from tests.conftest import vanilla_ids

    return [(ids, vanilla_ids(smol_pair, ids, N))
            for ids in (smol_pair.prompt_ids(p) for p in PROMPTS)]


def cancel(pair, ids, k: int, how: str) -> tuple[list[int], bool]:
    """A duo generation cancelled after its k-th event: the tokens it gave, and whether the
    cancel cut it (False: the k-th event was its last). Its rounds follow fixed inputs: a
    fixed gamma and no lookup (the budget's own gamma and the lookup's pricing follow the
    timings, and the lookup's memory grows with each run)."""
    seen, cut, cfg = [], False, GenConfig(max_new_tokens=N, gamma=4, lookup="off")
    if how == "stop":
        for ev in pair.generate(ids, cfg, lambda: len(seen) >= k):
            seen.append(ev)
        reason = seen[-1].stats["stop_reason"]
        assert seen[-1].done and reason in ("stopped", "max_new_tokens", "eos")
        cut = reason == "stopped"
    else:
        events = pair.generate(ids, cfg)
        for ev in events:
            seen.append(ev)
            if len(seen) >= k:
                cut = not ev.done
                events.close()
                break
    return [t for e in seen for t in e.tokens], cut


def consistent(pair, ids, got) -> None:
    """The target's cache holds no more than prompt + output; the draft's KV cache (sequence
    0) holds exactly the tokens it says it has (a cancel before the draft's prefill leaves
    the previous context there, which the next proposal rolls back from)."""
    from llama_cpp import llama_cpp as C

    assert pair.target.n_cached <= len(ids + got)
    kv_end = C.llama_memory_seq_pos_max(pair.drafter.ctx.memory, 0) + 1
    assert kv_end == len(pair.drafter.tokens)


@pytest.mark.parametrize("how", ["stop", "close"])
def test_cancel_at_each_event_then_the_next_generation_is_fresh(smol_pair, fresh, how):
    """Up to the first k past the generation's last event: a cancel there cuts nothing, nor
    at any later k, so those runs checked nothing more."""
    smol_pair.lookup_memory.clear()
    for k in range(1, 9):
        ids, _ = fresh[0]
        got, cut = cancel(smol_pair, ids, k, how)
        assert got == fresh[0][1][:len(got)], f"cancelled at {k}"
        consistent(smol_pair, ids, got)
        ids, expected = fresh[k % 2]  # the same prompt, then another
        assert tokens(smol_pair, ids, "duo") == expected, f"after a cancel at {k}"
        if not cut:
            break
    assert k >= 3, k  # cut at two events at least: then another prompt, then the same
