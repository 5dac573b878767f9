"""Session 23's A/B runs: the pair loaded with the default options; an arm is a method (duo,
sps, vanilla, nolookup: duo-nolookup) or method@variant: `@one`: the draft on its share of
the cores even alone (sps's turns, duo's chunk the target waits for), as before session 23.
Arms interleaved prompt by prompt, each on its own learning, the lookup memory emptied before
each run; walls against the first arm's, per prompt, medians. Env: Q, PER, TOK, ARMS, PAIR, OUT."""
import os
import sys
from dataclasses import replace

sys.path.insert(0, os.environ.get("REPO", "/work/main"))
from measure.ab import warm_run_summarize  # noqa: E402
from models.loader import Pair  # noqa: E402
from scripts.benchmark import (load_options, load_questions, method_config, parse,  # noqa: E402
                               run_one)

ARMS = os.environ.get("ARMS", "duo,duo@one,vanilla").split(",")
args = parse(["--pair", os.environ.get("PAIR", "smol-self"),
              "--questions", os.environ.get("Q", "bench/prompts.jsonl"),
              "--max-new-tokens", os.environ.get("TOK", "128"), "--methods", "duo",
              "--out", "/tmp/ab-out"])
pair = Pair(args.pair, load_options(args))
METHODS = {"nolookup": "duo-nolookup"}
cfgs = {arm: method_config(args, METHODS.get(arm.partition("@")[0], arm.partition("@")[0]))
        for arm in ARMS}
PLACED = pair.placement()  # as measured; `@one`: as if the draft were no faster alone
ONE = replace(PLACED, draft_alone=0)


def patch(arm: str) -> None:
    pair._placement = ONE if arm.endswith("@one") else PLACED


for arm in ARMS:
    patch(arm)
    run_one(pair, pair.prompt_ids("Warm up: say one word."), cfgs[arm])
warm_run_summarize(pair, load_questions(args.questions, int(os.environ.get("PER", "3"))), cfgs,
                   run_one, patch, ARMS[0], ARMS, os.environ.get("OUT", "/tmp/ab.json"))
