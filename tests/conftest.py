"""Shared fixtures: the real smol-self pair (loaded once per session) and the repo root."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


@pytest.fixture(scope="session")
def smol_pair():
    from models.loader import Pair

    pair = Pair("smol-self")
    yield pair
    pair.close()
