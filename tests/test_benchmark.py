"""scripts/benchmark.py's bookkeeping with made-up generations: a prompt with no new tokens
counts, a run that dies part-way leaves results.json with what it measured, the lookup memory
is emptied before each measured run but kept between replay passes, medians and ratios per
category; the copy-heavy set; and, on smol-self, the lookup methods and peer at a tiny size."""
from __future__ import annotations

import copy
import json
from dataclasses import replace

import pytest

import scripts.benchmark as bench
from core.engine import GenConfig
from core.sampling import SamplingConfig
from tests.conftest import ROOT

QUESTIONS = [{"id": i, "category": "c", "prompt": f"q{i}"} for i in range(4)]


def stats(tokens: int, wall: float) -> dict:
    return {"new_tokens": tokens, "wall_s": wall, "drafted": tokens, "accepted": tokens,
            "rounds": tokens, "ttft_s": 0.1 if tokens else 0.0, "token_ids": [1] * tokens,
            "tokens_per_s": tokens / wall if wall else 0.0}


def test_empty_outputs_count():
    runs = [stats(0, 0.0), stats(10, 1.0)]
    base = [stats(0, 0.0), stats(5, 1.0)]
    out = bench.aggregate(runs, base)
    assert out["prompts"] == 2 and out["empty_outputs"] == 1 and out["new_tokens"] == 10
    assert out["speedup"] == pytest.approx(2.0) and out["ttft_s"] == pytest.approx(0.1)
    none = bench.aggregate([stats(0, 0.0)], [stats(0, 0.0)])
    assert none["tokens_per_s"] == none["speedup"] == none["ttft_ratio"] == 0.0


class FakePair:
    def prompt_ids(self, text, raw=False):
        return [len(text)]


def test_a_run_that_dies_keeps_what_it_measured(tmp_path, monkeypatch):
    calls = []

    def run_one(pair, ids, cfg):
        calls.append(ids)
        if len(calls) == 2 + 2 * 2 + 1:  # warm-ups (2), two prompts x 2 methods, then dies
            raise RuntimeError("the machine fell over")
        return stats(0 if len(calls) == 3 else 8, 0.0 if len(calls) == 3 else 1.0)  # 3: empty

    monkeypatch.setattr(bench, "run_one", run_one)
    runs = {m: (FakePair(), GenConfig(method=m)) for m in ("vanilla", "duo")}
    head = {"settings": {}}
    save = lambda res: bench.write_results(tmp_path, head, res, complete=False)  # noqa: E731
    with pytest.raises(RuntimeError):
        bench.run_all(runs, QUESTIONS, False, lambda m: None, save=save)
    report = json.loads((tmp_path / "results.json").read_text())
    assert report["complete"] is False and report["prompts_done"] == 2
    vanilla = report["methods"]["vanilla"]["overall"]
    assert vanilla["prompts"] == 2 and vanilla["empty_outputs"] == 1 and vanilla["new_tokens"] == 8


class Memory:
    """A stand-in for the app's lookup memory: counts the times it was emptied."""

    def __init__(self):
        self.cleared = 0

    def clear(self):
        self.cleared += 1


class MemoryPair(FakePair):
    def __init__(self):
        self.lookup_memory = Memory()


def test_each_measured_run_starts_with_the_lookup_memory_empty(monkeypatch):
    pair, seen = MemoryPair(), []
    monkeypatch.setattr(bench, "run_one", lambda p, ids, cfg: (
        seen.append(pair.lookup_memory.cleared), stats(4, 1.0))[1])
    runs = {m: (pair, GenConfig(method=m)) for m in ("vanilla", "duo", "duo-nolookup")}
    bench.run_all(runs, QUESTIONS[:2], False, lambda m: None)
    assert seen[3:] == [1, 2, 3, 4, 5, 6]  # after the 3 warm-ups, one clear before each run


def test_each_label_learns_from_its_own_runs_only(monkeypatch):
    """duo and duo-nolookup share the pair's learning: each run starts from what its own
    label's last run left (the warm-up's state at first), not from the other's run on the
    same prompt; the pair's own learning is as the warm-up left it."""
    from core.learned import Learned

    pair, seen = MemoryPair(), []
    pair.learned = Learned()

    def one(p, ids, cfg):
        label = "off" if cfg.lookup == "off" else "on"
        seen.append((label, dict(pair.learned.budgets)))
        pair.learned.budgets["duo"] = {"last": (label, ids[0])}
        return stats(4, 1.0)

    monkeypatch.setattr(bench, "run_one", one)
    runs = {"duo": (pair, GenConfig(method="duo")),
            "duo-nolookup": (pair, GenConfig(method="duo", lookup="off"))}
    bench.run_all(runs, QUESTIONS[:2], False, lambda m: None)
    measured = seen[2:]  # after the two warm-ups
    warm = measured[0][1]
    assert warm["duo"]["last"][0] == "off"  # what the last warm-up left
    assert measured[1] == ("off", warm)  # not duo's run on the same prompt
    assert measured[2][1]["duo"]["last"][0] == "on"  # its own first run, not duo-nolookup's
    assert measured[3][1]["duo"]["last"][0] == "off"
    assert pair.learned.budgets == warm


