"""Session 28's A/B of the budget's acceptance estimate (measure/ab.py: env_ab): `duo` learns
alpha as an ema of each round's pass rate (0.3 a round, core/budget.py); `duo@ratio` as the
ratio of passes to trials summed over the rounds, older rounds kept at KEEP each, the
carried alpha worth PRIOR tokens at a generation's start: a first-token rejection after long
passing chunks moves it less, a run of them as much."""
import os
import sys

sys.path.insert(0, os.environ.get("REPO", "/work/main"))
import core.budget  # noqa: E402
import scripts.benchmark as bench  # noqa: E402
from measure.ab import env_ab  # noqa: E402
from models.loader import Pair  # noqa: E402

KEEP, PRIOR = 0.7, 10.0
EMA = core.budget.DraftBudget.learn_alpha


def ratio(self, drafted: int, accepted: int) -> None:
    trials = accepted + (accepted < drafted)
    p, t = getattr(self, "_sums", (None, None))
    if p is None or abs(p / t - self.alpha) > 1e-9:  # alpha set from outside: a new start
        p, t = self.alpha * PRIOR, PRIOR
    p, t = p * KEEP + accepted, t * KEEP + trials
    self._sums, self.alpha = (p, t), p / t


def patch(pair, arm):
    core.budget.DraftBudget.learn_alpha = ratio if arm.endswith("@ratio") else EMA


env_ab(bench, Pair, patch, "duo,duo@ratio")
