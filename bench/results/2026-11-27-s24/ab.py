"""Session 24's A/B runs: the pair loaded with the default options; an arm is a method (duo,
sps, vanilla, nolookup: duo-nolookup) or method@variant: `@apart`: duo's prefills one after
the other for every prompt (the target's on every core, then the draft's beside its decoding),
as before session 24; the default starts a short prompt's two prefills together
(core/rounds.py: TOGETHER). Arms interleaved prompt by prompt, each on its own learning, the
lookup memory emptied before each run; walls against the first arm's, per prompt, medians.
Env: Q, PER, TOK, ARMS, PAIR, OUT."""
import os
import sys

sys.path.insert(0, os.environ.get("REPO", "/work/main"))
import core.rounds as rounds  # noqa: E402
from measure.ab import warm_run_summarize  # noqa: E402
from models.loader import Pair  # noqa: E402
from scripts.benchmark import (load_options, load_questions, method_config, parse,  # noqa: E402
                               run_one)

ARMS = os.environ.get("ARMS", "duo,duo@apart,sps,vanilla").split(",")
args = parse(["--pair", os.environ.get("PAIR", "smol-self"),
              "--questions", os.environ.get("Q", "bench/prompts.jsonl"),
              "--max-new-tokens", os.environ.get("TOK", "128"), "--methods", "duo",
              "--out", "/tmp/ab-out"])
pair = Pair(args.pair, load_options(args))
METHODS = {"nolookup": "duo-nolookup"}
cfgs = {arm: method_config(args, METHODS.get(arm.partition("@")[0], arm.partition("@")[0]))
        for arm in ARMS}
TOGETHER = rounds.TOGETHER


def patch(arm: str) -> None:
    rounds.TOGETHER = 0 if arm.endswith("@apart") else TOGETHER


for arm in ARMS:
    patch(arm)
    run_one(pair, pair.prompt_ids("Warm up: say one word."), cfgs[arm])
warm_run_summarize(pair, load_questions(args.questions, int(os.environ.get("PER", "3"))), cfgs,
                   run_one, patch, ARMS[0], ARMS, os.environ.get("OUT", "/tmp/ab.json"))
