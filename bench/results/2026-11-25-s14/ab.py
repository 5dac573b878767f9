"""A/B of one duo change against duo without it, interleaved prompt by prompt, each arm on its own
learning; prints each prompt's walls and the median of (without / with). ATTR names the
LookupPolicy method patched off in the "alone" arm: beside_prefill (at commit 5839679, before
its revert: `ab_beside.log`, the "beside" arm is the change) or guess (`ab_guess.log`, the
"beside" arm is the one with guesses). PER prompts a category of bench/copy_prompts.jsonl."""
import os
import statistics
import sys

sys.path.insert(0, os.environ.get("REPO", "/work/main"))
from core import fusion  # noqa: E402
from models.loader import Pair  # noqa: E402
from scripts.benchmark import (forget, load_options, load_questions, method_config,  # noqa: E402
                               own_learning, parse, run_one)

ATTR = os.environ.get("ATTR", "guess")
OFF = {"beside_prefill": lambda *a: False, "guess": lambda *a: []}[ATTR]
args = parse(["--pair", os.environ.get("PAIR", "smol-self"), "--questions",
              os.environ.get("Q", "bench/copy_prompts.jsonl"), "--max-new-tokens",
              os.environ.get("TOK", "256"), "--methods", "duo", "--out", "/tmp/ab-out"])
pair = Pair(args.pair, load_options(args))
cfg, orig = method_config(args, "duo"), getattr(fusion.LookupPolicy, ATTR)
run_one(pair, pair.prompt_ids("Warm up: say one word."), cfg)
ratios, store = [], {}
for q in load_questions(args.questions, int(os.environ.get("PER", "1"))):
    ids, w = pair.prompt_ids(q["prompt"]), {}
    for arm in ("beside", "alone"):
        setattr(fusion.LookupPolicy, ATTR, orig if arm == "beside" else OFF)
        forget(pair)
        with own_learning(pair, store, arm):
            s = run_one(pair, ids, cfg)
        w[arm] = (s["wall_s"], s["new_tokens"], s.get("prefill_beside"), s["token_ids"])
    assert w["beside"][3] == w["alone"][3]
    ratios.append(w["alone"][0] / w["beside"][0])
    print(q["category"], "beside", round(w["beside"][0], 2), "rounds", w["beside"][2], "alone",
          round(w["alone"][0], 2), "tokens", w["beside"][1], "ratio", round(ratios[-1], 3),
          flush=True)
print("median alone/beside wall", round(statistics.median(ratios), 3))
