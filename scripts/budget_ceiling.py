"""What the draft budget's cost model says `duo` can gain over `sps` on this machine: for each
acceptance rate, the best expected tokens/s of each method (each at its own best gamma and
thread split) from the pair's measured profiles, and `duo` with pre-drafting of rejection
outcomes (core/predraft.py) at a given hit share. Then lookup rounds (docs/lookup.md): their
ceiling on this machine, bounded by the verify's cost per chunk length, whether a chunk bucket
longer than 32 would pay, and the projection for a GPU target: the share of rounds that no
longer wait for the CPU draft.

    .venv/bin/python scripts/budget_ceiling.py --pair smol-self
    .venv/bin/python scripts/budget_ceiling.py --results bench/results/copy/results.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.cli import add_model_args, fail, load_options, quiet_logs  # noqa: E402
from core.branching import step_ratio  # noqa: E402
from core.bands import expected_tokens  # noqa: E402
from core.budget import MAX_GAMMA, DraftBudget, Profile  # noqa: E402
from core.fusion import LOOKUP_MAX  # noqa: E402
from models.pairs.catalog import PairError  # noqa: E402

ALPHAS = (0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.99, 0.999)
LOOKUP_ALPHAS = (1.0, 0.99, 0.95, 0.9, 0.8, 0.7)  # a lookup token's pass rate
LONGER = 64  # the longer chunk bucket weighed against LOOKUP_MAX
PAYS = 1.05  # a longer bucket pays when it is this much faster at perfect acceptance
GPU_VERIFY_MS = (3.0, 5.0, 8.0)  # a compiled 7-8B verify: int4 near 3 ms, bf16 near 7-8 ms
GPU_DRAFT_MS = (3.0, 4.5, 6.0)  # the CPU draft model a token beside it (SmolLM2-135M, H100 host)
GPU_SLOPE = 0.01  # a GPU verify grows ~1% a token of chunk up to 32 (memory-bound)
VERIFY_SIZES = (1, 2, 4, 8, 12, 16, 24, 33, 40, 48, 56, 65)  # timed here, interpolated between
CURVE_CTX = 256  # context tokens before the timed verifies


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


def lookup_rate(profile: Profile, alpha: float, cap: int) -> tuple[int, float]:
    """Lookup-only rounds (no draft model waited for): the chunk length up to `cap` with the
    most expected tokens/s when each lookup token passes with `alpha`, and that rate."""
    rates = [(expected_tokens([alpha] * n)[0] / profile.verify(n + 1), n)
             for n in range(1, cap + 1)]
    rate, n = max(rates)
    return n, rate


def verify_curve(pair, fallback: Profile) -> tuple[Profile, str]:
    """The target's verify time for 1..LONGER + 1 tokens on every core (the worker idle, as
    in lookup-only rounds), timed here at VERIFY_SIZES and interpolated; the sps profile
    (linear past its longest verify) where the target cannot take the longer chunks."""
    import numpy as np

    from models.fit.profiler import verify_time
    try:
        ctx = [(i * 37) % 1000 + 100 for i in range(CURVE_CTX)]
        times = [verify_time(pair.target, ctx, n) for n in VERIFY_SIZES]
    except Exception as e:  # noqa: BLE001 - a static target's buckets may stop at 32
        return fallback, (f"the sps profile, linear past {len(fallback.verify_s)} tokens "
                          f"(timing {LONGER} failed: {type(e).__name__})")
    curve = np.interp(range(1, LONGER + 2), VERIFY_SIZES, times).tolist()
    return Profile(fallback.draft_token_s, curve), (
        f"verify timed at {', '.join(map(str, VERIFY_SIZES))} tokens after {CURVE_CTX}")


def lookup_table(full: Profile, beside: Profile, duo: Profile, source: str) -> list[str]:
    """The ceiling of lookup rounds on this machine (`full`: the target on every core, the
    worker idle; `beside`: duo's split, the worker drafting beside), against vanilla and
    against duo whose model drafts passed as often as the lookup's."""
    plain = 1.0 / full.verify(1)
    rows = [f"\nLookup rounds on this machine (the target alone: {plain:.1f} tok/s; {source})"
            "\n", f"| lookup acceptance | chunk (cap {LOOKUP_MAX}) | tok/s, every core | "
            f"/ vanilla | / duo, model drafts as good | tok/s, duo's split | chunk (cap "
            f"{LONGER}) | tok/s | / cap {LOOKUP_MAX} |", "|---|---|---|---|---|---|---|---|---|"]
    for a in LOOKUP_ALPHAS:
        n, r = lookup_rate(full, a, LOOKUP_MAX)
        _, rb = lookup_rate(beside, a, LOOKUP_MAX)
        n2, r2 = lookup_rate(full, a, LONGER)
        duo_rate = best(duo, True, min(a, 0.999))[1]
        rows.append(f"| {a} | {n} | {r:.1f} | {r / plain:.2f} | {r / duo_rate:.2f} | "
                    f"{rb:.1f} | {n2} | {r2:.1f} | {r2 / r:.2f} |")
    rows.append("\n" + longer_verdict(full))
    return rows


def longer_verdict(profile: Profile) -> str:
    """Whether a chunk bucket of LONGER tokens would pay for lookup rounds here, and at
    which lookup acceptance."""
    gains = {a: lookup_rate(profile, a, LONGER)[1] / lookup_rate(profile, a, LOOKUP_MAX)[1]
             for a in LOOKUP_ALPHAS}
    pays = [a for a, g in gains.items() if g >= PAYS]
    if not pays:
        return (f"No longer chunk bucket pays: at every lookup acceptance the best chunk up "
                f"to {LONGER} tokens is within {PAYS - 1:.0%} of the best up to {LOOKUP_MAX}.")
    return (f"A {LONGER}-token chunk bucket pays for lookup rounds at a lookup acceptance of "
            f"{min(pays)} and above (" + ", ".join(f"{gains[a]:.2f}x at {a}" for a in pays)
            + f"); below, the best chunk stays under {LOOKUP_MAX + 1}. Worth it where the "
            f"lookup's measured acceptance reaches that: LOOKUP_MAX in core/fusion.py and "
            f"the static target's verify buckets.")


def gpu_profile(verify_ms: float, draft_ms: float) -> Profile:
    return Profile(draft_ms / 1e3, [verify_ms / 1e3 * (1 + GPU_SLOPE * i)
                                    for i in range(MAX_GAMMA + 1)], device="cuda")


def gpu_table(alpha: float, share: float, lookup_alpha: float, lookup_n: int) -> list[str]:
    """duo on a GPU target beside the CPU draft, with model drafts alone and with a `share`
    of the rounds taken by lookup drafts of `lookup_n` tokens (no CPU draft waited for)."""
    rows = [f"\nProjection for a GPU target (verify {GPU_SLOPE:.0%} longer a token of chunk; "
            f"model acceptance {alpha}; lookup wins {share:.0%} of the rounds with "
            f"{lookup_n} tokens at acceptance {lookup_alpha})\n",
            "| verify ms | draft ms/token | duo gamma | duo tok/s | model rounds waiting for "
            "the draft | with lookup tok/s | gain | rounds waiting for the draft |",
            "|---|---|---|---|---|---|---|---|"]
    for v in GPU_VERIFY_MS:
        for d in GPU_DRAFT_MS:
            b = DraftBudget(gpu_profile(v, d), overlap=True, alpha=alpha)
            g = b.gamma  # 0: no model draft pays, duo decodes plain (the target alone)
            rate = b.expected_rate(g) if g else b.plain_rate()
            waits = g > 0 and b.draft_s(g + 1) > b.verify_s(g + 1)
            t_model = expected_tokens([alpha] * g)[0] / rate  # a model round's mean time
            tokens_l = expected_tokens([lookup_alpha] * lookup_n)[0]
            mixed = ((share * tokens_l + (1 - share) * rate * t_model)
                     / (share * b.verify_s(lookup_n + 1) + (1 - share) * t_model))
            state = "all" if waits else "none" if g else "plain: no draft pays"
            rows.append(f"| {v:g} | {d:g} | {g} | {rate:.0f} | {state} | "
                        f"{mixed:.0f} | {mixed / rate:.2f} | "
                        f"{(1 - share) * 100 if waits else 0:.0f}% |")
    return rows


def measured(path: str) -> dict:
    """duo's lookup figures from a benchmark's results.json (a copy-heavy run): the share of
    rounds the lookup won, its acceptance and tokens per won round."""
    try:
        duo = json.loads(Path(path).read_text())["methods"]["duo"]["overall"]
        lk = duo["lookup"]
        return {"share": lk["won"] / max(duo["rounds"], 1), "lookup_alpha": lk["acceptance"],
                "lookup_n": max(1, round(lk["proposed"] / max(lk["won"], 1)))}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"--results {path}: no duo lookup figures ({e})") from None


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_args(p)
    p.add_argument("--predraft-hit", type=float, default=0.3,
                   help="share of rounds ending in a pre-drafted rejection with 4 outcomes "
                        "(fewer outcomes: proportionally less)")
    p.add_argument("--alpha", type=float, default=0.8, help="the model draft's acceptance")
    p.add_argument("--lookup-share", type=float, default=0.5,
                   help="GPU projection: share of the rounds lookup drafts win")
    p.add_argument("--lookup-alpha", type=float, default=0.9,
                   help="GPU projection: a lookup token's pass rate")
    p.add_argument("--lookup-tokens", type=int, default=16,
                   help="GPU projection: lookup tokens a won round")
    p.add_argument("--results", help="a copy-heavy benchmark's results.json: the three "
                                     "--lookup-* figures from its duo run")
    args = p.parse_args(argv)
    quiet_logs()
    try:
        from models.loader import Pair
        gpu = dict(share=args.lookup_share, lookup_alpha=args.lookup_alpha,
                   lookup_n=args.lookup_tokens)
        gpu.update(measured(args.results) if args.results else {})
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
    curve, source = verify_curve(pair, profiles["sps"])
    print("\n".join(lookup_table(curve, profiles["duo"], profiles["duo"], source)))
    print("\n".join(gpu_table(args.alpha, **gpu)))


if __name__ == "__main__":
    main()
