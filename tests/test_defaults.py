"""The default run end to end: with no options on a CPU-only machine, the eager target
(nothing timed to choose it), float32 and the model's own weights on packed layers, the
plan's threads (the draft's fastest measured count, the target every core: the two take
turns), duo in sps's loop with the lookup, no method over the cores, and the benchmark
running every method, the peers too."""
from __future__ import annotations

import json
import os
from dataclasses import replace

import pytest

import models.fit.profiler as profiler
from core.budget import Profile
from core.engine import GenConfig
from models.loader import SPS_LOOP

CORES = 4  # os.cpu_count() as the defaults see it
# draft s/token by threads: 2 the fastest
DRAFT_TIMES = {1: 0.010, 2: 0.006, 4: 0.007}
PROFILE = Profile(draft_token_s=0.005, verify_s=[0.02 + 0.001 * n for n in range(32)])
PROMPT = "Why is the sky blue?"


@pytest.fixture(scope="module")
def default_pair():
    """smol-self loaded with LoadOptions() on a CPU-only machine of CORES cores."""
    import torch

    from models.loader import LoadOptions, Pair

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "cpu_count", lambda: CORES)
        mp.setattr(torch.cuda, "is_available", lambda: False)
        mp.setattr(profiler, "pick_draft_threads", lambda name, drafter, cap, *a, **k:
                   {n: s for n, s in DRAFT_TIMES.items() if n <= cap})
        mp.setattr(profiler, "load_or_measure", lambda *a, **k: PROFILE)
        pair = Pair("smol-self", LoadOptions())
        try:
            yield pair
        finally:
            pair.close()


def tokens_and_stats(pair, method: str, n: int = 4):
    events = list(pair.generate(pair.prompt_ids(PROMPT), GenConfig(method=method,
                                                                   max_new_tokens=n)))
    return [t for e in events for t in e.tokens], events[-1].stats


def test_the_cpu_default_is_eager_with_one_plan_and_duo_in_sps_s_loop(default_pair):
    pair = default_pair
    ids, stats = tokens_and_stats(pair, "duo", 8)
    assert (stats["target_path"], stats["target_quant"], stats["target_dtype"],
            stats["target_device"]) == ("eager", "none", "float32", "cpu")
    assert stats["target_packed"] is True  # the copy fits this machine's RAM
    assert stats["threads"] == {"draft": 2, "target": CORES, "prefill": CORES,
                                "overlapped": False}
    assert stats["schedule"] == SPS_LOOP and not pair.overlapped
    assert "CPU, 2 thread(s), " in pair.describe()["draft"]
    assert "eager (auto: eager on the CPU" in pair.describe()["target"]
    assert "multi-row products on oneDNN's packed weights" in pair.describe()["target"]
    assert ids == tokens_and_stats(pair, "vanilla", 8)[0]


def test_no_method_puts_more_busy_threads_than_cores(default_pair):
    """The draft and the target take turns: each within the cores; vanilla has no draft."""
    for method in ("vanilla", "sps", "duo"):
        _, stats = tokens_and_stats(default_pair, method, 2)
        t = stats["threads"]
        assert max(t["draft"], t["target"]) <= CORES and not t["overlapped"], (method, t)


ALL = ("vanilla", "sps", "duo", "hf-assisted", "hf-pld", "hf-static", "llamacpp")


def test_the_benchmark_runs_every_method_on_the_default_pair(default_pair, tmp_path,
                                                             monkeypatch):
    """Every method, the transformers peers on a model of their own (the static target's
    span attention stays its own); greedy, they give vanilla's tokens."""
    import measure.peers as peers
    import models.loader as loader
    import scripts.benchmark as bench

    pair = default_pair
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
    assert report["machine"]["threads"]["duo"] == pair.threads.to_dict()
    assert pair.target.model.config._attn_implementation == attention
    assert tokens_and_stats(pair, "duo")[0] == tokens_and_stats(pair, "vanilla")[0]
