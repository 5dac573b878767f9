"""Speed beside a competing load: our methods idle, beside busy-loop processes, and beside
other generating processes (this script in `--compete` mode: `duo`, `vanilla` or `llamacpp`,
each loading its own pair and generating in a loop). Reports every process's tokens/s and
TTFT and the fair share (idle speed / (1 + competitors)); writes DIR/results.json.

  load_bench.py --pair smol-self --methods duo,vanilla --scenarios idle,busy1,gen1,gen2 \\
      --questions bench/prompts.jsonl --limit-per-category 1 --max-new-tokens 96 --out DIR
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.cli import (Parser, add_decoding_args, add_model_args, fail,  # noqa: E402
                     load_options, quiet_logs)
from scripts.benchmark import load_questions, method_config, run_one  # noqa: E402

SCENARIOS = {"idle": [], "busy1": ["busy"], "busy2": ["busy", "busy"], "gen1": ["duo"],
             "gen2": ["duo", "duo"], "vanilla1": ["vanilla"], "llama1": ["llamacpp"],
             "llama2": ["llamacpp", "llamacpp"]}
BUSY = [sys.executable, "-c", "while True: pass"]


def parse(argv=None):
    p = Parser(description=__doc__)
    add_model_args(p)
    p.add_argument("--methods", default="duo,vanilla")
    p.add_argument("--scenarios", default="idle,busy1,busy2,gen1,gen2,llama1")
    p.add_argument("--questions", default="bench/prompts.jsonl")
    p.add_argument("--limit-per-category", type=int, default=1)
    p.add_argument("--out", default="bench/out/load")
    p.add_argument("--compete", default=None, help="(internal) generate in a loop with this")
    p.add_argument("--log", default=None, help="(internal) the competitor's JSON lines")
    add_decoding_args(p)
    return p.parse_args(argv)


def compete(args) -> None:
    """Competitor mode: load once, then generate the prompts round and round, one JSON line
    per generation (its start and end, tokens/s, TTFT)."""
    from models.loader import Pair
    pair = Pair(args.pair, load_options(args))
    cfg = method_config(args, args.compete)
    prompts = [pair.prompt_ids(q["prompt"]) for q in load_questions(args.questions, 1)]
    with open(args.log, "a", buffering=1) as log:
        while True:
            for ids in prompts:
                t0 = time.time()
                s = run_one(pair, ids, cfg)
                log.write(json.dumps({"start": t0, "end": time.time(), "ttft_s": s["ttft_s"],
                                      "tokens_per_s": s["tokens_per_s"]}) + "\n")


class Competitors:
    """The scenario's other processes; `ready()` once each generating one has finished a
    generation (its load and warm-up are behind it)."""

    def __init__(self, kinds: list[str], argv: list[str], out: Path, tag: str):
        self.logs, self.procs = [], []
        for i, kind in enumerate(kinds):
            log = out / f"{tag}-{i}-{kind}.jsonl"
            log.unlink(missing_ok=True)
            cmd = BUSY if kind == "busy" else [sys.executable, __file__, *argv,
                                               "--compete", kind, "--log", str(log)]
            self.procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL,
                                               stderr=subprocess.DEVNULL))
            self.logs.append(None if kind == "busy" else log)

    def wait_ready(self, timeout_s: float = 600) -> None:
        end = time.time() + timeout_s
        while any(log and len(_lines(log)) < 1 for log in self.logs):
            if time.time() > end or any(p.poll() is not None for p in self.procs):
                raise RuntimeError("a competitor did not start generating")
            time.sleep(1)

    def speeds(self, t0: float, t1: float) -> list[dict]:
        """Per generating competitor: its generations that ran inside [t0, t1]."""
        out = []
        for log in filter(None, self.logs):
            runs = [r for r in _lines(log) if r["start"] >= t0 and r["end"] <= t1]
            out.append(_medians(runs) | {"process": log.stem})
        return out

    def stop(self) -> None:
        for p in self.procs:
            p.kill()
            p.wait()


def _lines(path: Path) -> list[dict]:
    if not path.exists():  # the competitor is still loading
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _medians(runs: list[dict]) -> dict:
    if not runs:
        return {"tokens_per_s": 0.0, "ttft_s": 0.0, "runs": 0}
    return {"tokens_per_s": statistics.median(r["tokens_per_s"] for r in runs),
            "ttft_s": statistics.median(r["ttft_s"] for r in runs), "runs": len(runs)}


def ours(pair, args, questions) -> tuple[dict, float, float]:
    """Our methods over the prompts, interleaved; medians per method and the time window."""
    cfgs = {m: method_config(args, m) for m in args.methods.split(",")}
    runs: dict[str, list] = {m: [] for m in cfgs}
    t0 = time.time()
    for q in questions:
        ids = pair.prompt_ids(q["prompt"])
        for m, cfg in cfgs.items():
            runs[m].append(run_one(pair, ids, cfg))
    return {m: _medians(r) for m, r in runs.items()}, t0, time.time()


def solo(args, kinds: set[str], out: Path) -> dict:
    """Each competitor kind alone: its idle speed, the base of its fair share."""
    speeds = {}
    for kind in sorted(kinds - {"busy"}):
        c = Competitors([kind], sys.argv[1:], out, "solo")
        c.wait_ready()
        t0 = time.time()
        time.sleep(60)
        speeds[kind] = c.speeds(t0, time.time())[0]
        c.stop()
    return speeds


def report(results: dict, solo_speeds: dict) -> str:
    """Markdown: each process's tokens/s, its share of its idle speed, the fair share."""
    rows = ["| scenario | process | tokens/s | share of idle | fair share | TTFT s |",
            "|---|---|---|---|---|---|"]
    idle = results["idle"]["ours"] if "idle" in results else {}
    for name, r in results.items():
        n = len(SCENARIOS[name])
        for m, s in r["ours"].items():
            base = idle.get(m, {}).get("tokens_per_s", 0.0)
            share = s["tokens_per_s"] / base if base else 0.0
            rows.append(f"| {name} | ours: {m} | {s['tokens_per_s']:.1f} | {share:.2f} |"
                        f" {1 / (1 + n):.2f} | {s['ttft_s']:.2f} |")
        for c in r["competitors"]:
            base = solo_speeds.get(c["process"].split("-")[-1], {}).get("tokens_per_s")
            share = c["tokens_per_s"] / base if base else 0.0
            rows.append(f"| {name} | {c['process']} | {c['tokens_per_s']:.1f} | {share:.2f} |"
                        f" {1 / (1 + n):.2f} | {c['ttft_s']:.2f} |")
    return "\n".join(rows)


