"""How much of a replay's second answer an ideal lookup could take from the first pass (the
memory) beyond what its own context holds: vanilla's answers to the 16 copy-heavy prompts and
to their edited form (measure/replay.py: edited), 128 tokens each. A token is covered where
a run of at least MIN tokens starting at it occurs in the source (greedy, left to right)."""
import json
import os
import sys

sys.path.insert(0, os.environ.get("REPO", "/work/main"))
import scripts.benchmark as bench  # noqa: E402
from measure.replay import edited  # noqa: E402
from models.loader import Pair  # noqa: E402

MIN = 4


def covered(out: list[int], source) -> list[bool]:
    """Per token of `out`: inside a run of >= MIN tokens found in source(i) (a list)."""
    mask, i = [False] * len(out), 0
    while i < len(out):
        src, best = source(i), 0
        for j in range(len(src)):
            n = 0
            while i + n < len(out) and j + n < len(src) and src[j + n] == out[i + n]:
                n += 1
            best = max(best, n)
        if best >= MIN:
            mask[i:i + best] = [True] * best
            i += best
        else:
            i += 1
    return mask


def main():
    args = bench.parse(["--pair", "smol-self", "--questions", "bench/copy_prompts.jsonl",
                        "--max-new-tokens", "128", "--methods", "vanilla", "--out", "/tmp/x"])
    pair = Pair(args.pair, bench.load_options(args))
    cfg = bench.method_config(args, "vanilla")
    rows = []
    for q in bench.load_questions("bench/copy_prompts.jsonl", 4):
        p1, p2 = pair.prompt_ids(q["prompt"]), pair.prompt_ids(edited(q["prompt"]))
        o1 = bench.run_one(pair, p1, cfg)["token_ids"]
        o2 = bench.run_one(pair, p2, cfg)["token_ids"]
        own = covered(o2, lambda i: p2 + o2[:i])
        both = covered(o2, lambda i: p2 + o2[:i] + [-1] + p1 + o1)
        first = covered(o1, lambda i: p1 + o1[:i])
        row = {"category": q["category"], "pass1_own": sum(first) / len(o1),
               "pass2_own": sum(own) / len(o2), "pass2_with_memory": sum(both) / len(o2),
               "same_answer": o1 == o2}
        rows.append(row)
        print(json.dumps(row), flush=True)
    out = os.environ.get("OUT", "/tmp/replay_oracle.json")
    with open(out, "w") as f:
        json.dump(rows, f, indent=1)
    for k in ("pass1_own", "pass2_own", "pass2_with_memory"):
        print(k, round(sum(r[k] for r in rows) / len(rows), 3))


main()