def test_fresh_runs_carry_no_learning_between_prompts(monkeypatch):
    """--fresh: every measured run starts from the pair's learning after the warm-up; without
    it a label's second prompt starts from what its first left. Either way the pair's own
    learning is the warm-up's afterwards."""
    from core.learned import Learned

    def one(pair, ids, cfg):
        seen.append(dict(pair.learned.budgets))
        pair.learned.budgets["duo"] = {"runs": len(seen)}
        return stats(4, 1.0)

    monkeypatch.setattr(bench, "run_one", one)
    for fresh, second in ((False, 2), (True, 1)):
        pair, seen = MemoryPair(), []
        pair.learned = Learned()
        bench.run_all({"duo": (pair, GenConfig(method="duo"))}, QUESTIONS[:2], False,
                      lambda m: None, fresh=fresh)
        assert seen == [{}, {"duo": {"runs": 1}}, {"duo": {"runs": second}}]
        assert pair.learned.budgets == {"duo": {"runs": 1}}


def test_a_labelled_twin_runs_its_method_and_repeat_goes_through_the_list_again():
    args = bench.parse(["--questions", "q.jsonl", "--out", "/tmp/x", "--repeat", "2"])
    assert bench.method_config(args, "duo-nolookup@twin") == bench.method_config(args, "duo-nolookup")
    assert bench.repeats(args) == 2
    with pytest.raises(ValueError, match="--repeat must be at least 1"):
        bench.repeats(bench.parse(["--questions", "q", "--out", "/tmp/x", "--repeat", "0"]))


def test_replay_keeps_the_memory_between_passes_and_changes_the_request(monkeypatch):
    from measure.replay import EDIT, run_replay

    pair, calls = MemoryPair(), []

    def run(p, ids, cfg):
        calls.append((cfg.method, cfg.seed, ids[0], pair.lookup_memory.cleared))
        return stats(8, 1.0 if len(calls) % 4 < 2 else 0.5)

    runs = {m: (pair, GenConfig(method=m)) for m in ("duo", "duo-nolookup")}
    res = run_replay(runs, QUESTIONS[:2], False, "edit", run, lambda m: None)
    assert list(res) == ["duo#1", "duo#2", "duo-nolookup#1", "duo-nolookup#2"]
    lengths = [len(q["prompt"]) for q in QUESTIONS[:2]]
    assert [c[2] for c in calls[:4]] == lengths + [n + len(EDIT) for n in lengths]
    assert [c[3] for c in calls] == [1] * 4 + [2] * 4  # emptied per method, not per pass
    sampled = GenConfig(method="duo", seed=5, sampling=SamplingConfig(temperature=0.7))
    calls.clear()
    run_replay({"duo": (pair, sampled)}, QUESTIONS[:1], False, "seed", run, lambda m: None)
    assert [c[1:3] for c in calls] == [(5, 2), (6, 2)]  # same prompt, another seed
    with pytest.raises(ValueError, match="needs --temperature > 0"):
        run_replay({"duo": (pair, GenConfig())}, QUESTIONS[:1], False, "seed", run, print)
    ratio = bench.ratios(res, bench.ratio_pairs(list(res)))
    assert set(ratio) == {"duo#2 / duo#1", "duo-nolookup#2 / duo-nolookup#1"}


def test_medians_per_category_and_ratios_between_methods():
    qs = [("a", 10.0, 5.0), ("a", 30.0, 10.0), ("a", 20.0, 20.0), ("b", 8.0, 8.0)]
    duo = [dict(stats(int(t), 1.0), category=c) for c, t, _ in qs]
    base = [dict(stats(int(b), 1.0), category=c) for c, _, b in qs]
    summary = bench.summarize({"duo": duo, "duo-nolookup": base})
    assert summary["duo"]["categories"]["a"]["tokens_per_s_median"] == 20.0
    table = bench.ratios({"duo": duo, "duo-nolookup": base},
                         bench.ratio_pairs(["duo", "duo-nolookup"]))
    r = table["duo / duo-nolookup"]
    assert r["categories"] == {"a": 2.0, "b": 1.0} and r["overall"] == pytest.approx(1.5)
    assert r["lowest_category"] == 1.0
    assert bench.ratio_pairs(["duo", "vanilla", "hf-pld"], "vanilla/duo") == [("vanilla", "duo")]
    with pytest.raises(ValueError, match="nope/duo"):
        bench.ratio_pairs(["duo"], "nope/duo")
    md = bench.markdown(summary, table)
    assert "| duo / duo-nolookup | 1.50 | 2.00 | 1.00 |" in md


