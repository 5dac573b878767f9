"""The draft's weight format for this CPU.

llama.cpp runs some GGUF types much faster than others: on this AVX-512 machine a Q8_0 copy of
the SmolLM2 Q4_1 draft decodes about 8% faster and prefills twice as fast. Requantizing a
sub-8-bit draft to Q8_0 moves each weight by a few percent of its 4-bit step, so the draft
proposes almost the same tokens (the output is the target's either way). `auto` times the
original and the copy once per machine and keeps the faster; larger, memory-bound drafts may
stay as they are.
"""
from __future__ import annotations

import ctypes
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from models.catalog import PairError
from models.convert import cache_root, file_hash, say

FORMATS = ("auto", "original", "q8_0")
EIGHT_BITS_OR_MORE = {"F32", "F16", "BF16", "Q8_0"}
BENCH_PROMPT, BENCH_DRAFT = 256, 32  # tokens: a short prompt's prefill, then decoding


@dataclass
class DraftFormat:
    path: Path
    kind: str  # "original" or "q8_0"
    reason: str

    def to_dict(self) -> dict:
        return {"file": self.path.name, "kind": self.kind, "reason": self.reason}


def pick_draft(path: Path, mode: str = "auto", progress=None) -> DraftFormat:
    """The GGUF the draft runs from: `path` itself or its Q8_0 copy (made once, cached)."""
    if mode not in FORMATS:
        raise ValueError(f"unknown draft format '{mode}'; known: {', '.join(FORMATS)}")
    ftype = file_type(path)
    if mode == "original":
        return DraftFormat(path, "original", "asked for the original file")
    if ftype in EIGHT_BITS_OR_MORE:
        return DraftFormat(path, "original", f"already {ftype}: a Q8_0 copy would not be faster")
    copy = q8_copy(path, progress)
    if mode == "q8_0":
        return DraftFormat(copy, "q8_0", f"asked for a Q8_0 copy of the {ftype} file")
    return _timed_choice(path, copy, ftype, progress)


def file_type(path: Path) -> str:
    import gguf

    try:
        field = gguf.GGUFReader(str(path)).fields.get("general.file_type")
    except (ValueError, OSError) as e:
        raise PairError(f"cannot read the GGUF header of {path}: {e}") from None
    if field is None:
        return "UNKNOWN"
    name = gguf.LlamaFileType(int(field.parts[field.data[0]][0])).name
    return name.removeprefix("MOSTLY_").removeprefix("ALL_")


def q8_copy(path: Path, progress=None) -> Path:
    from llama_cpp import llama_cpp as C

    out = cache_root() / "drafts" / f"{path.stem}-q8_0-{file_hash(path)[:16]}.gguf"
    if out.exists():
        return out
    say(progress, f"making a Q8_0 copy of the draft {path.name} (first load only)")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    params = C.llama_model_quantize_default_params()
    params.ftype, params.allow_requantize = C.LLAMA_FTYPE_MOSTLY_Q8_0, True
    params.nthread = os.cpu_count() or 1
    if C.llama_model_quantize(str(path).encode(), str(tmp).encode(), ctypes.byref(params)):
        tmp.unlink(missing_ok=True)
        raise PairError(f"llama.cpp could not make a Q8_0 copy of {path.name}; "
                        "try --draft-format original")
    tmp.replace(out)
    return out


def _timed_choice(original: Path, copy: Path, ftype: str, progress) -> DraftFormat:
    from models.profiler import machine_key

    memo = cache_root() / "draft_formats.json"
    key = f"{machine_key()}|{file_hash(original)}"
    known = json.loads(memo.read_text()) if memo.exists() else {}
    if key not in known:
        say(progress, f"timing the draft as {ftype} and as Q8_0 (first load only)")
        known[key] = {"original": draft_seconds(original), "q8_0": draft_seconds(copy)}
        memo.parent.mkdir(parents=True, exist_ok=True)
        memo.write_text(json.dumps(known, indent=1))
    t = known[key]
    kind = "q8_0" if t["q8_0"] < t["original"] else "original"
    reason = (f"{BENCH_PROMPT}-token prefill + {BENCH_DRAFT} tokens on one thread: "
              f"{ftype} {t['original'] * 1e3:.0f} ms, Q8_0 copy {t['q8_0'] * 1e3:.0f} ms")
    return DraftFormat(copy if kind == "q8_0" else original, kind, reason)


def draft_seconds(path: Path, repeats: int = 2) -> float:
    """Best time, on one thread, to prefill a short prompt and then draft from it."""
    from core.sampling import PositionRng, SamplingConfig
    from core.vocab import IdentityVocab
    from models.draft_llama import LlamaDrafter

    drafter = LlamaDrafter(path, n_threads=1, n_ctx=BENCH_PROMPT + BENCH_DRAFT + 8)
    drafter.vocab = IdentityVocab(drafter.n_vocab, drafter.n_vocab)
    prompt = [100 + (i * 37) % 1000 for i in range(BENCH_PROMPT)]
    best = float("inf")
    try:
        for _ in range(repeats):
            drafter.rollback(0)
            t0 = time.perf_counter()
            drafter.propose(prompt, BENCH_DRAFT, SamplingConfig(), PositionRng(0, 1))
            best = min(best, time.perf_counter() - t0)
    finally:
        drafter.close()
    return best
