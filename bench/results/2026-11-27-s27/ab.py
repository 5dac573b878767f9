"""Session 27's A/B runs (measure/ab.py: env_ab; Q, PER, TOK, ARMS, PAIR, OUT): the pair
loaded with the default options; an arm is a benchmark method: duo (its schedule priced,
core/turns.py), duo-overlap and duo-turns (held), duo-nolookup, sps, vanilla."""
import os
import sys

sys.path.insert(0, os.environ.get("REPO", "/work/main"))
import scripts.benchmark as bench  # noqa: E402
from measure.ab import env_ab  # noqa: E402
from models.loader import Pair  # noqa: E402

env_ab(bench, Pair, lambda pair, arm: None, "duo,duo-overlap,sps,vanilla")
