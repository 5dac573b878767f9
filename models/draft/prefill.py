"""The draft's prompt prefill on its Q8_0 copy: llama.cpp prefills some GGUF types (Q4_1 on
x86) at about half the speed of Q8_0, so a long prompt is evaluated by the copy and its KV
cache moved into the draft's own context (llama_state_seq_*); the draft then decodes with
its own weights from there. The output is the target's either way; the draft's proposals
shift a little (its cache holds the copy's keys and values)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from llama_cpp import llama_cpp as C

from models.draft.format import EIGHT_BITS_OR_MORE, file_type, q8_copy
from models.draft.llama import Choice, LlamaDrafter

MODES = ("auto", "copy", "own")
MIN_TOKENS = 64  # fewer new tokens: the draft evaluates them itself (a move copies the cache)
FASTER = 1.25  # auto: the copy prefills when it measured at least this much faster
PROBE_TOKENS = 128


class CopyPrefill:
    """A second llama.cpp context on the Q8_0 copy, used for prompt prefills only (of more
    than `min_tokens` new tokens)."""
    min_tokens = MIN_TOKENS

    def __init__(self, path: Path, n_ctx: int, n_threads: int = 1, attention: str = "flash"):
        # the draft's own kernel: the cache it moves is laid out for it (V transposed or not)
        self.copy = LlamaDrafter(path, n_threads=n_threads, n_ctx=n_ctx, max_seqs=1,
                                 attention=attention)

    def fill(self, drafter, ids: list[int], stop=None) -> bool:
        """Evaluate `ids` (draft ids) on the copy and move its cache into `drafter`'s
        sequence 0, which then holds `ids`; False when llama.cpp refuses the move (the
        drafter's cache left empty) or `stop` was set first (left as it was)."""
        if self.copy._sync(ids, stop) is None:
            return False
        state = self.copy._state()
        C.llama_memory_clear(drafter.ctx.memory, True)
        drafter.tokens, drafter.branches, drafter.branch_base = [], {}, {}
        if state is None or C.llama_state_seq_set_data(drafter.ctx.ctx, state, len(state), 0) <= 0:
            return False
        drafter.tokens = list(ids)
        return True

    def set_threads(self, n: int) -> None:
        self.copy.set_threads(n)

    def close(self) -> None:
        self.copy.close()


def pick_prefill(drafter, path: Path, mode: str, cores: int, timed, progress=None):
    """(CopyPrefill or None, Choice) for the draft at `path` run by `drafter`:
    `own` never copies; a draft of 8 bits or more has no faster copy; `copy` always uses
    it; `auto` uses it when `timed(measure)` (a cached measurement) says it prefills
    FASTER than the draft itself on `cores` threads."""
    if mode not in MODES:
        raise ValueError(f"unknown draft prefill '{mode}'; known: {', '.join(MODES)}")
    if mode == "own":
        return None, Choice("own", "the draft itself (--draft-prefill own)")
    ftype = file_type(path)
    if ftype in EIGHT_BITS_OR_MORE:
        return None, Choice("own", f"the draft itself: already {ftype}")
    prefill = CopyPrefill(q8_copy(path, progress), drafter.n_ctx, attention=drafter.attention)
    if mode == "copy":
        return prefill, Choice("copy", "its Q8_0 copy (--draft-prefill copy)")
    times = timed(lambda: time_prefills(drafter, prefill, cores))
    speedup = times["own"] / max(times["copy"], 1e-9)
    if speedup >= FASTER:
        return prefill, Choice("copy", f"its Q8_0 copy: {speedup:.1f}x the {ftype} "
                                              f"file's prefill speed here")
    prefill.close()
    return None, Choice("own", f"the draft itself: its Q8_0 copy prefilled only "
                                      f"{speedup:.2f}x as fast here")


def choose_prefill(drafter, path: Path, mode: str, cores: int, remeasure: bool = False, say=None):
    """The loader's choice: pick_prefill on the timing kept in draft_prefill.json (per
    machine, draft as run, core count)."""
    from models.fit.profiler import measured

    def timed(measure):
        return measured("draft_prefill.json", cache_key(drafter.name, cores), measure,
                        remeasure, say,
                        "timing the draft's prompt prefill (the file, its Q8_0 copy)")["value"]
    return pick_prefill(drafter, path, mode, cores, timed, say)


def cache_key(draft_name: str, cores: int) -> str:
    """The timed verdict's key in draft_prefill.json: machine, draft file, cores."""
    from models.fit.profiler import machine_key

    return f"v1|{machine_key()}|{draft_name}|cores{cores}"


def time_prefills(drafter, prefill: CopyPrefill, cores: int) -> dict[str, float]:
    """Seconds to prefill PROBE_TOKENS tokens on `cores` threads: the draft itself, and the
    copy with the move into the draft's cache (the least of three, interleaved)."""
    from models.fit.profiler import elapsed, interleaved

    ids = [int(t) for t in np.random.default_rng(0).integers(100, 1000, PROBE_TOKENS)]

    def own():
        drafter.rollback(0)
        return elapsed(lambda: drafter._sync(ids))

    def copied():
        prefill.copy.rollback(0)
        return elapsed(lambda: prefill.fill(drafter, ids))
    prev = drafter.set_threads(cores)
    prefill.set_threads(cores)
    try:
        with drafter.preserved():
            return interleaved({"own": own, "copy": copied}, rounds=3)
    finally:
        drafter.set_threads(prev)
        prefill.set_threads(prev)
