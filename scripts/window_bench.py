"""Forward time of the target paths (eager, static, compiled) by window size and filled
length: the cost must follow the tokens held, not the window. Every configuration is built
in one process and the repeats are interleaved; medians in ms.

    .venv/bin/python scripts/window_bench.py --pair smol-self --out bench/results/cpu-span
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.sampling import SamplingConfig  # noqa: E402
from models.pairs.catalog import get_pair, target_source  # noqa: E402
from models.pairs.convert import converted_dir  # noqa: E402
from measure.gpu_bench import make_target  # noqa: E402


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pair", default="smol-self")
    p.add_argument("--windows", default="512,8192")
    p.add_argument("--fills", default="100,1000,4000")
    p.add_argument("--chunks", default="1,8")
    p.add_argument("--paths", default="eager,static,compiled")
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument("--out", default=None)
    return p.parse_args(argv)


def forward_s(target, fill: int, n: int) -> float:
    target.rollback(fill)
    t0 = time.perf_counter()
    target.score(list(range(200, 200 + n)), n, SamplingConfig())
    return time.perf_counter() - t0


def measure(targets: dict, fills: list[int], chunks: list[int], repeats: int) -> list[dict]:
    rows = []
    for fill in fills:
        live = {k: t for k, t in targets.items() if fill + max(chunks) <= t.n_ctx}
        times: dict = {}
        for target in live.values():  # fill once, then one untimed forward per chunk size
            target.rollback(0)
            target.logits([100 + i % 1000 for i in range(fill)], 1)
            for n in chunks:
                forward_s(target, fill, n)
        for _ in range(repeats):
            for (path, window), target in live.items():
                for n in chunks:
                    times.setdefault((path, window, n), []).append(forward_s(target, fill, n))
        rows += [{"path": p, "window": w, "fill": fill, "chunk": n,
                  "median_ms": round(statistics.median(ts) * 1e3, 1)}
                 for (p, w, n), ts in times.items()]
    return rows


def markdown(rows: list[dict]) -> str:
    chunks = sorted({r["chunk"] for r in rows})
    head = "| path | window | filled | " + " | ".join(f"{n} token(s), ms" for n in chunks)
    lines = [head + " |", "|---" * (3 + len(chunks)) + "|"]
    keys = sorted({(r["path"], r["window"], r["fill"]) for r in rows}, key=lambda k: (k[2], k[0], k[1]))
    for path, window, fill in keys:
        cells = [next(r["median_ms"] for r in rows if (r["path"], r["window"], r["fill"],
                                                       r["chunk"]) == (path, window, fill, n))
                 for n in chunks]
        lines.append(f"| {path} | {window} | {fill} | " + " | ".join(map(str, cells)) + " |")
    return "\n".join(lines)


def main(argv=None) -> None:
    args = parse(argv)
    ints = lambda s: [int(x) for x in s.split(",")]  # noqa: E731
    model_dir = converted_dir(target_source(get_pair(args.pair))[1])
    chunks = ints(args.chunks)
    targets = {(path, w): make_target(path, model_dir, "cpu", "float32", w, "none",
                                      tuple(chunks))
               for w in ints(args.windows) for path in args.paths.split(",")}
    rows = measure(targets, ints(args.fills), chunks, args.repeats)
    table = markdown(rows)
    print(table)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "forward.json").write_text(json.dumps(rows, indent=1))
        (out / "forward.md").write_text(table + "\n")


if __name__ == "__main__":
    main()
