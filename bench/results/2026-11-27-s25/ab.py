"""Session 25's A/B runs, at commit 07b5eda (the target's second thread count, reverted after:
the arms' figures are in project.log) (measure/ab.py: env_ab; Q, PER, TOK, ARMS, PAIR, OUT): the pair loaded
with the default options; an arm is a method (duo, sps, vanilla, nolookup: duo-nolookup) or
method@one: the compiled CPU target held at duo's thread count alone, as before session 25
(every method ran it there); the default holds every core's count too (models/target/static.py:
graph_threads), so vanilla, sps and duo's solo lookup rounds take every core."""
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


env_ab(bench, Pair, patch, "duo,duo@one,vanilla,vanilla@one,sps,sps@one")
