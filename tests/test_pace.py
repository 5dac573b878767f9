"""The pace per size class (models/fit/pace.py; its probing: tests/test_draft_alone.py), as
the CPU target uses it (its forwards on every core unless they ran slower at that size, on
both paths: tests/test_target_static.py), and the app's OpenMP wait default
(models/__init__.py)."""
from __future__ import annotations

import os
import subprocess
import sys

from models.fit.pace import Pace
from tests.conftest import ROOT


def test_each_chunk_size_class_is_timed_apart():
    pace = Pace()
    pace.observe(1, 0.070, 8)
    pace.observe(2, 0.045, 8)
    assert pace.prefers(2, 1, 8)
    pace.observe(2, 0.400, 8)  # another process took a core: 0.045 + 0.2 * 0.355 > 0.070
    assert not pace.prefers(2, 1, 8) and not pace.prefers(2, 1, 15)  # 8..15: one class
    assert pace.prefers(2, 1, 1) and pace.prefers(2, 1, 16)  # other classes: nothing timed
    assert pace.prefers(2, 1)  # the draft's calls: size 1


def test_forget_drops_one_count_s_time_at_a_size_class():
    pace = Pace()
    pace.observe(1, 0.050, 4)
    pace.observe(2, 9.0, 4)  # a compile's first call
    pace.observe(2, 0.1, 32)
    pace.forget(2, 5)  # 4..7: one class
    assert pace.ema == {(1, 3): 0.050, (2, 6): 0.1}


def _policy(env: dict) -> str:
    code = ("import os, models; "
            "print(os.environ.get('GOMP_SPINCOUNT'), os.environ['OMP_WAIT_POLICY'])")
    base = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**base, **env},
                          capture_output=True, text=True, check=True).stdout.strip()


def test_the_app_spins_briefly_unless_the_user_set_a_wait_policy():
    assert _policy({}) == "10000 PASSIVE"
    assert _policy({"OMP_WAIT_POLICY": "ACTIVE"}) == "None ACTIVE"
    assert _policy({"GOMP_SPINCOUNT": "0"}) == "0 PASSIVE"
