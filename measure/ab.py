"""A/B runs of one code change: arms (a method each, some with the change patched out) run
interleaved prompt by prompt on one pair, each arm on its own learning and with the lookup
memory emptied before each run; walls compared per prompt against a reference arm (the
texts are equal, so a wall ratio is a speed ratio). The A/B scripts in bench/results use it."""
from __future__ import annotations

import json
import os
import statistics

from measure.replay import forget, own_learning


def run_arms(pair, questions: list[dict], cfgs: dict, run, patch, ref: str,
             store: dict | None = None, forget_memory: bool = True,
             fresh: bool = False) -> list[dict]:
    """One row per question: each arm's wall, tokens, rounds and lookup stats, and whether
    every arm's text equals `ref`'s. `run(pair, ids, cfg)` -> stats (the benchmark's
    run_one); `patch(arm)` sets the code the arm runs before its run; `store`: each arm's
    learning, carried on from an earlier call; `forget_memory` False: the lookup memory is
    the patch's to set (a replay keeps it); `fresh`: every run starts from the pair's own
    learning (none carried from the arm's earlier prompts: the arms' learned budgets
    cannot drift apart). Prints each row."""
    store, rows = {} if store is None else store, []
    for q in questions:
        ids, out = pair.prompt_ids(q["prompt"]), {}
        store = {} if fresh else store
        for arm, cfg in cfgs.items():
            patch(arm)
            if forget_memory:
                forget(pair)
            with own_learning(pair, store, arm):
                s = run(pair, ids, cfg)
            out[arm] = {"wall_s": s["wall_s"], "new_tokens": s["new_tokens"],
                        "rounds": s.get("rounds"), "lookup": s.get("lookup"),
                        "ids": s["token_ids"]}
        rows.append({"category": q["category"],
                     "identical": all(o["ids"] == out[ref]["ids"] for o in out.values()),
                     **{a: {k: v for k, v in o.items() if k != "ids"} for a, o in out.items()}})
        print(q["category"], {a: round(o["wall_s"], 2) for a, o in out.items()},
              "identical", rows[-1]["identical"], flush=True)
    return rows


def summarize(rows: list[dict], arms: list[str], ref: str, out: str) -> dict:
    """Per arm but `ref`, the median of (arm / ref) walls overall and per category; printed,
    and written to `out` (json) with the rows."""
    def median_ratio(arm, cat=None):
        return statistics.median(r[arm]["wall_s"] / r[ref]["wall_s"] for r in rows
                                 if cat in (None, r["category"]))

    cats = sorted({r["category"] for r in rows})
    summary = {arm: {"overall": median_ratio(arm), **{c: median_ratio(arm, c) for c in cats}}
               for arm in arms if arm != ref}
    for arm, by in summary.items():
        print(f"{arm} / {ref} wall (medians):", {k: round(v, 3) for k, v in by.items()})
    print("identical", sum(r["identical"] for r in rows), "of", len(rows))
    with open(out, "w") as f:
        json.dump({"rows": rows, "summary": summary}, f, indent=1)
    return summary


def warm_run_summarize(pair, questions: list[dict], cfgs: dict, run, patch, ref: str,
                       arms: list[str], out: str) -> dict:
    """An A/B script's whole run: one warm-up generation with `ref`'s settings, the arms
    interleaved (run_arms), their medians against `ref` (summarize)."""
    run(pair, pair.prompt_ids("Warm up: say one word."), cfgs[ref])
    return summarize(run_arms(pair, questions, cfgs, run, patch, ref), arms, ref, out)


ALIASES = {"nolookup": "duo-nolookup"}  # an arm's short name -> the benchmark's method


def env_ab(bench, pair_cls, patch, default_arms: str) -> dict:
    """A session's A/B script, set by its environment: PAIR (smol-self), Q (the questions,
    bench/prompts.jsonl), PER (a category, 3), REPS (times through them, 1), TOK (new
    tokens, 128), ARMS (`default_arms`), START (carried: each arm's learning carried from
    prompt to prompt; fresh: run_arms' `fresh`), OUT (/tmp/ab.json). An arm is a method
    (ALIASES) or method@variant: `patch(pair, arm)` sets the code the arm runs. `bench`:
    scripts/benchmark.py (passed in: it imports from here), `pair_cls`: models.loader.Pair.
    Each arm warms up once, with its code, before the interleaved runs (run_arms) and their
    medians against the first arm (summarize)."""
    env = os.environ.get
    arms, questions = env("ARMS", default_arms).split(","), env("Q", "bench/prompts.jsonl")
    args = bench.parse(["--pair", env("PAIR", "smol-self"), "--questions", questions,
                        "--max-new-tokens", env("TOK", "128"), "--methods", "duo",
                        "--out", "/tmp/ab-out"])
    pair = pair_cls(args.pair, bench.load_options(args))
    cfgs = {arm: bench.method_config(args, _method(arm)) for arm in arms}
    for arm in arms:
        patch(pair, arm)
        bench.run_one(pair, pair.prompt_ids("Warm up: say one word."), cfgs[arm])
    questions = bench.load_questions(questions, int(env("PER", "3"))) * int(env("REPS", "1"))
    start = env("START", "carried")
    if start not in ("carried", "fresh"):
        raise ValueError(f"START must be carried or fresh, got '{start}'")
    rows = run_arms(pair, questions, cfgs, bench.run_one, lambda arm: patch(pair, arm), arms[0],
                    fresh=start == "fresh")
    return summarize(rows, arms, arms[0], env("OUT", "/tmp/ab.json"))


def _method(arm: str) -> str:
    """The benchmark's method an arm runs: its name before any @variant, ALIASES applied."""
    method = arm.partition("@")[0]
    return ALIASES.get(method, method)