def main(argv=None) -> None:
    args = parse(argv)
    quiet_logs()
    if args.compete:
        return compete(args)
    from models.loader import Pair
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        questions = load_questions(args.questions, args.limit_per_category)
        names = args.scenarios.split(",")
        if bad := [n for n in names if n not in SCENARIOS]:
            raise ValueError(f"unknown scenario(s) {bad}; known: {', '.join(SCENARIOS)}")
        pair = Pair(args.pair, load_options(args))
    except ValueError as e:
        fail(str(e))
    ours(pair, args, questions[:1])  # warm-up
    solo_speeds = solo(args, {k for n in names for k in SCENARIOS[n]}, out)
    results = {}
    for name in names:
        c = Competitors(SCENARIOS[name], sys.argv[1:], out, name)
        try:
            c.wait_ready()
            mine, t0, t1 = ours(pair, args, questions)
            results[name] = {"ours": mine, "competitors": c.speeds(t0, t1)}
        finally:
            c.stop()
        print(f"{name}: {results[name]}", file=sys.stderr)
    (out / "results.json").write_text(json.dumps({"solo": solo_speeds, **results}, indent=1))
    table = report(results, solo_speeds)
    (out / "results.md").write_text(table + "\n")
    print(table)


if __name__ == "__main__":
    main()
