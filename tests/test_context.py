"""Chats reuse what the caches hold, and the context window holds for every method: the real
smol-self pair with its target cut to a few layers (gemma-smol, whose draft counts the window
in its own tokens, is in tests/test_cross_tokenizer.py)."""
from __future__ import annotations

import pytest

from core.align import common_prefix
from core.engine import GenConfig
from tests.conftest import UNTIMED

TURN1 = [{"role": "user", "content": "Name three colours of the rainbow."}]


def run(pair, ids, **kw) -> tuple[list[int], dict]:
    tokens, stats = [], {}
    for ev in pair.generate(ids, GenConfig(**kw)):
        tokens += ev.tokens
        stats = ev.stats or stats
    return tokens, stats


def counting(monkeypatch, pair) -> dict:
    """Count the prompt tokens each model computes: the target's first forward, and the
    draft's batched prefills."""
    seen = {"target": [], "draft": 0}
    score, fill = pair.target.score, pair.drafter._fill

    def target_score(tokens, n_rows, sampling, *args, **kwargs):
        seen["target"].append(len(tokens))
        return score(tokens, n_rows, sampling, *args, **kwargs)

    def draft_fill(entries, last_only):
        seen["draft"] += len(entries) if last_only else 0
        return fill(entries, last_only)
    monkeypatch.setattr(pair.target, "score", target_score)
    monkeypatch.setattr(pair.drafter, "_fill", draft_fill)
    return seen


# The pairs here have smol-self's target cut to a few layers (tests/cut_target.py): what these
# tests check is bookkeeping (what the caches keep, where each method stops at the window,
# what the draft and the budget's probes may hold), the same code whatever the layer count;
# each forward, and the profile the probes time (32 verify sizes), costs a seventh.
@pytest.fixture(scope="module")
def cut(pair_with):
    from tests.cut_target import load_cut

    return load_cut(pair_with)


@pytest.fixture(scope="module")
def small_window(pair_with):
    """The cut pair at a 64-token window."""
    from tests.cut_target import load_cut

    return load_cut(pair_with, n_ctx=64)


@pytest.mark.parametrize("method", ["vanilla", "duo"])
def test_turn_two_prefills_only_its_new_tokens(cut, monkeypatch, method):
    # duo's draft prefills are counted, and each of its jobs catches up with a token or more:
    # its rounds at a fixed gamma where no timing chooses them (conftest.UNTIMED)
    fixed = {"gamma": 4, **UNTIMED} if method == "duo" else {}
    ids1 = cut.prompt_ids(TURN1)
    out1, _ = run(cut, ids1, method=method, max_new_tokens=24, **fixed)
    turn2 = TURN1 + [{"role": "assistant", "content": cut.decode(out1)},
                     {"role": "user", "content": "And two more, please."}]
    ids2 = cut.prompt_ids(turn2)
    seen = counting(monkeypatch, cut)
    warm, stats = run(cut, ids2, method=method, max_new_tokens=24, **fixed)
    kept = stats["cached_tokens"]
    assert kept >= len(ids1) and stats["prompt_tokens"] == len(ids2)
    assert seen["target"][0] == len(ids2) - kept  # only the new tokens, no draft beside
    if method == "duo":
        assert 0 < seen["draft"] <= len(ids2) - len(ids1) + 8
    seen["target"].clear()
    cold, stats = run(cut, ids2, method=method, max_new_tokens=24, cache_prompt=False, **fixed)
    assert cold == warm and stats["cached_tokens"] == 0
    assert seen["target"][0] == len(ids2)


def test_an_unrelated_prompt_keeps_nothing_and_a_repeat_keeps_all_but_one(cut):
    ids = cut.prompt_ids("Write a haiku about rain.")
    first, _ = run(cut, ids, method="sps", max_new_tokens=8)
    again, stats = run(cut, ids, method="sps", max_new_tokens=8)
    assert again == first and stats["cached_tokens"] == len(ids) - 1
    other = cut.prompt_ids("Quelle heure est-il ?")
    _, stats = run(cut, other, method="sps", max_new_tokens=4)
    assert stats["cached_tokens"] == common_prefix(ids, other)  # the template's opening


