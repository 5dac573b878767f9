"""The default run end to end: with no options, duo gets the path, precision and thread split
the measurements chose for duo (timings injected, no clock), no method puts more busy
threads than cores, and the benchmark runs every method, the peers too, on that pair."""
from __future__ import annotations

import json
import os
from dataclasses import replace

import pytest

import models.draft.llama as llama
import models.fit.profiler as profiler
import models.target.choice as choice
import models.target.packed as packed
import models.target.static as static
from core.budget import Profile
from core.engine import GenConfig
from models.fit.placement import half_up

CORES = 4  # os.cpu_count() as the defaults see it: a split with two threads a side
FAST, SLOW = [0.010, 0.030], [0.014, 0.040]  # s per 1- and 8-token forward
# draft s/token by threads: 2 the fastest, alone too (4 alone on this test's 2 real cores
# would oversubscribe them: llama.cpp's pool spins; test_draft_alone.py has the draft alone)
DRAFT_TIMES = {1: 0.010, 2: 0.006, 4: 0.007}
PROFILE = Profile(draft_token_s=0.005, verify_s=[0.02 + 0.001 * n for n in range(32)])
PROMPT = "Why is the sky blue?"


@pytest.fixture(scope="module", params=["compiled", "eager"])
def default_pair(request):
    """smol-self loaded with LoadOptions() on a CPU-only machine of CORES cores, where the
    injected path timings (taken as duo runs the target) make `request.param` the faster:
    (pair, the thread counts the path timings were asked for, the faster path)."""
    import torch

    from models.loader import LoadOptions, Pair

    winner = request.param
    times = {"compiled": FAST, "eager": SLOW} if winner == "compiled" else \
        {"compiled": SLOW, "eager": FAST}
    asked: list[int] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "cpu_count", lambda: CORES)
        mp.setattr(torch.cuda, "is_available", lambda: False)
        mp.setattr(choice, "cpu_path_times", lambda model_dir, dtype, n_ctx, threads, *a, **k:
                   asked.append(threads) or times)
        mp.setattr(static, "_compiled", lambda fn, *a, **k: fn)  # the choice is the subject here
        # and so no warm-up: with nothing compiled it ran 18 forwards of 1 to 32 tokens
        # through the 30 layers (about 4 CPU s), and its time is read by nothing
        mp.setattr(static.StaticTarget, "warm_up", lambda self, progress=None: 0.0)
        mp.setattr(profiler, "pick_draft_threads", lambda name, drafter, cap, *a, **k:
                   {n: s for n, s in DRAFT_TIMES.items() if n <= cap})
        mp.setattr(profiler, "load_or_measure", lambda *a, **k: PROFILE)
        mp.setattr(llama, "thread_pool", lambda: "ggml")  # the Makefile's build, not OpenMP
        mp.setattr(packed, "product_times", lambda model, remeasure=False: {"torch": 0.02,
                                                                             "packed": 0.01})
        pair = Pair("smol-self", LoadOptions())
        try:
            yield pair, asked, winner
        finally:
            pair.close()


def tokens_and_stats(pair, method: str, n: int = 4):
    events = list(pair.generate(pair.prompt_ids(PROMPT), GenConfig(method=method,
                                                                   max_new_tokens=n)))
    return [t for e in events for t in e.tokens], events[-1].stats


