"""The draft's attention kernel: llama.cpp's flash attention (its default) or its plain one.

On one CPU thread llama.cpp's flash attention costs a decode about 21 us per token held on
a 2-core Intel Xeon VM (SmolLM2-135M Q4_1: 18 ms at 32 tokens, 30 ms at 512, 66 ms at 2000),
the plain kernel about 5 us (20, 23, 30 ms): a chat's draft past its first few hundred
tokens decodes a quarter to half faster without it. Short contexts favour flash attention
slightly, and CPUs differ, so `auto` times a decode at PROBE_CONTEXT tokens with each, once
per machine and draft file, and takes plain where it was FASTER (else flash, llama.cpp's
own). The output is the target's either way; the draft's proposals may shift a little
(another summation order)."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from models.draft.llama import FLASH_ATTN_TYPE, Choice, LlamaDrafter

MODES = ("auto", "flash", "plain")
PROBE_CONTEXT = 512  # tokens held when timed: a chat's prompt and some of its answer
PROBE_STEPS = 8  # decodes per timed round
FASTER = 1.05  # auto: plain attention when it decoded at least this much faster


def pick_attention(mode: str, timed) -> Choice:
    """`flash` and `plain` as asked; `auto` plain where `timed()` (a cached measurement:
    seconds per decode at PROBE_CONTEXT tokens, per kind) says it decodes FASTER."""
    if mode not in MODES:
        raise ValueError(f"unknown draft attention '{mode}'; known: {', '.join(MODES)}")
    if mode != "auto":
        return Choice(mode, f"{mode} (--draft-attention {mode})")
    times = timed()
    speedup = times["flash"] / max(times["plain"], 1e-9)
    if speedup >= FASTER:
        return Choice("plain", f"plain: {speedup:.2f}x flash attention's decode "
                                        f"speed at {PROBE_CONTEXT} tokens here")
    return Choice("flash", f"flash: plain attention decoded {speedup:.2f}x as fast "
                                    f"at {PROBE_CONTEXT} tokens here")


def choose_attention(path: Path, mode: str, cores: int, remeasure: bool = False,
                     say=None) -> Choice:
    """The loader's choice: pick_attention on the timing kept in draft_attention.json."""
    from models.fit.profiler import measured

    def timed():
        return measured("draft_attention.json", cache_key(path.name),
                        lambda: time_attention(path, cores), remeasure, say,
                        "timing the draft's attention (flash, plain)")["value"]
    return pick_attention(mode, timed)


def cache_key(draft_name: str) -> str:
    """The timed verdict's key in draft_attention.json: machine and draft file."""
    from models.fit.profiler import machine_key

    return f"v1|{machine_key()}|{draft_name}"


def time_attention(path: Path, cores: int) -> dict[str, float]:
    """Seconds per draft decode on one thread with PROBE_CONTEXT tokens held, per kind (the
    least of three interleaved rounds); the context is prefilled on `cores` threads."""
    from models.fit.profiler import interleaved

    ids = [int(t) for t in np.random.default_rng(0).integers(100, 1000, PROBE_CONTEXT)]
    drafters = {kind: LlamaDrafter(path, n_threads=cores, n_ctx=2 * PROBE_CONTEXT, max_seqs=1,
                                   attention=kind) for kind in FLASH_ATTN_TYPE}
    try:
        for d in drafters.values():
            d._sync(ids)
            d.set_threads(1)
        return interleaved({kind: _decodes(d, ids) for kind, d in drafters.items()}, rounds=3)
    finally:
        for d in drafters.values():
            d.close()


def _decodes(drafter, ids: list[int]):
    def probe() -> float:
        t0 = time.perf_counter()
        for tok in ids[:PROBE_STEPS]:
            drafter._decode_batch([(tok, 0)])
        seconds = (time.perf_counter() - t0) / PROBE_STEPS
        drafter.rollback(len(ids))
        return seconds
    return probe
