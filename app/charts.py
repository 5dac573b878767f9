"""The pictures: per-round draft/target timeline, accepted-length histogram, tokens/s over
the generation. Plain matplotlib Figures (no pyplot state), drawn from stats and the trace."""
from __future__ import annotations

from collections import Counter

import matplotlib

matplotlib.use("Agg")
from matplotlib.figure import Figure  # noqa: E402

DRAFT, TARGET, LOOKUP = "#4c8bf5", "#f08c2e", "#8e44ad"
LOOKUP_SOURCES = ("lookup", "fused")  # rounds whose draft came from the suffix index
MAX_ROUNDS = 300  # more are summarised in the title, not drawn


def _figure(height: float = 2.6) -> tuple[Figure, object]:
    fig = Figure(figsize=(7.5, height), dpi=90, layout="constrained")
    return fig, fig.add_subplot()


def _empty(ax, message: str) -> None:
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, color="#666")
    ax.set_xticks([])
    ax.set_yticks([])


def timeline(stats: dict | None) -> Figure:
    """Gantt-like: one row for the draft model, one for the target; each round's spans; a
    third row marks the rounds that verified a lookup draft (docs/lookup.md)."""
    fig, ax = _figure()
    rounds = (stats or {}).get("rounds_log") or []
    if not rounds:
        _empty(ax, "no draft rounds (vanilla decodes with the target only)"
               if stats else "the timeline appears after a generation")
        return fig
    shown = rounds[:MAX_ROUNDS]
    for r in shown:
        d0, d1 = (1000 * x for x in r["draft_span"])
        v0, v1 = (1000 * x for x in r["verify_span"])
        if d1 > d0:  # hatched: rejection outcomes were pre-drafted in the same batches
            ax.broken_barh([(d0, d1 - d0)], (1.1, 0.8), facecolors=DRAFT, edgecolors="white",
                           linewidth=0.4, hatch="//" if r.get("predrafted") else None)
        ax.broken_barh([(v0, v1 - v0)], (0.1, 0.8), facecolors=TARGET, edgecolors="white",
                       linewidth=0.4)
        if r.get("source") in LOOKUP_SOURCES:  # cross-hatched: fused with the model's chunk
            ax.broken_barh([(v0, v1 - v0)], (2.1, 0.8), facecolors=LOOKUP, edgecolors="white",
                           linewidth=0.4, hatch="xx" if r["source"] == "fused" else None)
        if len(shown) <= 40 and r["drafted"]:
            hit = "+" if r.get("predraft_hit") else ""
            ax.text((v0 + v1) / 2, 0.5, f"{r['accepted']}/{r['drafted']}{hit}", ha="center",
                    va="center", fontsize=7)
    looked = sum(r.get("source") in LOOKUP_SOURCES for r in rounds)
    rows = ["target\nverify", "draft"] + (["lookup"] if looked else [])
    ax.set_yticks([0.5, 1.5, 2.5][:len(rows)], rows)
    ax.set_xlabel("ms since the request")
    more = f" (first {MAX_ROUNDS} of {len(rounds)})" if len(rounds) > MAX_ROUNDS else ""
    lookup = (f"; lookup rounds: {looked} of {len(rounds)} (purple; cross-hatched: fused)"
              if looked else "")
    ax.set_title(f"{stats.get('method')}: draft vs target work per round{more}; "
                 f"labels: accepted/drafted (+: the rejection's pre-draft was ready; hatched: "
                 f"pre-drafting){lookup}", fontsize=9)
    ax.grid(axis="x", alpha=0.3)
    return fig


def accept_histogram(stats: dict | None) -> Figure:
    """How many draft tokens each round kept."""
    fig, ax = _figure()
    rounds = [r for r in (stats or {}).get("rounds_log") or [] if r["drafted"] > 0]
    if not rounds:
        _empty(ax, "no drafted rounds" if stats else "the histogram appears after a generation")
        return fig
    counts = Counter(r["accepted"] for r in rounds)
    top = max(max(counts), max(r["drafted"] for r in rounds))
    xs = list(range(top + 1))
    ax.bar(xs, [counts.get(x, 0) for x in xs], color=DRAFT)
    ax.set_xticks(xs)
    ax.set_xlabel("accepted draft tokens in a round")
    ax.set_ylabel("rounds")
    ax.set_title(f"acceptance length ({len(rounds)} rounds with a draft)", fontsize=9)
    return fig


def rate_over_time(points: list[tuple[float, int]], method: str = "") -> Figure:
    """Tokens/s so far and over the last few events, against time."""
    fig, ax = _figure()
    pts = [(t, n) for t, n in points if t > 0]
    if len(pts) < 2:
        _empty(ax, "tokens/s appears after a generation")
        return fig
    ts = [t for t, _ in pts]
    ax.plot(ts, [n / t for t, n in pts], color=TARGET, label="average so far")
    window = []
    for i, (t, n) in enumerate(pts):
        j = max(0, i - 4)
        t0, n0 = pts[j] if j < i else (0.0, 0)
        window.append((n - n0) / (t - t0) if t > t0 else 0.0)
    ax.plot(ts, window, color=DRAFT, alpha=0.7, label="last 5 events")
    ax.set_xlabel("seconds since the request")
    ax.set_ylabel("tokens/s")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title(f"{method}: tokens/s over the generation", fontsize=9)
    ax.grid(alpha=0.3)
    return fig
