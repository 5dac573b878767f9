"""A/B of solo lookup rounds (issue 30): `duo` as shipped (solo), `duo` with solo rounds priced
out (beside: every lookup verified beside the drafting worker, as before), `duo-nolookup` and
`vanilla`, interleaved prompt by prompt, each arm on its own learning, default options
(COMPILE=auto). Prints each prompt's walls, then per arm the median of (arm / solo) walls
overall and per category, and writes OUT (json). Env: Q, PER, TOK, ARMS, PAIR, OUT."""
import os
import sys

sys.path.insert(0, os.environ.get("REPO", "/work/main"))
from core import budget as B  # noqa: E402
from measure.ab import warm_run_summarize  # noqa: E402
from models.loader import Pair  # noqa: E402
from scripts.benchmark import (load_options, load_questions, method_config, parse,  # noqa: E402
                               run_one)

ARMS = os.environ.get("ARMS", "solo,beside,nolookup,vanilla").split(",")
args = parse(["--pair", os.environ.get("PAIR", "smol-self"), "--questions",
              os.environ.get("Q", "bench/copy_prompts.jsonl"), "--max-new-tokens",
              os.environ.get("TOK", "256"), "--methods", "duo", "--out", "/tmp/ab-out",
              "--target-compile", os.environ.get("COMPILE", "auto")])
pair = Pair(args.pair, load_options(args))
method = {"solo": "duo", "beside": "duo", "nolookup": "duo-nolookup", "vanilla": "vanilla"}
cfgs = {arm: method_config(args, method[arm]) for arm in ARMS}
solo_on, solo_off = B.DraftBudget.solo, property(lambda self: False)


def patch(arm: str) -> None:
    B.DraftBudget.solo = solo_on if arm == "solo" else solo_off


warm_run_summarize(pair, load_questions(args.questions, int(os.environ.get("PER", "1"))), cfgs,
                   run_one, patch, "solo", ARMS, os.environ.get("OUT", "/tmp/ab.json"))
