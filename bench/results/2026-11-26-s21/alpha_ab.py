"""A/B of the budget's acceptance estimate (core/budget.py, DraftBudget.learn_alpha): smol-self
with the default options, arms interleaved prompt by prompt, each on its own learning:
`local` (duo as shipped), `round` (duo, the per-round update: each round's pass rate moves
alpha by 0.3, however few tokens it tried), `token` (duo, every tried token moves alpha by
TOKEN_W), `nolookup`, `sps`, `vanilla`. Env: Q, PER, TOK, ARMS, PAIR, OUT, TOKEN_W."""
import os
import sys

sys.path.insert(0, os.environ.get("REPO", "/work/main"))
from core.budget import DraftBudget  # noqa: E402
from measure.ab import warm_run_summarize  # noqa: E402
from models.loader import Pair  # noqa: E402
from scripts.benchmark import (load_options, load_questions, method_config, parse,  # noqa: E402
                               run_one)

ARMS = os.environ.get("ARMS", "local,round,token,vanilla").split(",")
TOKEN_W = float(os.environ.get("TOKEN_W", "0.1"))
args = parse(["--pair", os.environ.get("PAIR", "smol-self"),
              "--questions", os.environ.get("Q", "bench/prompts.jsonl"),
              "--max-new-tokens", os.environ.get("TOK", "128"), "--methods", "duo",
              "--out", "/tmp/ab-out"])
pair = Pair(args.pair, load_options(args))
shipped = DraftBudget.learn_alpha


def per_round(self, drafted, accepted):
    trials = accepted + (accepted < drafted)
    self.alpha += 0.3 * (accepted / trials - self.alpha)


def per_token(self, drafted, accepted):
    for ok in [1.0] * accepted + [0.0] * (accepted < drafted):
        self.alpha += TOKEN_W * (ok - self.alpha)


method = {"local": "duo", "round": "duo", "token": "duo", "nolookup": "duo-nolookup",
          "sps": "sps", "vanilla": "vanilla"}
cfgs = {arm: method_config(args, method[arm]) for arm in ARMS}
learn = {"round": per_round, "token": per_token}


def patch(arm: str) -> None:
    DraftBudget.learn_alpha = learn.get(arm, shipped)


warm_run_summarize(pair, load_questions(args.questions, int(os.environ.get("PER", "3"))), cfgs,
                   run_one, patch, ARMS[0], ARMS, os.environ.get("OUT", "/tmp/ab.json"))
