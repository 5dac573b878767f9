"""A/B of the lookup bands' per-generation calibration (issue 30): `duo` as shipped (local: a
generation's own passes outweigh the carried band rates), `duo` with the carried rates alone
(carried: the ema the generations before taught, as before), `duo-nolookup`, `sps`, `vanilla`
(as ARMS names), interleaved prompt by prompt, each arm on its own learning, default options.
Prints each prompt's walls, then per arm the median of (arm / local) walls overall and per
category, and writes OUT (json). Env: Q, PER, TOK, ARMS, PAIR, OUT."""
import os
import sys

sys.path.insert(0, os.environ.get("REPO", "/work/main"))
from core import budget as B  # noqa: E402
from measure.ab import warm_run_summarize  # noqa: E402
from models.loader import Pair  # noqa: E402
from scripts.benchmark import (load_options, load_questions, method_config, parse,  # noqa: E402
                               run_one)

ARMS = os.environ.get("ARMS", "local,carried,nolookup").split(",")
args = parse(["--pair", os.environ.get("PAIR", "smol-self"), "--questions",
              os.environ.get("Q", "bench/copy_prompts.jsonl"), "--max-new-tokens",
              os.environ.get("TOK", "256"), "--methods", "duo", "--out", "/tmp/ab-out"])
pair = Pair(args.pair, load_options(args))
method = {"local": "duo", "carried": "duo", "nolookup": "duo-nolookup", "sps": "sps",
          "vanilla": "vanilla"}
cfgs = {arm: method_config(args, method[arm]) for arm in ARMS}
local_rate, carried_rate = B.LookupBands.rate, (lambda self, band: self.alpha[band])


def patch(arm: str) -> None:
    B.LookupBands.rate = carried_rate if arm == "carried" else local_rate


warm_run_summarize(pair, load_questions(args.questions, int(os.environ.get("PER", "3"))), cfgs,
                   run_one, patch, "local", ARMS, os.environ.get("OUT", "/tmp/ab.json"))
