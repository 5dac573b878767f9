"""A/B of the lookup bands' per-generation calibration (issue 30): `duo` as shipped (local: a
generation's own passes outweigh the carried band rates), `duo` with the carried rates alone
(carried: the ema the generations before taught, as before), `duo-nolookup`, `sps`, `vanilla`
(as ARMS names), interleaved prompt by prompt, each arm on its own learning, default options.
Prints each prompt's walls, then per arm the median of (arm / local) walls overall and per
category, and writes OUT (json). Env: Q, PER, TOK, ARMS, PAIR, OUT."""
import json
import os
import statistics
import sys

sys.path.insert(0, os.environ.get("REPO", "/work/main"))
from core import budget as B  # noqa: E402
from models.loader import Pair  # noqa: E402
from scripts.benchmark import (forget, load_options, load_questions, method_config,  # noqa: E402
                               own_learning, parse, run_one)

ARMS = os.environ.get("ARMS", "local,carried,nolookup").split(",")
args = parse(["--pair", os.environ.get("PAIR", "smol-self"), "--questions",
              os.environ.get("Q", "bench/copy_prompts.jsonl"), "--max-new-tokens",
              os.environ.get("TOK", "256"), "--methods", "duo", "--out", "/tmp/ab-out"])
pair = Pair(args.pair, load_options(args))
method = {"local": "duo", "carried": "duo", "nolookup": "duo-nolookup", "sps": "sps",
          "vanilla": "vanilla"}
cfgs = {arm: method_config(args, method[arm]) for arm in ARMS}
local_rate, carried_rate = B.LookupBands.rate, (lambda self, band: self.alpha[band])
run_one(pair, pair.prompt_ids("Warm up: say one word."), cfgs["local"])
store, rows = {}, []
for q in load_questions(args.questions, int(os.environ.get("PER", "3"))):
    ids, out = pair.prompt_ids(q["prompt"]), {}
    for arm, cfg in cfgs.items():
        B.LookupBands.rate = carried_rate if arm == "carried" else local_rate
        forget(pair)
        with own_learning(pair, store, arm):
            s = run_one(pair, ids, cfg)
        out[arm] = {"wall_s": s["wall_s"], "new_tokens": s["new_tokens"],
                    "rounds": s.get("rounds"), "lookup": s.get("lookup"),
                    "ids": s["token_ids"]}
    same = all(out[a]["ids"] == out["local"]["ids"] for a in ARMS)
    rows.append({"category": q["category"], "identical": same,
                 **{a: {k: v for k, v in out[a].items() if k != "ids"} for a in ARMS}})
    print(q["category"], {a: round(out[a]["wall_s"], 2) for a in ARMS}, "identical", same,
          flush=True)


def median_ratio(arm, cat=None):
    return statistics.median(r[arm]["wall_s"] / r["local"]["wall_s"] for r in rows
                             if cat in (None, r["category"]))


summary = {arm: {"overall": median_ratio(arm),
                 **{c: median_ratio(arm, c) for c in sorted({r["category"] for r in rows})}}
           for arm in ARMS if arm != "local"}
for arm, by in summary.items():
    print(f"{arm} / local wall (medians):", {k: round(v, 3) for k, v in by.items()})
print("identical", sum(r["identical"] for r in rows), "of", len(rows))
json.dump({"rows": rows, "summary": summary}, open(os.environ.get("OUT", "/tmp/ab.json"), "w"),
          indent=1)