def test_multi_turn_questions_with_written_answers(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps({"question_id": 1, "category": "revise", "turns": ["Q1", "Q2"],
                                "answers": ["A1"]}) + "\n" + json.dumps(
        {"question_id": 2, "category": "mt", "turns": ["T1", "T2"]}) + "\n")
    first, second = bench.load_questions(str(path), 0)
    assert first["prompt"] == [{"role": "user", "content": "Q1"},
                               {"role": "assistant", "content": "A1"},
                               {"role": "user", "content": "Q2"}]
    assert second["prompt"] == "T1"  # Spec-Bench's second turns need the answer first
    path.write_text(json.dumps({"question_id": 1, "category": "c", "turns": ["Q"],
                                "answers": ["A"]}) + "\n")
    with pytest.raises(ValueError, match="fewer than the turns"):
        bench.load_questions(str(path), 0)


def test_the_copy_heavy_set_has_three_prompts_a_category_with_pasted_material():
    qs = bench.load_questions(str(ROOT / "bench" / "copy_prompts.jsonl"), 0)
    cats = {q["category"] for q in qs}
    assert cats == {"code-edit", "reformat", "extract", "template", "revise"}
    assert all(sum(q["category"] == c for q in qs) >= 3 for c in cats)
    text = [q["prompt"] if isinstance(q["prompt"], str) else
            "".join(m["content"] for m in q["prompt"]) for q in qs]
    assert min(map(len, text)) > 600  # ~150 tokens and more of pasted material


def test_lookup_methods_and_the_llamacpp_lookup_peer_tiny(smol_pair):
    """lookup runs in the benchmark, greedy as vanilla's tokens, and finds the pasted text;
    duo-nolookup is duo with the lookup off; llama.cpp's prompt-lookup peer reports its
    rounds. (duo-nolookup ran here too, on this 538-token prompt: about 6 CPU seconds; the
    benchmark runs it in tests/test_gpu_report.py's lookup part, the engine's `off` keeps
    every round the model's in tests/test_lookup_lossless.py, and duo with the lookup off
    is vanilla's greedy text in tests/test_multi_seq.py.)"""
    from tests.conftest import vanilla_ids

    one_core = copy.copy(smol_pair)  # llama.cpp's threads spin (see test_peers)
    one_core.opts = replace(smol_pair.opts, cores=1)
    args = bench.parse(["--questions", "q", "--out", "o", "--max-new-tokens", "24",
                        "--lookup", "on"])  # auto's pricing follows the timings
    assert bench.method_config(args, "duo-nolookup") == replace(
        bench.method_config(args, "duo"), lookup="off")
    runs = {m: (one_core if m.startswith("llamacpp") else smol_pair,
                bench.method_config(args, m)) for m in ("lookup", "llamacpp-lookup")}
    assert runs["lookup"][1].method == "lookup"
    q = [x for x in bench.load_questions(str(ROOT / "bench" / "copy_prompts.jsonl"), 0)
         if x["id"] == 114]  # a second turn revising a written answer, past 512 tokens
    ids = smol_pair.prompt_ids(q[0]["prompt"])
    assert len(ids) > 512  # llama-cpp-python's n_batch rows (see measure/peers.py)
    res = bench.run_all(runs, q, False, lambda m: None)
    assert res["lookup"][0]["token_ids"] == vanilla_ids(smol_pair, ids, 24)
    assert res["lookup"][0]["lookup"]["accepted"] > 0
    peer = res["llamacpp-lookup"][0]
    assert peer["new_tokens"] == 24 or peer["stop_reason"] == "eos"
    assert peer["rounds"] >= 1 and peer["drafted"] > 0
    assert 0 < peer["accepted"] <= peer["drafted"]


def test_the_lookup_option_on_the_command_line():
    """--lookup reaches duo and lookup; the methods that never look up get auto; a value the
    method cannot honour is refused by name."""
    import scripts.generate as generate
    from app.cli import gen_config

    args = bench.parse(["--questions", "q", "--out", "o", "--lookup", "on"])
    assert [bench.method_config(args, m).lookup for m in ("duo", "lookup", "vanilla", "sps",
                                                          "duo-nolookup")] == [
        "on", "on", "auto", "auto", "off"]
    one = generate.parse(["--prompt", "x", "--method", "vanilla", "--lookup", "on"])
    with pytest.raises(ValueError, match="lookup: 'on'"):
        gen_config(one, one.method)
    with pytest.raises(SystemExit):
        generate.parse(["--prompt", "x", "--lookup", "maybe"])


@pytest.mark.parametrize("extra,needle", [
    (["--replay", "--replay-change", "seed"], "--replay-change seed needs --temperature > 0"),
    (["--replay-change", "twice"], "invalid choice: 'twice'"),
    (["--ratios", "duo/hf-pld"], "--ratios names methods that do not run: duo/hf-pld"),
    (["--replay", "--ratios", "duo/vanilla"], "do not run: duo/vanilla"),
])
def test_replay_and_ratio_options_are_checked_before_loading(capsys, tmp_path, extra, needle):
    argv = ["--questions", str(ROOT / "bench" / "copy_prompts.jsonl"), "--methods",
            "duo,vanilla", "--out", str(tmp_path / "o")] + extra
    with pytest.raises(SystemExit) as e:
        bench.main(argv)
    assert e.value.code == 2 and needle in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
