"""Session 26's A/B runs (measure/ab.py: env_ab; Q, PER, TOK, ARMS, PAIR, OUT), the pair loaded
with the default options (the OpenMP threads spin briefly: models/__init__.py; the compiled
target holds duo's count and every core's). An arm is a method (duo, sps, vanilla, nolookup:
duo-nolookup) or method@variant: @overlap, duo's rounds never in turns (core/turns.py; as
before session 26); @one, the compiled target held at duo's thread count alone."""
import os
import sys

sys.path.insert(0, os.environ.get("REPO", "/work/main"))
import scripts.benchmark as bench  # noqa: E402
from core.turns import Turns  # noqa: E402
from measure.ab import env_ab  # noqa: E402
from models.loader import Pair  # noqa: E402

CHOOSE, COUNTS = Turns.choose, {}
NEVER = lambda self, now, n, priced: False  # noqa: E731


def patch(pair, arm: str) -> None:
    Turns.choose = NEVER if arm.endswith("@overlap") else CHOOSE
    target = pair.target
    COUNTS.setdefault("both", target.graph_threads)
    target.graph_threads = COUNTS["both"][:1] if arm.endswith("@one") else COUNTS["both"]
    pair._placement = None  # computed again from the counts


env_ab(bench, Pair, patch, "duo,duo@overlap,sps,vanilla")
