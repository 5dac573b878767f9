"""The benchmark's summary: totals and medians per method and category, the lookup's part,
ratios between methods (medians of per-prompt ratios), and the markdown tables."""
from __future__ import annotations

import statistics
from collections import defaultdict

REPLAY = "#"  # replay labels: "duo#1" (first pass), "duo#2" (second pass)


def aggregate(runs: list[dict], base: list[dict] | None) -> dict:
    """Totals over prompts; a prompt with no new tokens counts (its time too), and has no
    TTFT to take a median of."""
    tokens = sum(r["new_tokens"] for r in runs)
    wall = sum(r["wall_s"] for r in runs)
    drafted = sum(r["drafted"] for r in runs)
    rounds = sum(r["rounds"] for r in runs)
    out = {"prompts": len(runs), "new_tokens": tokens, "wall_s": wall, "rounds": rounds,
           "empty_outputs": sum(r["new_tokens"] == 0 for r in runs),
           "tokens_per_s": _ratio(tokens, wall),
           "tokens_per_s_median": _median([r["tokens_per_s"] for r in runs]),
           "ttft_s": _ttft(runs),
           "acceptance_rate": _ratio(sum(r["accepted"] for r in runs), drafted),
           "mean_accepted_per_round": _ratio(sum(r["accepted"] for r in runs), rounds),
           "overlap_efficiency": min(1.0, _ratio(sum(r.get("overlap_busy_s", 0.0) for r in runs),
                                                 sum(r.get("round_wall_s", 0.0) for r in runs))),
           "draft_busy_s": sum(r.get("draft_busy_s", 0.0) for r in runs),
           "target_busy_s": sum(r.get("target_busy_s", 0.0) for r in runs),
           "gammas_used": _merge(r.get("gammas_used", {}) for r in runs),
           "seq_hist": _merge(r.get("seq_hist", {}) for r in runs),
           **_predraft(runs), **_lookup(runs)}
    if any("stop_and_valid" in r for r in runs):
        out["stop_and_valid_json"] = sum(r.get("stop_and_valid", False) for r in runs)
    if base:
        b_tok, b_wall = sum(r["new_tokens"] for r in base), sum(r["wall_s"] for r in base)
        out["speedup"] = _ratio(out["tokens_per_s"], _ratio(b_tok, b_wall))
        out["speedup_median"] = _median(per_prompt(runs, base))
        out["ttft_ratio"] = _ratio(out["ttft_s"], _ttft(base))
        out["identical_to_vanilla"] = sum(r["token_ids"] == v["token_ids"]
                                          for r, v in zip(runs, base))
    return out


def per_prompt(runs: list[dict], base: list[dict]) -> list[float]:
    """tokens/s of each prompt over the base's on the same prompt (prompts the base gave no
    tokens for are left out)."""
    return [r["tokens_per_s"] / b["tokens_per_s"] for r, b in zip(runs, base)
            if b["tokens_per_s"]]


def _lookup(runs: list[dict]) -> dict:
    """The lookup's part (engine stats "lookup"): rounds it won, its acceptance and its share
    of the new tokens; absent for methods that never report it."""
    parts = [r["lookup"] for r in runs if isinstance(r.get("lookup"), dict)]
    if not parts:
        return {}
    total = {k: sum(p.get(k, 0) for p in parts) for k in ("rounds", "won", "memory",
                                                          "proposed", "accepted")}
    emitted = sum(r["lookup"].get("share", 0.0) * r["new_tokens"] for r in runs
                  if isinstance(r.get("lookup"), dict))
    return {"lookup": {**total, "acceptance": _ratio(total["accepted"], total["proposed"]),
                       "share": _ratio(emitted, sum(r["new_tokens"] for r in runs))}}


def _predraft(runs: list[dict]) -> dict:
    """Pre-drafting (duo): outcomes per pre-drafting round, and the share of rejections whose
    next draft was ready (each one a plain step removed)."""
    total = {k: sum(r.get(k, 0) for r in runs) for k in (
        "predraft_rounds", "predraft_outcomes", "rejections", "predraft_hits",
        "rejection_idle_s")}
    return {**total, "predraft_per_round": _ratio(total["predraft_outcomes"],
                                                  total["predraft_rounds"]),
            "predraft_hit_rate": _ratio(total["predraft_hits"], total["rejections"])}


def _ratio(a: float, b: float) -> float:
    return a / b if b else 0.0


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else 0.0


def _ttft(runs: list[dict]) -> float:
    """Median TTFT over the prompts that gave a token (0.0 when none did)."""
    return _median([r["ttft_s"] for r in runs if r["new_tokens"] > 0])


def _merge(dicts) -> dict:
    total: dict = defaultdict(int)
    for d in dicts:
        for k, v in d.items():
            total[str(k)] += v
    return dict(sorted(total.items(), key=lambda kv: int(kv[0]) if kv[0].isdigit() else 0))


