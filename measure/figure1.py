"""The paper's Figure 1 for a loaded pair: the draft's time for 8 tokens against the target's
verify of 8, by input length (scripts/benchmark.py writes it beside results.json)."""
from __future__ import annotations

from pathlib import Path


def figure1(pair, lengths: list[int], path: Path, title: str = "") -> dict:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from models.fit.profiler import draft_time, verify_time
    data = {"length": [], "draft_8_s": [], "verify_8_s": []}
    for n in lengths:
        ctx = [(i * 37) % 1000 + 100 for i in range(n)]
        data["length"].append(n)
        data["draft_8_s"].append(draft_time(pair.drafter, ctx, 8))
        data["verify_8_s"].append(verify_time(pair.target, ctx, 8))
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(lengths, [t * 1e3 for t in data["draft_8_s"]], "o-", label="draft: 8 tokens (CPU, llama.cpp)")
    ax.plot(lengths, [t * 1e3 for t in data["verify_8_s"]], "s-",
            label=f"target: verify 8 tokens ({pair.target.device_name()})")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("input length (tokens)")
    ax.set_ylabel("time (ms)")
    ax.set_title(f"{title}Draft vs verify time, {pair.spec.name}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return data
