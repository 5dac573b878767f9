import json, sys, time
sys.path.insert(0, "/work/main")
import scripts.benchmark as bench
from models.loader import Pair
args = bench.parse(["--pair", "smol-self", "--questions", "bench/copy_prompts.jsonl",
                    "--max-new-tokens", "256", "--methods", "vanilla", "--out", "/tmp/copy_answers_out"])
pair = Pair("smol-self", bench.load_options(args))
cfg = bench.method_config(args, "vanilla")
out = []
for q in bench.load_questions("bench/copy_prompts.jsonl", 0):
    ids = pair.prompt_ids(q["prompt"])
    s = bench.run_one(pair, ids, cfg)
    out.append({"category": q["category"], "prompt": ids, "out": s["token_ids"]})
    print(q["category"], len(ids), len(s["token_ids"]), round(s["wall_s"], 1), flush=True)
json.dump(out, open("/tmp/copy_ids.json", "w"))
