"""Forward time of the target paths (eager, static, compiled) by window size and filled
length: the cost must follow the tokens held, not the window. Every configuration is built
in one process and the repeats are interleaved; medians in ms. With --attention, the static
target's attention instead (packed SDPA against FlexAttention, models/target/flex.py) by span.

    .venv/bin/python scripts/window_bench.py --pair smol-self --out bench/results/2026-11-24-cpu-span
    .venv/bin/python scripts/window_bench.py --attention sdpa,flex --out bench/results/cpu-flex
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

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
    p.add_argument("--attention", default=None,
                   help="compare the static target's attentions instead, e.g. sdpa,flex")
    p.add_argument("--spans", default="256,512,1024,2048,4096,8192",
                   help="with --attention: the spans (length buckets) attended over")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--compile", choices=("on", "off"), default="on",
                   help="with --attention: the compiled step (on) or the eager one")
    p.add_argument("--tiny", action="store_true",
                   help="with --attention: a tiny random Llama, spans 256,512, uncompiled "
                        "(seconds; checks the script, not the speed)")
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


def attention_targets(args, chunks: list[int], spans: list[int]) -> dict:
    """One static target per attention, on the same weights (float32 on the CPU, bf16 on
    cuda), the window just holding the longest span."""
    from measure.gpu_bench import TINY, random_model
    from models.target.eager import DTYPES
    from models.target.static import StaticTarget

    dtype = "float32" if args.device == "cpu" else "bfloat16"
    name = "tiny" if args.tiny else str(converted_dir(target_source(get_pair(args.pair))[1]))
    out = {}
    for attention in args.attention.split(","):
        model = random_model(TINY, args.device, DTYPES[dtype]) if args.tiny else None
        out[attention] = StaticTarget(name, args.device, max(spans), dtype,
                                      compile=args.compile == "on", buckets=tuple(chunks),
                                      model=model, attention=attention)
    return out


def measure_attention(targets: dict, spans: list[int], chunks: list[int],
                      repeats: int) -> list[dict]:
    """Median ms of an n-token forward whose attention reads exactly `span` slots: the cache
    filled once, then rolled back to span - (n's padded chunk) before every forward."""
    any_target = next(iter(targets.values()))
    fills = {}
    for s in spans:
        for n in chunks:
            size = next(b for b in any_target.buckets if b >= n)
            if s not in any_target.spans:  # then span_for(fill + size) is s
                raise ValueError(f"span {s} is not one of the target's spans "
                                 f"{any_target.spans}")
            fills[s, n] = s - size
    for target in targets.values():
        target.rollback(0)
        target.logits([3 + i % 300 for i in range(max(fills.values()))], 1)  # in any vocab
        for (s, n), fill in fills.items():  # one untimed forward each (compiles, records)
            forward_s(target, fill, n)
    times: dict = {}
    for _ in range(repeats):
        for (s, n), fill in fills.items():
            for attention, target in targets.items():
                times.setdefault((attention, s, n), []).append(forward_s(target, fill, n))
    return [{"attention": a, "span": s, "chunk": n,
             "median_ms": round(statistics.median(ts) * 1e3, 2)}
            for (a, s, n), ts in times.items()]


def attention_markdown(rows: list[dict], device: str) -> str:
    """| span | tokens | ms per attention | ratio of each to the first |"""
    names = list(dict.fromkeys(r["attention"] for r in rows))
    ms = {(r["attention"], r["span"], r["chunk"]): r["median_ms"] for r in rows}
    head = (f"| span ({device}) | tokens | " + " | ".join(f"{a}, ms" for a in names)
            + "".join(f" | {a} / {names[0]}" for a in names[1:]) + " |")
    lines = [head, "|---" * (2 + 2 * len(names) - 1) + "|"]
    for s, n in sorted({(r["span"], r["chunk"]) for r in rows}):
        cells = [str(ms[a, s, n]) for a in names]
        cells += [f"{ms[a, s, n] / ms[names[0], s, n]:.2f}" for a in names[1:]]
        lines.append(f"| {s} | {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def attention_main(args, ints) -> None:
    chunks = ints(args.chunks)
    spans = [256, 512] if args.tiny else ints(args.spans)
    if args.tiny:
        args.compile = "off"
    targets = attention_targets(args, chunks, spans)
    rows = measure_attention(targets, spans, chunks, args.repeats)
    table = attention_markdown(rows, args.device)
    print(table)
    for target in targets.values():
        target.close()
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "attention.json").write_text(json.dumps(rows, indent=1))
        (out / "attention.md").write_text(table + "\n")


def main(argv=None) -> None:
    args = parse(argv)
    ints = lambda s: [int(x) for x in s.split(",")]  # noqa: E731
    if args.attention:
        return attention_main(args, ints)
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
