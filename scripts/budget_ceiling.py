"""What the draft budget's cost model says `duo` can gain over `sps` on this machine: for each
acceptance rate, the best expected tokens/s of each method (each at its own best gamma and
thread split) from the pair's measured profiles.

    .venv/bin/python scripts/budget_ceiling.py --pair smol-self
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.cli import add_model_args, fail, load_options, quiet_logs  # noqa: E402
from core.budget import DraftBudget  # noqa: E402
from models.catalog import PairError  # noqa: E402

ALPHAS = (0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.99, 0.999)


def best(profile, overlap: bool, alpha: float) -> tuple[int, float]:
    """The gamma the budget picks at this acceptance, and its expected tokens/s."""
    budget = DraftBudget(profile, overlap=overlap, alpha=alpha)
    return budget.gamma, budget.expected_rate(budget.gamma)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_args(p)
    args = p.parse_args(argv)
    quiet_logs()
    try:
        from models.loader import Pair
        pair = Pair(args.pair, load_options(args))
    except (PairError, ValueError, OSError) as e:
        fail(str(e))
    profiles = {m: pair.ensure_profile(m) for m in ("sps", "duo")}
    print("| acceptance | sps gamma | sps tok/s | duo gamma | duo tok/s | duo / sps |")
    print("|---|---|---|---|---|---|")
    for a in ALPHAS:
        gs, rs = best(profiles["sps"], False, a)
        gd, rd = best(profiles["duo"], True, a)
        print(f"| {a} | {gs} | {rs:.1f} | {gd} | {rd:.1f} | {rd / rs:.2f} |")


if __name__ == "__main__":
    main()
