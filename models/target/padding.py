"""The CPU target's chunk padding: where a longer chunk verifies faster than a shorter one (CPU
matrix products cost more at some row counts than at a larger one), the shorter is run padded
to it (models/target/static.py, pad_chunks) and priced so (models/loader.py)."""
from __future__ import annotations

PAD_MARGIN = 0.05  # a chunk is padded to a longer length only when that verifies this much faster


def pad_plan(verify_s: list[float], lengths: range, margin: float = PAD_MARGIN) -> dict[int, int]:
    """{n: m}: the chunk lengths in `lengths` that verify faster padded to a longer m (also in
    `lengths`), from a verify curve measured at exact lengths (verify_s[n - 1]). CPU matrix
    products can cost more at some row counts than at a larger one (on a 2-core Intel Xeon, 13
    tokens 155 ms, 16 tokens 115): m is the cheapest longer length, taken when it is at least
    `margin` cheaper."""
    plan = {}
    for n in lengths:
        longer = [m for m in lengths if n < m <= len(verify_s)]
        if n > len(verify_s) or not longer:
            continue
        best = min(longer, key=lambda m: verify_s[m - 1])
        if verify_s[best - 1] <= (1 - margin) * verify_s[n - 1]:
            plan[n] = best
    return plan


def padded_curve(verify_s: list[float], plan: dict[int, int]) -> list[float]:
    """The verify curve as a target that pads by `plan` runs it."""
    return [verify_s[plan.get(n, n) - 1] for n in range(1, len(verify_s) + 1)]
