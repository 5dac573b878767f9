"""The lookup bands' calibration: each lookup token verified on the copy-heavy prompts (16, 256
tokens, duo, default options), the pass rate its band gave the pricing against how often it
passed (Q, TOK: the questions and new tokens). REPLAY=1: the replay with an edit instead (TOK
128), the bands counted in its second pass only, where the memory holds the first."""
import collections
import os
import sys

sys.path.insert(0, os.environ.get("REPO", "/work/main"))
import core.bands as bands  # noqa: E402
import scripts.benchmark as bench  # noqa: E402
from measure.replay import edited, forget  # noqa: E402
from models.loader import Pair  # noqa: E402

SEEN = collections.defaultdict(lambda: [0.0, 0, 0])  # band -> summed price, tokens, passed
OBSERVE = bands.LookupBands.observe


def observe(self, conf, accepted, source="context"):
    for i, c in enumerate(conf[:accepted + 1]):
        band = self.band(c, source)
        row = SEEN[band]
        row[0] += self.rate(band)
        row[1] += 1
        row[2] += i < accepted
    return OBSERVE(self, conf, accepted, source)


def main():
    replay = os.environ.get("REPLAY") == "1"
    q = os.environ.get("Q", "bench/copy_prompts.jsonl")
    args = bench.parse(["--pair", "smol-self", "--questions", q, "--max-new-tokens",
                        os.environ.get("TOK", "128" if replay else "256"), "--methods", "duo",
                        "--out", "/tmp/x"])
    pair = Pair(args.pair, bench.load_options(args))
    cfg = bench.method_config(args, "duo")
    bench.run_one(pair, pair.prompt_ids("Warm up: say one word."), cfg)
    questions = bench.load_questions(q, 4)
    if replay:  # pass 1 fills the memory, uncounted
        forget(pair)
        for x in questions:
            bench.run_one(pair, pair.prompt_ids(x["prompt"]), cfg)
    bands.LookupBands.observe = observe
    for x in questions:
        if not replay:
            forget(pair)
        s = bench.run_one(pair, pair.prompt_ids(edited(x["prompt"]) if replay else x["prompt"]),
                          cfg)
        print(x["category"], round(s["wall_s"], 2), flush=True)
    for band in sorted(SEEN):
        price, n, passed = SEEN[band]
        print("band", band, "tokens", n, f"priced {price / n:.2f} passed {passed / n:.2f}")


main()
