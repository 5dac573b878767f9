"""Session 21's A/B runs: the pair loaded with the default options, arms interleaved prompt by
prompt, each on its own learning, the lookup memory emptied before each run. `local`: duo as
shipped. `serial`: duo with the draft's prompt prefill on every core while the target waits,
as before core/rounds.prefill_beside. `exact`: duo with every chunk past 8 tokens at its own
length and priced as measured, as before models/target/padding.py. `token`: duo with the
budget's acceptance moved by TOKEN_W per tried token, not 0.3 per round (DraftBudget.learn_alpha;
not shipped). `nolookup` (duo-nolookup), `sps`, `vanilla`. Env: Q, PER, TOK, ARMS, PAIR, OUT,
TOKEN_W."""
import os
import sys

sys.path.insert(0, os.environ.get("REPO", "/work/main"))
import core.engine as engine  # noqa: E402
from core.budget import DraftBudget  # noqa: E402
from core.rounds import prefill_draft  # noqa: E402
from measure.ab import warm_run_summarize  # noqa: E402
from models.loader import Pair  # noqa: E402
from models.target.static import StaticTarget  # noqa: E402
from scripts.benchmark import (load_options, load_questions, method_config, parse,  # noqa: E402
                               run_one)

ARMS = os.environ.get("ARMS", "local,serial,vanilla").split(",")
TOKEN_W = float(os.environ.get("TOKEN_W", "0.1"))
args = parse(["--pair", os.environ.get("PAIR", "smol-self"),
              "--questions", os.environ.get("Q", "bench/copy_prompts.jsonl"),
              "--max-new-tokens", os.environ.get("TOK", "256"), "--methods", "duo",
              "--out", "/tmp/ab-out"])
pair = Pair(args.pair, load_options(args))
shipped = {"beside": engine.prefill_beside, "pad": StaticTarget.pad_chunks,
           "alpha": DraftBudget.learn_alpha}


def serial(run, worker, budget):
    """As before: the draft's prefill with every core, the target waiting."""
    prefill_draft(run, worker.drafter, worker)
    return False
    yield  # a generator, as prefill_beside


def unpadded(self, verify_s, threads):
    self.padding = {}
    return verify_s


def per_token(self, drafted, accepted):
    for ok in [1.0] * accepted + [0.0] * (accepted < drafted):
        self.alpha += TOKEN_W * (ok - self.alpha)


method = {"nolookup": "duo-nolookup", "sps": "sps", "vanilla": "vanilla"}
cfgs = {arm: method_config(args, method.get(arm, "duo")) for arm in ARMS}


def patch(arm: str) -> None:
    engine.prefill_beside = serial if arm == "serial" else shipped["beside"]
    StaticTarget.pad_chunks = unpadded if arm == "exact" else shipped["pad"]
    DraftBudget.learn_alpha = per_token if arm == "token" else shipped["alpha"]
    if arm == "vanilla":  # no profile of its own: the padding duo's profile sets
        pair.ensure_profile("duo")


warm_run_summarize(pair, load_questions(args.questions, int(os.environ.get("PER", "3"))), cfgs,
                   run_one, patch, ARMS[0], ARMS, os.environ.get("OUT", "/tmp/ab.json"))
