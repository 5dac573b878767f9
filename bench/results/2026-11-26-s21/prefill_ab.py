"""A/B of the draft's prompt prefill beside the target (core/rounds.py, prefill_beside): the
pair loaded with the default options, arms interleaved prompt by prompt, each on its own
learning, the lookup memory emptied before each run: `local` (duo as shipped: after the
target's prefill on every core, the draft prefills on its own thread while the target goes
on, a lookup round or a token at a time), `serial` (duo with the draft's prefill on every
core, the target waiting, as before), `nolookup`, `sps`, `vanilla`. Env: Q, PER, TOK, ARMS,
PAIR, OUT."""
import os
import sys

sys.path.insert(0, os.environ.get("REPO", "/work/main"))
import core.engine as engine  # noqa: E402
from core.rounds import prefill_draft  # noqa: E402
from measure.ab import warm_run_summarize  # noqa: E402
from models.loader import Pair  # noqa: E402
from scripts.benchmark import (load_options, load_questions, method_config, parse,  # noqa: E402
                               run_one)

ARMS = os.environ.get("ARMS", "local,serial,vanilla").split(",")
args = parse(["--pair", os.environ.get("PAIR", "smol-self"),
              "--questions", os.environ.get("Q", "bench/copy_prompts.jsonl"),
              "--max-new-tokens", os.environ.get("TOK", "256"), "--methods", "duo",
              "--out", "/tmp/ab-out"])
pair = Pair(args.pair, load_options(args))
method = {"local": "duo", "serial": "duo", "nolookup": "duo-nolookup",
          "nolookup-serial": "duo-nolookup", "sps": "sps", "vanilla": "vanilla"}
cfgs = {arm: method_config(args, method[arm]) for arm in ARMS}


beside = engine.prefill_beside


def serial(run, worker, budget):
    """As before: the draft's prefill with every core, the target waiting."""
    prefill_draft(run, worker.drafter, worker)
    return False
    yield  # a generator, as prefill_beside


def patch(arm: str) -> None:
    engine.prefill_beside = serial if arm.endswith("serial") else beside


warm_run_summarize(pair, load_questions(args.questions, int(os.environ.get("PER", "3"))), cfgs,
                   run_one, patch, ARMS[0], ARMS, os.environ.get("OUT", "/tmp/ab.json"))
