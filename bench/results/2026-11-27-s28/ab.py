"""Session 28's A/B runs (measure/ab.py: env_ab; Q, PER, REPS, TOK, ARMS, PAIR, OUT): an arm is
a benchmark method, method@label (the same method under another label: its own learning,
as a twin arm that measures the A/B's noise), or `duo@old`: duo with core/turns.py as at
23180c7 and no catch-up priced. The change it was measured against is kept
beside this script: `git apply` catch-up.patch (and prefill-rule.patch) before a run; at
23180c7 itself `duo@old` is `duo`."""
import os
import subprocess
import sys
import types

REPO = os.environ.get("REPO", "/work/main")
sys.path.insert(0, REPO)
import core.budget  # noqa: E402
import core.engine  # noqa: E402
import scripts.benchmark as bench  # noqa: E402
from measure.ab import env_ab  # noqa: E402
from models.loader import Pair  # noqa: E402

NEW = core.engine.turns_loop, getattr(core.budget.DraftBudget, "catch_up_s", None)
OLD = sys.modules["old_turns"] = types.ModuleType("old_turns")
SOURCE = subprocess.run(["git", "show", "23180c7:core/turns.py"], cwd=REPO, check=True,
                        capture_output=True, text=True).stdout
exec(compile(SOURCE, "old_turns", "exec"), OLD.__dict__)


def patch(pair, arm):
    old = arm.endswith("@old")
    core.engine.turns_loop = OLD.turns_loop if old else NEW[0]
    if NEW[1] is not None:
        core.budget.DraftBudget.catch_up_s = (lambda self, k: 0.0) if old else NEW[1]


env_ab(bench, Pair, patch, "duo,duo@old,duo-nolookup")
