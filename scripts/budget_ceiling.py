"""What the draft budget's cost model says `duo` can gain over `sps` on this machine: for each
acceptance rate, the best expected tokens/s of each method (each at its own best gamma and
thread split) from the pair's measured profiles, and `duo` with pre-drafting of rejection
outcomes (core/predraft.py) at a given hit share.

    .venv/bin/python scripts/budget_ceiling.py --pair smol-self
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.cli import add_model_args, fail, load_options, quiet_logs  # noqa: E402
from core.branching import step_ratio  # noqa: E402
from core.budget import MAX_GAMMA, DraftBudget  # noqa: E402
from models.pairs.catalog import PairError  # noqa: E402

ALPHAS = (0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.99, 0.999)


def with_predraft(profile, alpha: float, hit: float) -> tuple[str, float]:
    """duo's best expected tokens/s when a share `hit` of the rounds end in a rejection whose
    next draft was pre-drafted (one outcome per pre-drafted sequence, priced by the measured
    batched step): the gamma, outcomes and depth it takes, and the rate."""
    budget = DraftBudget(profile, overlap=True, alpha=alpha)
    rate, choice = budget.expected_rate(budget.gamma), f"{budget.gamma}, none"
    for n in range(1, 5):
        extra = step_ratio(profile.draft_step_s, 1 + n) - 1.0
        for depth in range(1, 9):
            for g in range(1, MAX_GAMMA + 1):
                r = budget.predraft_rate(g, hit * n / 4, depth, depth * extra * budget.draft_s(1))
                if r > rate:
                    rate, choice = r, f"{g}, {n} x {depth}"
    return choice, rate


def best(profile, overlap: bool, alpha: float) -> tuple[int, float]:
    """The gamma the budget picks at this acceptance, and its expected tokens/s."""
    budget = DraftBudget(profile, overlap=overlap, alpha=alpha)
    return budget.gamma, budget.expected_rate(budget.gamma)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_args(p)
    p.add_argument("--predraft-hit", type=float, default=0.3,
                   help="share of rounds ending in a pre-drafted rejection with 4 outcomes "
                        "(fewer outcomes: proportionally less)")
    args = p.parse_args(argv)
    quiet_logs()
    try:
        from models.loader import Pair
        pair = Pair(args.pair, load_options(args))
    except (PairError, ValueError, OSError) as e:
        fail(str(e))
    profiles = {m: pair.ensure_profile(m) for m in ("sps", "duo")}
    print("| acceptance | sps gamma | sps tok/s | duo gamma | duo tok/s | duo / sps | "
          f"duo+predraft gamma, outcomes x depth (hit {args.predraft_hit}) | tok/s | "
          "/ duo |")
    print("|---|---|---|---|---|---|---|---|---|")
    for a in ALPHAS:
        gs, rs = best(profiles["sps"], False, a)
        gd, rd = best(profiles["duo"], True, a)
        choice, rp = with_predraft(profiles["duo"], a, args.predraft_hit)
        print(f"| {a} | {gs} | {rs:.1f} | {gd} | {rd:.1f} | {rd / rs:.2f} | {choice} | "
              f"{rp:.1f} | {rp / rd:.2f} |")


if __name__ == "__main__":
    main()
