"""Benchmark methods side by side on Spec-Bench style prompts; writes DIR/results.json,
DIR/figure1.png and prints a markdown table.

Methods: vanilla, sps, duo, plus duo variants for the multi-sequence comparison:
duo-single (one sequence), duo-k2 / duo-k3 (always k sequences), duo-nopredraft (no
pre-drafting of rejection outcomes), the rejection sampler
(sps-rejection, duo-rejection; the others use --sampler), and peers on the same target:
hf-assisted (transformers assisted generate with the draft's PyTorch weights), hf-pld (prompt
lookup), hf-static (static cache, compiled where it runs), llamacpp (the target's GGUF alone).
NAME-json (vanilla-json, sps-json, duo-json): NAME under --response-format FILE (an OpenAI
response_format); compared with vanilla-json, and counted for finish `stop` with valid JSON."""
from __future__ import annotations

import json
import platform
import statistics
import sys
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.cli import (Parser, add_decoding_args, add_model_args, fail,  # noqa: E402
                     gen_config, load_options, quiet_logs)
from core.engine import METHODS  # noqa: E402
from models.pairs.catalog import PairError, get_pair  # noqa: E402
from measure.peers import PEERS, PeerConfig, check, peer_config, run_peer  # noqa: E402

VARIANTS = {"duo-single": {"multi_seq": False}, "duo-k2": {"static_k": 2},
            "duo-k3": {"static_k": 3}, "duo-rejection": {"sampler": "rejection"},
            "sps-rejection": {"method": "sps", "sampler": "rejection"},
            "duo-nopredraft": {"predraft": False}}


def parse(argv=None):
    p = Parser(description=__doc__)
    add_model_args(p)
    p.add_argument("--methods", default="vanilla,sps,duo")
    p.add_argument("--questions", required=True, help="JSONL: question_id, category, turns")
    p.add_argument("--limit-per-category", type=int, default=0, help="0 = all")
    p.add_argument("--out", required=True)
    p.add_argument("--raw", action="store_true")
    p.add_argument("--response-format", metavar="FILE",
                   help="JSON file with an OpenAI response_format, for the NAME-json methods")
    p.add_argument("--figure1-lengths", default="64,128,256,512,1024,2048",
                   help="input lengths for figure 1 ('' to skip)")
    add_decoding_args(p)
    return p.parse_args(argv)


def load_questions(path: str, limit: int) -> list[dict]:
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise ValueError(f"cannot read questions file '{path}': {e}") from None
    per_cat: dict[str, list] = defaultdict(list)
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            q = json.loads(line)
            item = {"id": q["question_id"], "category": q["category"], "prompt": q["turns"][0]}
        except (ValueError, KeyError, IndexError, TypeError):
            raise ValueError(f"{path}:{n}: expected question_id, category, turns") from None
        if not limit or len(per_cat[item["category"]]) < limit:
            per_cat[item["category"]].append(item)
    if not per_cat:
        raise ValueError(f"no questions in '{path}'")
    return [q for qs in per_cat.values() for q in qs]


def method_config(args, name: str):
    if name.endswith("-json"):
        return replace(method_config(args, name[:-5]), response_format=response_format(args))
    if name in PEERS:
        return peer_config(name, gen_config(args, "vanilla"))
    base = name if name in METHODS else VARIANTS.get(name, {}).get("method", "duo")
    if name not in METHODS and name not in VARIANTS:
        known = ", ".join(list(METHODS) + list(VARIANTS) + list(PEERS))
        raise ValueError(f"unknown method '{name}'; known: {known}")
    cfg = gen_config(args, base)
    for k, v in VARIANTS.get(name, {}).items():
        setattr(cfg, k, v)
    return cfg