def test_duo_gets_the_path_precision_and_split_measured_for_duo(default_pair):
    """The path timings were taken at duo's target share; the faster there is the path duo
    runs (so 'always eager on a CPU' fails here), compiled for that share; float32, the
    model's own weights; the draft on its fastest measured count within its half."""
    pair, asked, winner = default_pair
    compiled, share = winner == "compiled", half_up(CORES)
    assert asked == [share]
    ids, stats = tokens_and_stats(pair, "duo")
    assert stats["target_path"] == ("static-compiled" if compiled else "eager")
    assert (stats["target_quant"], stats["target_dtype"], stats["target_device"]) == \
        ("none", "float32", "cpu")
    assert stats["threads"] == {"draft": 2, "target": share, "prefill": CORES, "alone": 0}
    assert "CPU, 2 thread(s), " in pair.describe()["draft"]
    assert pair.target.fixed_threads == (share if compiled else None)
    # compiled for every core too: vanilla and sps take them all
    assert pair.target.graph_threads == ((share, CORES) if compiled else ())
    assert pair.threads("vanilla").target == pair.threads("sps").target == CORES
    assert pair.target.pace is not None and pair.target.pace_first == share  # while faster
    assert f"auto: {winner} measured faster as duo runs it on this CPU: {share} thread(s)" in \
        pair.describe()["target"]
    assert pair.target.packed and "packed weights: auto: multi-row" in pair.describe()["target"]
    assert ids == tokens_and_stats(pair, "vanilla")[0]


def test_no_method_puts_more_busy_threads_than_cores(default_pair):
    """duo's draft and target decode side by side: together within the cores, and the draft
    alone (the target waiting) within them; sps's take turns (the draft alone on every core)
    and vanilla has no draft: each side within them."""
    pair = default_pair[0]
    for method in ("vanilla", "sps", "duo"):
        _, stats = tokens_and_stats(pair, method, 2)
        t = stats["threads"]
        busy = max(t["draft"] + t["target"], t["alone"]) if method == "duo" else \
            max(t["draft"], t["target"])
        assert busy <= CORES and pair.threads(method).busy == busy, (method, t)
        assert t["draft"] == (0 if method == "vanilla" else 2)


ALL = ("vanilla", "sps", "duo", "hf-assisted", "hf-pld", "hf-static", "llamacpp")


@pytest.mark.parametrize("default_pair", ["compiled"], indirect=True)  # peers: the static target
def test_the_benchmark_runs_every_method_on_the_default_pair(default_pair, tmp_path,
                                                             monkeypatch):
    """Every method, the transformers peers on a model of their own (the static target's
    span attention stays its own); greedy, they give vanilla's tokens."""
    import measure.peers as peers
    import models.loader as loader
    import scripts.benchmark as bench

    pair = default_pair[0]
    monkeypatch.setattr(loader, "Pair", lambda name, opts: pair)  # this default pair
    monkeypatch.setattr(peers, "STATIC_COMPILE", False)  # hf-static's compile: minutes on a CPU
    # nor the benchmark's warm-up: one more run a method, on another prompt, unchecked (the
    # methods' runs below are the subject; test_gpu_report.py runs a benchmark with it)
    monkeypatch.setattr(bench, "warm_up", lambda runs, raw: None)
    # the peers (llama.cpp's threads spin at its barriers) on the cores there are, not CORES
    cores = min(CORES, len(os.sched_getaffinity(0)))
    monkeypatch.setattr(pair, "opts", replace(pair.opts, cores=cores))
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"question_id": 1, "category": "c", "turns": [PROMPT]}))
    attention = pair.target.model.config._attn_implementation
    bench.main(["--pair", "smol-self", "--questions", str(questions), "--out", str(tmp_path),
                "--methods", ",".join(ALL), "--max-new-tokens", "4", "--figure1-lengths", ""])
    report = json.loads((tmp_path / "results.json").read_text())
    assert report["complete"] and set(report["methods"]) == set(ALL)
    for method, summary in report["methods"].items():
        assert summary["overall"]["new_tokens"] > 0, method
    for method in ("sps", "duo", "hf-assisted", "hf-pld", "hf-static"):
        assert report["methods"][method]["overall"]["identical_to_vanilla"] == 1, method
    assert report["machine"]["threads"]["duo"]["draft"] + \
        report["machine"]["threads"]["duo"]["target"] <= CORES
    assert pair.target.model.config._attn_implementation == attention
    assert tokens_and_stats(pair, "duo")[0] == tokens_and_stats(pair, "vanilla")[0]
