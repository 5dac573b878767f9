"""scripts/benchmark.py's bookkeeping with made-up generations: a prompt with no new tokens
counts, and a run that dies part-way leaves results.json with what it measured."""
from __future__ import annotations

import json

import pytest

import scripts.benchmark as bench
from core.engine import GenConfig

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


def test_window_bench_writes_a_row_per_path_window_fill_and_chunk(tmp_path):
    """scripts/window_bench.py end to end at a tiny size (eager and static, no compile)."""
    import scripts.window_bench as wb

    wb.main(["--paths", "eager,static", "--windows", "512", "--fills", "40,300",
             "--chunks", "1,4", "--repeats", "1", "--out", str(tmp_path)])
    rows = json.loads((tmp_path / "forward.json").read_text())
    assert len(rows) == 2 * 2 * 2 and all(r["median_ms"] > 0 for r in rows)
    table = (tmp_path / "forward.md").read_text()
    assert "| static | 512 | 300 |" in table and table.count("\n") == 2 + 4


def test_load_bench_reports_each_process_against_its_fair_share(tmp_path):
    """scripts/load_bench.py: shares of idle speed and the fair share, ours and the others'
    (the competitors' logs are read only inside our time window)."""
    import scripts.load_bench as lb
    log = tmp_path / "gen1-0-duo.jsonl"
    log.write_text("\n".join(json.dumps(r) for r in [
        {"start": 0.0, "end": 5.0, "ttft_s": 0.1, "tokens_per_s": 99.0},  # before the window
        {"start": 11.0, "end": 12.0, "ttft_s": 0.4, "tokens_per_s": 10.0},
        {"start": 13.0, "end": 14.0, "ttft_s": 0.6, "tokens_per_s": 12.0}]))
    c = lb.Competitors.__new__(lb.Competitors)
    c.logs = [None, log]
    (speed,) = c.speeds(10.0, 20.0)
    assert speed == {"tokens_per_s": 11.0, "ttft_s": 0.5, "runs": 2, "process": "gen1-0-duo"}
    results = {"idle": {"ours": {"duo": {"tokens_per_s": 40.0, "ttft_s": 0.2}},
                        "competitors": []},
               "gen1": {"ours": {"duo": {"tokens_per_s": 16.0, "ttft_s": 0.3}},
                        "competitors": [speed]}}
    table = lb.report(results, {"duo": {"tokens_per_s": 22.0}})
    assert "| gen1 | ours: duo | 16.0 | 0.40 | 0.50 | 0.30 |" in table
    assert "| gen1 | gen1-0-duo | 11.0 | 0.50 | 0.50 | 0.50 |" in table
