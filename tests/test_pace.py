"""The compiled CPU target's pace (models/target/pace.py): a forward asked for more threads
than the first count takes them unless they ran slower at that size, and tries them again
now and then; and the app's OpenMP wait default (models/__init__.py)."""
from __future__ import annotations

import os
import subprocess
import sys

from models.target.pace import RETRY, Pace
from tests.conftest import ROOT


def test_the_more_threads_run_until_they_measure_slower_at_that_size():
    pace = Pace((1, 2))
    assert pace.pick(2, 8) == 2  # nothing measured yet
    pace.observe(1, 8, 0.070)
    pace.observe(2, 8, 0.045)
    assert pace.pick(2, 8) == 2 and pace.pick(1, 8) == 1
    pace.observe(2, 8, 0.400)  # another process took a core: 0.045 + 0.3 * 0.355 > 0.070
    assert pace.pick(2, 8) == 1
    assert pace.pick(2, 1) == 2  # another size class: its own times (none yet)


def test_a_slower_count_is_tried_again_every_retry_forwards():
    pace = Pace((1, 2))
    pace.observe(1, 16, 0.080)
    pace.observe(2, 16, 0.200)
    picks = [pace.pick(2, 16) for _ in range(2 * RETRY)]
    assert picks.count(2) == 2 and picks[RETRY - 1] == 2 and picks[2 * RETRY - 1] == 2
    for _ in range(5):  # the machine is free again: the tries measure it
        pace.observe(2, 16, 0.050)
    assert pace.pick(2, 16) == 2


def test_forget_drops_a_size_class_at_every_count():
    pace = Pace((1, 2))
    pace.observe(1, 4, 0.050)
    pace.observe(2, 4, 9.0)  # a compile's first call
    pace.observe(2, 32, 0.1)
    pace.forget(5)  # 4 and 5 share a class
    assert pace.seconds == {(2, 6): 0.1}


def _policy(env: dict) -> str:
    code = "import os, models; print(os.environ.get('GOMP_SPINCOUNT'), os.environ['OMP_WAIT_POLICY'])"
    base = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**base, **env},
                          capture_output=True, text=True, check=True).stdout.strip()


def test_the_app_spins_briefly_unless_the_user_set_a_wait_policy():
    assert _policy({}) == "10000 PASSIVE"
    assert _policy({"OMP_WAIT_POLICY": "ACTIVE"}) == "None ACTIVE"
    assert _policy({"GOMP_SPINCOUNT": "0"}) == "0 PASSIVE"
