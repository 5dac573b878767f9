"""Side-by-side A/B of the draft formats: one process loads the pair twice (`original` and
`q8_0` drafts) and runs every prompt with both, methods in turn, cold draft cache each run.

    .venv/bin/python scripts/draft_format_ab.py --pair smol-self --questions bench/prompts.jsonl
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.cli import fail, quiet_logs  # noqa: E402
from core.engine import GenConfig  # noqa: E402
from models.pairs.catalog import PairError  # noqa: E402
from scripts.benchmark import aggregate, load_questions, run_all  # noqa: E402

FORMATS = ("original", "q8_0")


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pair", default="smol-self")
    p.add_argument("--questions", required=True)
    p.add_argument("--limit-per-category", type=int, default=0)
    p.add_argument("--categories", default="", help="comma list; empty = all")
    p.add_argument("--methods", default="sps,duo")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--raw", action="store_true")
    return p.parse_args(argv)


def main(argv=None) -> None:
    args = parse(argv)
    quiet_logs()
    cats = {c for c in args.categories.split(",") if c}
    try:
        qs = [q for q in load_questions(args.questions, args.limit_per_category)
              if not cats or q["category"] in cats]
        from models.loader import LoadOptions, Pair
        pairs = {f: Pair(args.pair, LoadOptions(draft_format=f)) for f in FORMATS}
    except (PairError, ValueError, OSError) as e:
        fail(str(e))
    runs = {f"{fmt}/{m}": (pairs[fmt], GenConfig(method=m, max_new_tokens=args.max_new_tokens))
            for fmt in FORMATS for m in args.methods.split(",")}
    results = run_all(runs, qs, args.raw, lambda m: print(m, file=sys.stderr, flush=True))
    print("| draft/method | tok/s | median | acceptance |\n|---|---|---|---|")
    for label, stats in results.items():
        total = aggregate(stats, None)
        median = statistics.median(s["tokens_per_s"] for s in stats)
        print(f"| {label} | {total['tokens_per_s']:.1f} | {median:.1f} "
              f"| {total['acceptance_rate']:.3f} |")


if __name__ == "__main__":
    main()