def _by_category(runs: list[dict]) -> dict[str, list]:
    by: dict[str, list] = {}
    for r in runs:
        by.setdefault(r["category"], []).append(r)
    return dict(sorted(by.items()))


def summarize(results: dict[str, list]) -> dict:
    """Per method; NAME-json methods are compared with vanilla-json, the others with vanilla."""
    out = {}
    for m, runs in results.items():
        base = results.get("vanilla-json" if m.endswith("-json") else "vanilla")
        bby = _by_category(base) if base else {}
        out[m] = {"overall": aggregate(runs, base),
                  "categories": {c: aggregate(rs, bby.get(c))
                                 for c, rs in _by_category(runs).items()}}
    return out


def ratio_pairs(labels: list[str], asked: str = "") -> list[tuple[str, str]]:
    """Which methods to compare: `asked` ("duo/duo-nolookup,duo/vanilla"), else each replay
    method's second pass over its first, else the first method over each of the others."""
    if asked:
        pairs = [tuple(p.split("/", 1)) for p in asked.split(",") if p.strip()]
        bad = [f"{a}/{b}" for a, b in pairs if a not in labels or b not in labels]
        if bad or any(len(p) != 2 for p in pairs):
            raise ValueError(f"--ratios names methods that do not run: {', '.join(bad)}; "
                             f"running: {', '.join(labels)}")
        return pairs
    if not labels:
        return []
    second = [m for m in labels if m.endswith(REPLAY + "2")]
    if second:
        return [(m, m[:-1] + "1") for m in second if m[:-1] + "1" in labels]
    return [(labels[0], m) for m in labels[1:]]


def ratios(results: dict[str, list], pairs: list[tuple[str, str]]) -> dict:
    """"a / b": the median over prompts of a's tokens/s over b's, overall and per category
    (the medians a goal such as "duo at least 1.3x duo-nolookup" reads)."""
    out = {}
    for a, b in pairs:
        ra, rb = results[a], results[b]
        cats = {c: per_prompt(rs, _by_category(rb).get(c, []))
                for c, rs in _by_category(ra).items()}
        out[f"{a} / {b}"] = {"overall": _median(per_prompt(ra, rb)),
                             "categories": {c: _median(v) for c, v in cats.items()},
                             "lowest_category": min((_median(v) for v in cats.values()),
                                                    default=0.0)}
    return out


def markdown(summary: dict, ratio_table: dict | None = None) -> str:
    rows = ["| method | category | tokens/s | median tokens/s | speed-up | TTFT s | acceptance"
            " | accepted/round | overlap | lookup share, acceptance, rounds won |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for m, s in summary.items():
        for cat, st in list(s["categories"].items()) + [("**overall**", s["overall"])]:
            rows.append(f"| {m} | {cat} | {st['tokens_per_s']:.1f} | "
                        f"{st.get('tokens_per_s_median', 0.0):.1f} | {_speedup(st)}"
                        f" | {st['ttft_s']:.3f} | {st['acceptance_rate']:.2f}"
                        f" | {st['mean_accepted_per_round']:.2f} | {st['overlap_efficiency']:.2f}"
                        f" | {_lookup_cell(st)} |")
    for m, s in summary.items():
        st = s["overall"]
        if "stop_and_valid_json" in st:
            rows.append(f"\n{m}: {st['stop_and_valid_json']} of {st['prompts']} ended with stop "
                        f"and valid JSON; {st.get('identical_to_vanilla', '-')} equal to "
                        "vanilla-json")
    return "\n".join(rows) + ("\n\n" + ratio_markdown(ratio_table) if ratio_table else "")


def _speedup(st: dict) -> str:
    return f"{st['speedup']:.2f}" if "speedup" in st else "—"  # — : no vanilla ran


def _lookup_cell(st: dict) -> str:
    lk = st.get("lookup")
    if not lk:
        return "—"
    how = f" ({lk['memory']} memory)" if lk.get("memory") else ""
    return (f"{100 * lk['share']:.0f}%, {lk['acceptance']:.2f}, "
            f"{lk['won']}{how} of {lk['rounds']}")


def ratio_markdown(table: dict) -> str:
    """Medians of per-prompt tokens/s ratios: overall and per category."""
    cats = sorted({c for r in table.values() for c in r["categories"]})
    rows = ["| ratio (median per prompt) | overall | " + " | ".join(cats) + " |",
            "|---|---|" + "---|" * len(cats)]
    for name, r in table.items():
        rows.append(f"| {name} | {r['overall']:.2f} | " + " | ".join(
            f"{r['categories'][c]:.2f}" if c in r["categories"] else "—" for c in cats) + " |")
    return "\n".join(rows)
