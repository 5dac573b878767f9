"""Session 26's A/B runs (measure/ab.py: env_ab; Q, PER, TOK, ARMS, PAIR, OUT), the pair loaded
with the default options (the OpenMP threads spin briefly: models/__init__.py; the compiled
target holds duo's count and every core's). An arm is a method (duo, sps, vanilla, nolookup:
duo-nolookup) or method@one: the compiled target held at duo's thread count alone (as before
session 26). At commit 97752ba it also took @overlap: duo's rounds never in turns
(core/turns.py, reverted after; project-priced.log and project-turns.log)."""
import os
import sys

sys.path.insert(0, os.environ.get("REPO", "/work/main"))
import scripts.benchmark as bench  # noqa: E402
from measure.ab import env_ab  # noqa: E402
from models.loader import Pair  # noqa: E402

COUNTS: dict = {}


def patch(pair, arm: str) -> None:
    target = pair.target
    COUNTS.setdefault("both", target.graph_threads)
    target.graph_threads = COUNTS["both"][:1] if arm.endswith("@one") else COUNTS["both"]
    pair._placement = None  # computed again from the counts


env_ab(bench, Pair, patch, "duo,duo@one,sps,vanilla,vanilla@one")