@pytest.mark.parametrize("method", ["vanilla", "sps", "duo"])
def test_generation_near_the_window_ends_with_length(small_window, method):
    ids = small_window.prompt_ids("Tell me a long story about a dragon who learns to bake bread.")
    tokens, stats = run(small_window, ids, method=method, max_new_tokens=10_000)
    assert stats["stop_reason"] in ("context_window", "eos")
    assert len(ids) + len(tokens) <= small_window.target.n_ctx
    with pytest.raises(ValueError, match="exceed the context window of 64 tokens"):
        small_window.check_room(ids, 10_000)


def test_the_draft_proposes_nothing_past_its_own_window(small_window):
    drafter = small_window.drafter
    full = list(range(100, 100 + drafter.n_ctx))
    assert len(drafter.propose(full, 4, GenConfig().sampling, None).main) == 0


def test_ctx_size_is_checked_against_the_trained_window():
    from models.target.choice import pick_ctx
    from tests.cut_target import source

    model_dir = source("smol-self")
    assert pick_ctx(model_dir, "cpu", "float32", 2048) == (2048, "as asked")
    assert pick_ctx(model_dir, "cpu", "float32")[0] == 8192  # SmolLM2: trained 8192, fits
    with pytest.raises(ValueError, match="--ctx-size must be 64..8192"):
        pick_ctx(model_dir, "cpu", "float32", 100_000)


def test_cli_refuses_more_new_tokens_than_the_window_holds(small_window, capsys, monkeypatch):
    """generate.py's main in this process: --ctx-size reaches the load, and the window the
    pair has (small_window's) refuses the request on one line (a process of its own loaded
    smol-self again, 11 CPU seconds; the CLI as a process: tests/test_cli.py)."""
    import models.loader
    from scripts.generate import main
    from tests.conftest import one_line_exit_2

    loads = []
    monkeypatch.setattr(models.loader, "Pair", lambda name, options: loads.append(options)
                        or small_window)
    monkeypatch.setenv("TRANSFORMERS_VERBOSITY", "error")  # what main's quiet_logs sets
    err = one_line_exit_2(capsys, lambda: main(["--prompt", "Hi", "--method", "vanilla",
                                                "--max-new-tokens", "1000000000",
                                                "--ctx-size", "256"]))
    assert [o.n_ctx for o in loads] == [256]
    assert err.startswith("error: the prompt (") and "at most" in err


def test_a_draft_whose_window_fills_first_leaves_the_target_alone(small_window, monkeypatch):
    ids = small_window.prompt_ids("Tell me a long story about a dragon who learns to bake bread.")
    expected, _ = run(small_window, ids, method="vanilla", max_new_tokens=40)
    monkeypatch.setattr(small_window.drafter, "n_ctx", len(ids) + 6)  # full after a few tokens
    for method in ("sps", "duo"):
        tokens, stats = run(small_window, ids, method=method, max_new_tokens=40)
        assert tokens == expected[:len(tokens)] and stats["stop_reason"] != ""
        assert len(tokens) == len(expected)


def test_the_budget_s_probes_fit_a_small_window(small_window, monkeypatch):
    """A profile on a small target window (seen on a busy machine at 64 tokens: the
    probes' 64-token context plus a verify chunk overflowed it): the probes shrink to the
    window, the context first, then the verify sizes; the chat's cache stays. The probes see
    a 32-token window (the target refuses past it): 16 verify sizes and a 16-token context,
    both shrunk (at 64 the context alone shrank, and 32 sizes cost four times the rows)."""
    from models.fit.profiler import measure

    ids = small_window.prompt_ids("Hi")
    run(small_window, ids, method="vanilla", max_new_tokens=4)
    cached = list(small_window.target.cached_ids)
    monkeypatch.setattr(small_window.target, "n_ctx", 32)
    probed = []
    monkeypatch.setattr(small_window.target, "logits", lambda tokens, n, _logits=
                        small_window.target.logits: probed.append(len(tokens)) or
                        _logits(tokens, n))
    profile = measure(small_window.drafter, small_window.target, rounds=1)
    assert len(profile.verify_s) == 16 and all(s > 0 for s in profile.verify_s)
    assert max(probed) == 16 and 16 in probed  # the context, then chunks of 1 to 16
    assert measure(small_window.drafter, small_window.target, verify_n=1, seqs=1,
                   rounds=1).verify(1) > 0
    assert small_window.target.cached_ids == cached