def response_format(args) -> dict:
    if not args.response_format:
        raise ValueError("the NAME-json methods need --response-format FILE")
    try:
        return json.loads(Path(args.response_format).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ValueError(f"--response-format: {e}") from None


def valid_json(text: str, response_format: dict) -> bool:
    """The text parses as a JSON object with the schema's required keys (a light check; the
    grammar engine enforced the rest)."""
    try:
        out = json.loads(text)
    except ValueError:
        return False
    schema = (response_format.get("json_schema") or {}).get("schema") or {}
    return isinstance(out, dict) and all(k in out for k in schema.get("required", []))


def run_one(pair, ids, cfg) -> dict:
    """One cold generation: the caches from the method before would spare this one the
    prompt's prefills."""
    if isinstance(cfg, PeerConfig):
        return run_peer(pair, ids, cfg)
    stats, tokens = {}, []
    for ev in pair.generate(ids, replace(cfg, cache_prompt=False)):
        tokens += ev.tokens
        stats = ev.stats or stats
    stats["token_ids"] = tokens
    if getattr(cfg, "response_format", None):
        stats["stop_and_valid"] = (stats["stop_reason"] == "eos"
                                   and valid_json(pair.decode(tokens), cfg.response_format))
    return stats


def run_all(runs: dict, questions, raw: bool, log, save=None) -> dict[str, list]:
    """runs: label -> (pair, GenConfig). Interleaved per prompt, so machine noise hits them
    alike. `save(results)` after each prompt: a run that dies part-way keeps what it measured."""
    for pair, cfg in runs.values():  # warm-up (and the one-time budget profile)
        run_one(pair, pair.prompt_ids("Warm up: say one word.", raw=raw), _short(cfg))
    results: dict[str, list] = {label: [] for label in runs}
    for i, q in enumerate(questions, 1):
        for label, (pair, cfg) in runs.items():
            s = run_one(pair, pair.prompt_ids(q["prompt"], raw=raw), cfg)
            s["category"], s["question_id"] = q["category"], q["id"]
            results[label].append(s)
        log(f"[{i}/{len(questions)}] {q['category']}: " + ", ".join(
            f"{label} {results[label][-1]['tokens_per_s']:.1f}" for label in runs) + " tok/s")
        if save is not None:
            save(results)
    return results


def _short(cfg):
    return replace(cfg, max_new_tokens=min(16, cfg.max_new_tokens))


def aggregate(runs: list[dict], base: list[dict] | None) -> dict:
    """Totals over prompts; a prompt with no new tokens counts (its time too), and has no
    TTFT to take a median of."""
    tokens = sum(r["new_tokens"] for r in runs)
    wall = sum(r["wall_s"] for r in runs)
    drafted = sum(r["drafted"] for r in runs)
    rounds = sum(r["rounds"] for r in runs)
    out = {"prompts": len(runs), "new_tokens": tokens, "wall_s": wall,
           "empty_outputs": sum(r["new_tokens"] == 0 for r in runs),
           "tokens_per_s": _ratio(tokens, wall),
           "ttft_s": _ttft(runs),
           "acceptance_rate": _ratio(sum(r["accepted"] for r in runs), drafted),
           "mean_accepted_per_round": _ratio(sum(r["accepted"] for r in runs), rounds),
           "overlap_efficiency": _overlap(runs),
           "draft_busy_s": sum(r.get("draft_busy_s", 0.0) for r in runs),
           "target_busy_s": sum(r.get("target_busy_s", 0.0) for r in runs),
           "gammas_used": _merge(r.get("gammas_used", {}) for r in runs),
           "seq_hist": _merge(r.get("seq_hist", {}) for r in runs),
           **_predraft(runs)}
    if any("stop_and_valid" in r for r in runs):
        out["stop_and_valid_json"] = sum(r.get("stop_and_valid", False) for r in runs)
    if base:
        b_tok, b_wall = sum(r["new_tokens"] for r in base), sum(r["wall_s"] for r in base)
        out["speedup"] = _ratio(out["tokens_per_s"], _ratio(b_tok, b_wall))
        ratios = [r["tokens_per_s"] / v["tokens_per_s"] for r, v in zip(runs, base)
                  if v["tokens_per_s"]]
        out["speedup_median"] = statistics.median(ratios) if ratios else 0.0
        out["ttft_ratio"] = _ratio(out["ttft_s"], _ttft(base))
        out["identical_to_vanilla"] = sum(r["token_ids"] == v["token_ids"]
                                          for r, v in zip(runs, base))
    return out


def _predraft(runs: list[dict]) -> dict:
    """Pre-drafting (duo): outcomes per pre-drafting round, and the share of rejections whose
    next draft was ready (each one a plain step removed)."""
    total = {k: sum(r.get(k, 0) for r in runs) for k in (
        "predraft_rounds", "predraft_outcomes", "rejections", "predraft_hits",
        "rejection_idle_s")}
    return {**total, "predraft_per_round": _ratio(total["predraft_outcomes"],
                                                  total["predraft_rounds"]),
            "predraft_hit_rate": _ratio(total["predraft_hits"], total["rejections"])}


def _ratio(a: float, b: float) -> float:
    return a / b if b else 0.0


def _ttft(runs: list[dict]) -> float:
    """Median TTFT over the prompts that gave a token (0.0 when none did)."""
    times = [r["ttft_s"] for r in runs if r["new_tokens"] > 0]
    return statistics.median(times) if times else 0.0


def _overlap(runs: list[dict]) -> float:
    wall = sum(r.get("round_wall_s", 0.0) for r in runs)
    return min(1.0, sum(r.get("overlap_busy_s", 0.0) for r in runs) / wall) if wall else 0.0


def _merge(dicts) -> dict:
    total: dict = defaultdict(int)
    for d in dicts:
        for k, v in d.items():
            total[str(k)] += v
    return dict(sorted(total.items(), key=lambda kv: int(kv[0]) if kv[0].isdigit() else 0))


def summarize(results: dict[str, list]) -> dict:
    """Per method; NAME-json methods are compared with vanilla-json, the others with vanilla."""
    out = {}
    for m, runs in results.items():
        base = results.get("vanilla-json" if m.endswith("-json") else "vanilla")
        cats = sorted({r["category"] for r in runs})
        by = {c: [r for r in runs if r["category"] == c] for c in cats}
        bby = {c: [r for r in base if r["category"] == c] for c in cats} if base else {}
        out[m] = {"overall": aggregate(runs, base),
                  "categories": {c: aggregate(by[c], bby.get(c)) for c in cats}}
    return out


def markdown(summary: dict) -> str:
    rows = ["| method | category | tokens/s | speed-up | TTFT s | acceptance | accepted/round"
            " | overlap |", "|---|---|---|---|---|---|---|---|"]
    for m, s in summary.items():
        for cat, st in list(s["categories"].items()) + [("**overall**", s["overall"])]:
            rows.append(f"| {m} | {cat} | {st['tokens_per_s']:.1f} | {st.get('speedup', 1.0):.2f}"
                        f" | {st['ttft_s']:.3f} | {st['acceptance_rate']:.2f}"
                        f" | {st['mean_accepted_per_round']:.2f} | {st['overlap_efficiency']:.2f} |")
    for m, s in summary.items():
        st = s["overall"]
        if "stop_and_valid_json" in st:
            rows.append(f"\n{m}: {st['stop_and_valid_json']} of {st['prompts']} ended with stop "
                        f"and valid JSON; {st.get('identical_to_vanilla', '-')} equal to "
                        "vanilla-json")
    return "\n".join(rows)


def machine(pair, methods) -> dict:
    import torch
    return {"platform": platform.platform(), "cpu": _cpu(), "cores": pair.opts.cores,
            "torch": torch.__version__, "target_device": pair.target.device_name(),
            "target_dtype": pair.target.dtype, "target_path": pair.target.path,
            "target_compile": pair.target.compile_choice,
            "threads": {m: dict(zip(("draft", "target"), pair.threads_for(m.split("-")[0])))
                        for m in methods},
            "pair": pair.spec.name, "date": time.strftime("%Y-%m-%d %H:%M:%S")}


def _cpu() -> str:
    try:
        return next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                    if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor()


def figure1(pair, lengths: list[int], path: Path) -> dict:
    """The paper's Figure 1: draft time for 8 tokens vs target verification of 8 tokens."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from models.fit.profiler import draft_time, verify_time
    pair.apply_threads("duo")
    data = {"length": [], "draft_8_s": [], "verify_8_s": []}
    for n in lengths:
        ctx = [(i * 37) % 1000 + 100 for i in range(n)]
        data["length"].append(n)
        data["draft_8_s"].append(draft_time(pair.drafter, ctx, 8))
        data["verify_8_s"].append(verify_time(pair.target, ctx, 8))
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(lengths, [t * 1e3 for t in data["draft_8_s"]], "o-", label="draft: 8 tokens (CPU, llama.cpp)")
    ax.plot(lengths, [t * 1e3 for t in data["verify_8_s"]], "s-",
            label=f"target: verify 8 tokens ({pair.target.device_name()})")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("input length (tokens)")
    ax.set_ylabel("time (ms)")
    ax.set_title(f"Draft vs verify time, {pair.spec.name}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return data


def main(argv=None) -> None:
    args = parse(argv)
    quiet_logs()
    try:
        methods = [m.strip() for m in args.methods.split(",") if m.strip()]
        if not methods:
            raise ValueError("--methods names no method")
        for m in methods:
            method_config(args, m)
        questions = load_questions(args.questions, args.limit_per_category)
        lengths = parse_lengths(args.figure1_lengths)
        get_pair(args.pair)
        from models.loader import Pair
        pair = Pair(args.pair, load_options(args))
        for m in methods:
            check(pair, m)
            if m.endswith("-json"):
                pair.check_format(response_format(args))
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
    except (PairError, ValueError, OSError) as e:
        fail(str(e))
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    runs = {m: (pair, method_config(args, m)) for m in methods}
    head = {"machine": machine(pair, methods),
            "settings": {"max_new_tokens": args.max_new_tokens, "temperature": args.temperature,
                         "questions": args.questions, "prompts": len(questions)}}
    results = run_all(runs, questions, args.raw, log,
                      save=lambda res: write_results(out, head, res, complete=False))
    report = write_results(out, head, results, complete=True)  # before the figure
    print(markdown(report["methods"]), flush=True)
    if lengths:
        report["figure1"] = figure1(pair, lengths, out / "figure1.png")
        (out / "results.json").write_text(json.dumps(report, indent=1))


def write_results(out: Path, head: dict, results: dict[str, list], complete: bool) -> dict:
    """DIR/results.json with what was measured so far (`complete`: every prompt ran)."""
    done = min((len(r) for r in results.values()), default=0)
    report = dict(head, methods=summarize({m: r[:done] for m, r in results.items()}),
                  complete=complete, prompts_done=done)
    tmp = out / "results.json.tmp"
    tmp.write_text(json.dumps(report, indent=1))
    tmp.replace(out / "results.json")
    return report


def parse_lengths(text: str) -> list[int]:
    try:
        lengths = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--figure1-lengths must be numbers separated by commas, got "
                         f"'{text}'") from None
    if any(n < 1 for n in lengths):
        raise ValueError(f"--figure1-lengths must be positive, got '{text}'")
    return lengths


if __name__ == "__main__":
    main()
