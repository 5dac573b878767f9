"""A/B: duo with rounds beside the draft prefill vs duo without (patched), interleaved."""
import sys, json, os, statistics
sys.path.insert(0, "/work/main")
from scripts.benchmark import parse, load_questions, method_config, run_one, load_options, forget, own_learning
from models.loader import Pair
from core import fusion
args = parse(["--pair", os.environ.get("PAIR", "smol-self"), "--questions", os.environ.get("Q", "bench/copy_prompts.jsonl"),
              "--max-new-tokens", os.environ.get("TOK", "256"), "--methods", "duo", "--out", "/tmp/an/out"])
qs = load_questions(args.questions, int(os.environ.get("PER", "1")))
pair = Pair(args.pair, load_options(args))
orig = fusion.LookupPolicy.guess
cfg = method_config(args, "duo")
run_one(pair, pair.prompt_ids("Warm up: say one word."), cfg)
ratios, store = [], {}
for q in qs:
    ids = pair.prompt_ids(q["prompt"])
    w = {}
    for arm in ("beside", "alone"):
        fusion.LookupPolicy.guess = orig if arm == "beside" else (lambda *a: [])
        forget(pair)
        with own_learning(pair, store, arm):
            s = run_one(pair, ids, cfg)
        w[arm] = (s["wall_s"], s["new_tokens"], s.get("prefill_beside"), s["token_ids"])
    assert w["beside"][3] == w["alone"][3]
    ratios.append(w["alone"][0] / w["beside"][0])
    print(q["category"], "beside", round(w["beside"][0], 2), "rounds", w["beside"][2], "alone", round(w["alone"][0], 2), "tokens", w["beside"][1], "ratio", round(ratios[-1], 3), flush=True)
print("median alone/beside wall", round(statistics.median(ratios), 3))
