"""Benchmark methods side by side on Spec-Bench style prompts; writes DIR/results.json,
DIR/figure1.png and prints markdown tables (per method and category; ratios between methods).

Methods: vanilla, sps, duo, lookup (model-free drafts alone), plus duo variants: duo-single (one
sequence), duo-k2 / duo-k3 (always k sequences), duo-nopredraft (no pre-drafting of rejection
outcomes), duo-nolookup (no lookup drafts), the rejection sampler (sps-rejection,
duo-rejection; the others use --sampler), and peers on the same target: hf-assisted
(transformers assisted generate with the draft's PyTorch weights), hf-pld (prompt lookup),
hf-static (static cache, compiled where it runs), llamacpp (the target's GGUF alone),
llamacpp-lookup (the same with llama.cpp's prompt-lookup drafts).
NAME-json (vanilla-json, sps-json, duo-json): NAME under --response-format FILE (an OpenAI
response_format); compared with vanilla-json, and counted for finish `stop` with valid JSON.
Each measured run starts with the app's cross-request lookup memory empty, except under
--replay (docs/lookup.md)."""
from __future__ import annotations

import json
import platform
import sys
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.cli import (Parser, add_decoding_args, add_model_args, fail,  # noqa: E402
                     gen_config, load_options, numbers, quiet_logs)
from core.config import LOOKUP_METHODS  # noqa: E402 - --lookup applies to these
from core.engine import METHODS  # noqa: E402
from models.pairs.catalog import PairError, get_pair  # noqa: E402
from measure.bench_summary import (aggregate, markdown, ratio_pairs, ratios,  # noqa: E402,F401
                                   summarize)
from measure.peers import PEERS, PeerConfig, check, peer_config, run_peer  # noqa: E402
from measure.replay import (CHANGES, forget, own_learning, replay_config,  # noqa: E402
                            run_replay)
from measure.emulate import add_emulate_args, check_args, emulate_prompts  # noqa: E402
from measure.figure1 import figure1  # noqa: E402

VARIANTS = {"duo-single": {"multi_seq": False}, "duo-k2": {"static_k": 2},
            "duo-k3": {"static_k": 3}, "duo-rejection": {"sampler": "rejection"},
            "sps-rejection": {"method": "sps", "sampler": "rejection"},
            "duo-nopredraft": {"predraft": False}, "duo-nolookup": {"lookup": "off"}}


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
    p.add_argument("--ratios", default="", metavar="A/B,...",
                   help="method pairs to compare (median per-prompt tokens/s ratio); default: "
                        "the first method over each other one (--replay: pass 2 over pass 1)")
    p.add_argument("--replay", action="store_true",
                   help="send the question list twice in one process, the lookup memory kept "
                        "between the passes, with --replay-change between them")
    p.add_argument("--replay-change", choices=CHANGES, default="edit",
                   help="what pass 2 changes: edit (a sentence appended to each prompt) or "
                        "seed (another seed; needs --temperature > 0)")
    add_emulate_args(p)
    # an A/B of two methods: more passes over the prompts, runs that carry no learning between
    # prompts, and NAME@LABEL (NAME on learning of its own: its ratio to NAME is the A/B's noise)
    p.add_argument("--repeat", type=int, default=1, metavar="N",
                   help="go through the question list N times, interleaved as one list")
    p.add_argument("--fresh", action="store_true",
                   help="every run starts from the pair's learning after the warm-ups, nothing "
                        "carried from the method's earlier prompts")
    add_decoding_args(p)
    return p.parse_args(argv)


