"""The suffix index's costs (core/suffix.py), printed as a markdown table: building over a long
context, appending a token, proposing from the tail, and the memory at its cap.

    .venv/bin/python scripts/suffix_bench.py [--tokens 32768] [--vocab 49152] [--repeat 200]

Contexts are copy-heavy token streams (a random "document" repeated with edits), so proposals
walk long matches as they do on the workloads the lookup is for."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from core.suffix import ContextLookup, SuffixIndex, SuffixMemory  # noqa: E402


def copy_heavy(n: int, vocab: int, rng: np.random.Generator) -> np.ndarray:
    """n tokens: a 2k-token document, then copies of pieces of it with random edits."""
    doc = rng.integers(0, vocab, 2048)
    out, size = [doc], len(doc)
    while size < n:
        a = int(rng.integers(0, len(doc) - 256))
        piece = doc[a:a + int(rng.integers(32, 256))].copy()
        piece[rng.random(len(piece)) < 0.05] = rng.integers(0, vocab)
        out += [piece, rng.integers(0, vocab, 8)]
        size += len(piece) + 8
    return np.concatenate(out)[:n]


def per_call_ms(fn, repeat: int) -> float:
    fn()  # warm-up excluded
    t0 = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - t0) / repeat * 1e3


def rows(tokens: int, vocab: int, repeat: int) -> list[tuple[str, float]]:
    rng = np.random.default_rng(0)
    ctx = copy_heavy(tokens, vocab, rng)
    out = [(f"build over {tokens} tokens", per_call_ms(lambda: SuffixIndex(ctx), repeat))]
    grown = SuffixIndex()
    t0 = time.perf_counter()
    for t in ctx.tolist():
        grown.append(t)
    out.append((f"append, per token ({tokens} one by one)",
                (time.perf_counter() - t0) / tokens * 1e3))
    idx = SuffixIndex(ctx)
    out.append(("propose 32 tokens from the tail", per_call_ms(lambda: idx.propose(32), repeat)))
    out.append(("3 candidates of 16 tokens", per_call_ms(lambda: idx.candidates(3, 16), repeat)))
    for cap in (1 << 15, 1 << 17, 1 << 19):
        memory = SuffixMemory(cap_tokens=cap)
        docs = [copy_heavy(4096, vocab, np.random.default_rng(i)) for i in range(cap // 4096 + 4)]
        t0 = time.perf_counter()
        for doc in docs:
            memory.add(doc)
        add_ms = (time.perf_counter() - t0) / len(docs) * 1e3
        lookup = ContextLookup(ctx[-4096:].tolist(), memory)
        out.append((f"memory cap {cap}: add a 4k-token request (evictions included)", add_ms))
        out.append((f"memory cap {cap}: propose 32 (context 4k + memory)",
                    per_call_ms(lambda: lookup.propose(32), repeat)))
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=32768)
    ap.add_argument("--vocab", type=int, default=49152)
    ap.add_argument("--repeat", type=int, default=200)
    args = ap.parse_args(argv)
    print("| operation | ms |\n|---|---:|")
    for name, ms in rows(args.tokens, args.vocab, args.repeat):
        print(f"| {name} | {ms:.4f} |")


if __name__ == "__main__":
    main()
