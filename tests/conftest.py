"""Shared fixtures: the real smol-self pair (loaded once per session) and the repo root."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# The eager target is the reference path; the compiled one has its own tests (compiling
# every start of the CLI and the app would take minutes on a CPU).
os.environ.setdefault("DUO_TARGET_COMPILE", "off")
os.environ.setdefault("DUO_TARGET_QUANT", "none")
import models  # noqa: E402,F401 - its OpenMP wait policy, before any test module loads torch


@pytest.fixture(scope="session")
def smol_pair():
    from models.loader import LoadOptions, Pair

    # the eager, unquantized reference path, float32 on the CPU even where cuda is present:
    # the exactness tests compare greedy output token for token (tests/test_gpu.py: cuda)
    pair = Pair("smol-self", LoadOptions(device="cpu", dtype="float32", target_compile="off",
                                         target_quant="none"))
    yield pair
    pair.close()


@pytest.fixture(scope="module")
def pair_with(smol_pair):
    """smol-self loaded with other LoadOptions; the budget reuses smol_pair's profile (the
    options' speed is not what these tests check)."""
    import models.profiler as profiler
    from models.loader import LoadOptions, Pair

    profile, pairs = smol_pair.ensure_profile("duo"), []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(profiler, "load_or_measure", lambda *a, **k: profile)

        def load(**options):
            options.setdefault("device", "cpu")  # exact on any machine (see smol_pair)
            options.setdefault("dtype", "float32")
            options.setdefault("target_compile", "off")
            options.setdefault("target_quant", "none")
            pairs.append(Pair("smol-self", LoadOptions(**options)))
            return pairs[-1]
        yield load
    for pair in pairs:
        pair.close()
