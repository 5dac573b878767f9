"""Session 24's A/B runs (measure/ab.py: env_ab; Q, PER, TOK, ARMS, PAIR, OUT): the pair loaded
with the default options; an arm is a method (duo, sps, vanilla, nolookup: duo-nolookup) or
method@variant: `@apart`: duo's prefills one after the other for every prompt (the target's
on every core, then the draft's beside its decoding), as before session 24; the default
starts a short prompt's two prefills together (core/rounds.py: TOGETHER)."""
import os
import sys

sys.path.insert(0, os.environ.get("REPO", "/work/main"))
import core.rounds as rounds  # noqa: E402
import scripts.benchmark as bench  # noqa: E402
from measure.ab import env_ab  # noqa: E402
from models.loader import Pair  # noqa: E402

TOGETHER = rounds.TOGETHER


def patch(pair, arm: str) -> None:
    rounds.TOGETHER = 0 if arm.endswith("@apart") else TOGETHER


env_ab(bench, Pair, patch, "duo,duo@apart,sps,vanilla")