def load_questions(path: str, limit: int) -> list[dict]:
    """Questions in order, at most `limit` a category. A question's prompt is its first turn; with
    "answers" (the earlier turns' replies, written out) it is the conversation up to the turn after
    the last answer (Spec-Bench's second turns without answers are left out, as before)."""
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
            item = {"id": q["question_id"], "category": q["category"],
                    "prompt": _prompt(q["turns"], q.get("answers") or [])}
        except (ValueError, KeyError, IndexError, TypeError):
            raise ValueError(f"{path}:{n}: expected question_id, category, turns (and "
                             "answers: fewer than the turns)") from None
        if not limit or len(per_cat[item["category"]]) < limit:
            per_cat[item["category"]].append(item)
    if not per_cat:
        raise ValueError(f"no questions in '{path}'")
    return [q for qs in per_cat.values() for q in qs]


def _prompt(turns: list[str], answers: list[str]) -> str | list[dict]:
    """The first turn alone, or the turns and their given answers, then the next turn."""
    if not all(isinstance(t, str) for t in turns + answers) or len(answers) >= len(turns):
        raise ValueError("turns and answers are strings, fewer answers than turns")
    if not answers:
        return turns[0]
    out = []
    for question, answer in zip(turns, answers):
        out += [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
    return out + [{"role": "user", "content": turns[len(answers)]}]


def method_config(args, name: str):
    name = name.partition("@")[0]  # NAME@LABEL: NAME under a label of its own
    if name.endswith("-json"):
        return replace(method_config(args, name[:-5]), response_format=response_format(args))
    if name in PEERS:
        return peer_config(name, gen_config(args, "vanilla", lookup="auto"))
    base = name if name in METHODS else VARIANTS.get(name, {}).get("method", "duo")
    if name not in METHODS and name not in VARIANTS:
        known = ", ".join(list(METHODS) + list(VARIANTS) + list(PEERS))
        raise ValueError(f"unknown method '{name}'; known: {known}")
    cfg = gen_config(args, base, lookup=None if base in LOOKUP_METHODS else "auto")
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


def run_all(runs: dict, questions, raw: bool, log, save=None,
            fresh: bool = False) -> dict[str, list]:
    """runs: label -> (pair, GenConfig). Interleaved per prompt, so machine noise hits them
    alike; each run starts with the lookup memory empty (the method before it on the same
    prompt would otherwise have left its answer there) and from its own label's learning
    (`fresh`: from the pair's learning after the warm-ups). `save(results)` after each prompt:
    a run that dies part-way keeps what it measured."""
    warm_up(runs, raw)
    results: dict[str, list] = {label: [] for label in runs}
    learning: dict = {}  # label -> what its runs learned (measure/replay.py: own_learning)
    for i, q in enumerate(questions, 1):
        learning = {} if fresh else learning
        for label, (pair, cfg) in runs.items():
            forget(pair)
            with own_learning(pair, learning, label):
                s = run_one(pair, pair.prompt_ids(q["prompt"], raw=raw), cfg)
            s["category"], s["question_id"] = q["category"], q["id"]
            results[label].append(s)
        log(f"[{i}/{len(questions)}] {q['category']}: " + ", ".join(
            f"{label} {results[label][-1]['tokens_per_s']:.1f}" for label in runs) + " tok/s")
        if save is not None:
            save(results)
    return results


WARM_UP = "Warm up: say one word."


def warm_up(runs: dict, raw: bool) -> None:
    """One short run each (and the one-time budget profile); not measured."""
    for pair, cfg in runs.values():
        run_one(pair, pair.prompt_ids(WARM_UP, raw=raw),
                replace(cfg, max_new_tokens=min(16, cfg.max_new_tokens)))


def machine(pair, methods) -> dict:
    import torch
    from models.fit.profiler import cpu_name

    return {"platform": platform.platform(), "cpu": cpu_name(), "cores": pair.opts.cores,
            "torch": torch.__version__, "target_device": pair.target.device_name(),
            "target_dtype": pair.target.dtype, "target_path": pair.target.path,
            "target_compile": pair.target.compile_choice,
            "target_pack": pair.target.pack_choice,
            "threads": {m: method_threads(pair, m) for m in methods},
            "pair": pair.spec.name, "date": time.strftime("%Y-%m-%d %H:%M:%S")}


def method_threads(pair, name: str) -> dict:
    """The threads a method runs on: the pair's plan for the engine's methods (and their
    variants), every core for the peers (each runs alone: models/loader.py is not asked)."""
    base = name[:-5] if name.endswith("-json") else name
    return {"target": pair.opts.cores} if base in PEERS else pair.threads.to_dict()


def main(argv=None) -> None:
    args = parse(argv)
    quiet_logs()
    try:
        methods = [m.strip() for m in args.methods.split(",") if m.strip()]
        if not methods:
            raise ValueError("--methods names no method")
        for m in methods:
            cfg = method_config(args, m)
            if args.replay:
                replay_config(cfg, args.replay_change)
        pairs = ratio_pairs(labels(methods, args.replay), args.ratios)
        check_args(args, [method_config(args, m) for m in methods] if args.emulate else [],
                   [m for m in methods if m in PEERS or m.endswith("-json")])
        questions = load_questions(args.questions, args.limit_per_category) * repeats(args)
        lengths = numbers(args.figure1_lengths, "--figure1-lengths")
        get_pair(args.pair)
        from models.loader import Pair
        pair = Pair(args.pair, load_options(args))
        for m in methods:
            check(pair, m)
            if m.endswith("-json"):
                pair.check_format(response_format(args))
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
        emulation = (emulate_prompts(pair, args, [q["prompt"] for q in questions] + [WARM_UP], log)
                     if args.emulate else None)
    except (PairError, ValueError, OSError) as e:
        fail(str(e))
    runs = {m: (pair, method_config(args, m)) for m in methods}
    head = {"machine": machine(pair, methods), "pairs": pairs,
            "settings": {"max_new_tokens": args.max_new_tokens, "temperature": args.temperature,
                         "questions": args.questions, "prompts": len(questions),
                         "replay": args.replay_change if args.replay else None,
                         "repeat": args.repeat, "fresh": args.fresh},
            "emulation": emulation}
    save = lambda res: write_results(out, head, res, complete=False)  # noqa: E731
    if args.replay:
        warm_up(runs, args.raw)
        results = run_replay(runs, questions, args.raw, args.replay_change, run_one, log, save)
    else:
        results = run_all(runs, questions, args.raw, log, save=save, fresh=args.fresh)
    report = write_results(out, head, results, complete=True)  # before the figure
    title = f"{emulation['title']}: " if emulation else ""
    print(f"## {title}{pair.spec.name}, {len(questions)} prompts, {args.max_new_tokens} tokens\n",
          flush=True)
    print(markdown(report["methods"], report["ratios"]), flush=True)
    if lengths:
        report["figure1"] = figure1(pair, lengths, out / "figure1.png", title)
        (out / "results.json").write_text(json.dumps(report, indent=1))


def repeats(args) -> int:
    if args.repeat < 1:
        raise ValueError(f"--repeat must be at least 1, got {args.repeat}")
    return args.repeat


def labels(methods: list[str], replay: bool) -> list[str]:
    """The result labels: the methods, or each method's two replay passes."""
    return [f"{m}#{n}" for m in methods for n in (1, 2)] if replay else methods


def write_results(out: Path, head: dict, results: dict[str, list], complete: bool) -> dict:
    """DIR/results.json with what was measured so far (`complete`: every prompt ran), with
    the ratios between methods (head["pairs"], else ratio_pairs' default)."""
    done = min((len(r) for r in results.values()), default=0)
    cut = {m: r[:done] for m, r in results.items()}
    pairs = [(a, b) for a, b in head.get("pairs") or ratio_pairs(list(cut))
             if a in cut and b in cut]
    report = dict(head, methods=summarize(cut), ratios=ratios(cut, pairs),
                  complete=complete, prompts_done=done)
    tmp = out / "results.json.tmp"
    tmp.write_text(json.dumps(report, indent=1))
    tmp.replace(out / "results.json")
    return report


if __name__ == "__main__":
    main()
