"""A/B of the target's measured chunk padding (models/target/static.py, pad_chunks): the pair
loaded with the default options, arms interleaved prompt by prompt, each on its own learning,
the lookup memory emptied before each run: `local` (duo as shipped: chunk lengths the profile
prices higher than a longer one are padded to it, and priced so), `exact` (duo with every
chunk past 8 at its own length and priced as measured, as before), `nolookup`
(duo-nolookup), `sps`, `sps-exact`, `vanilla`. Env: Q, PER, TOK, ARMS, PAIR, OUT."""
import os
import sys

sys.path.insert(0, os.environ.get("REPO", "/work/main"))
from measure.ab import warm_run_summarize  # noqa: E402
from models.loader import Pair  # noqa: E402
from models.target.static import StaticTarget  # noqa: E402
from scripts.benchmark import (load_options, load_questions, method_config, parse,  # noqa: E402
                               run_one)

ARMS = os.environ.get("ARMS", "local,exact,vanilla").split(",")
args = parse(["--pair", os.environ.get("PAIR", "smol-self"),
              "--questions", os.environ.get("Q", "bench/copy_prompts.jsonl"),
              "--max-new-tokens", os.environ.get("TOK", "256"), "--methods", "duo",
              "--out", "/tmp/ab-out"])
pair = Pair(args.pair, load_options(args))
print("target:", pair.describe()["target"], flush=True)
shipped = StaticTarget.pad_chunks


def unpadded(self, verify_s, threads):
    self.padding = {}
    return verify_s


method = {"local": "duo", "exact": "duo", "nolookup": "duo-nolookup", "sps": "sps",
          "sps-exact": "sps", "vanilla": "vanilla"}
cfgs = {arm: method_config(args, method[arm]) for arm in ARMS}


def patch(arm: str) -> None:
    StaticTarget.pad_chunks = unpadded if arm.endswith("exact") else shipped
    if arm == "vanilla":  # no profile: the plan duo's measured (the target's, whatever ran)
        pair.ensure_profile("duo")


warm_run_summarize(pair, load_questions(args.questions, int(os.environ.get("PER", "3"))), cfgs,
                   run_one, patch, ARMS[0], ARMS, os.environ.get("OUT", "/tmp/ab.json"))
print("padding:", getattr(pair.target, "padding", None))
