"""Session 23's A/B runs (measure/ab.py: env_ab; Q, PER, TOK, ARMS, PAIR, OUT): the pair loaded
with the default options; an arm is a method (duo, sps, vanilla, nolookup: duo-nolookup) or
method@variant: `@one`: the draft on its share of the cores even alone (sps's turns, duo's
chunk the target waits for), as before session 23."""
import os
import sys
from dataclasses import replace

sys.path.insert(0, os.environ.get("REPO", "/work/main"))
import scripts.benchmark as bench  # noqa: E402
from measure.ab import env_ab  # noqa: E402
from models.loader import Pair  # noqa: E402

PLACED: dict = {}  # as measured; `one`: as if the draft were no faster alone


def patch(pair, arm: str) -> None:
    if not PLACED:  # the first call, before any run
        PLACED["measured"] = pair.placement()
        PLACED["one"] = replace(PLACED["measured"], draft_alone=0)
    pair._placement = PLACED["one" if arm.endswith("@one") else "measured"]


env_ab(bench, Pair, patch, "duo,duo@one,vanilla")
