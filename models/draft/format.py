"""The draft's weight format: the GGUF as shipped, or a Q8_0 copy of it.

llama.cpp runs some GGUF types much faster than others. On this AVX-512 machine a Q8_0 copy
of the SmolLM2 Q4_1 draft prefills twice as fast (700 tokens: 1.4 s instead of 2.8 s on one
thread) and decodes 8% faster, but proposes slightly different tokens. Side by side it paid
on long prompts and cost a little on short ones (README, *Draft format*), so it is a choice.
"""
from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from pathlib import Path

from models.pairs.catalog import PairError
from models.pairs.convert import cache_root, file_hash, own_tmp, say

FORMATS = ("original", "q8_0")
EIGHT_BITS_OR_MORE = {"F32", "F16", "BF16", "Q8_0"}


@dataclass
class DraftFormat:
    path: Path
    kind: str  # "original" or "q8_0"
    reason: str

    def to_dict(self) -> dict:
        return {"file": self.path.name, "kind": self.kind, "reason": self.reason}


def pick_draft(path: Path, mode: str = "original", progress=None) -> DraftFormat:
    """The GGUF the draft runs from: `path` itself or its Q8_0 copy (made once, cached)."""
    if mode not in FORMATS:
        raise ValueError(f"unknown draft format '{mode}'; known: {', '.join(FORMATS)}")
    if mode == "original":
        return DraftFormat(path, "original", "the file as shipped")
    ftype = file_type(path)
    if ftype in EIGHT_BITS_OR_MORE:
        return DraftFormat(path, "original", f"already {ftype}: no Q8_0 copy needed")
    return DraftFormat(q8_copy(path, progress), "q8_0", f"Q8_0 copy of the {ftype} file")


def file_type(path: Path) -> str:
    import gguf

    from models.pairs.gguf_header import gguf_field

    try:  # the header only as far as the key (gguf's reader parses it all: 2 s a draft)
        with open(path, "rb") as f:
            value = gguf_field(f.read, "general.file_type")
    except (PairError, OSError) as e:
        raise PairError(f"cannot read the GGUF header of {path}: {e}") from None
    if value is None:
        return "UNKNOWN"
    name = gguf.LlamaFileType(int(value)).name
    return name.removeprefix("MOSTLY_").removeprefix("ALL_")


def q8_copy(path: Path, progress=None) -> Path:
    from llama_cpp import llama_cpp as C

    out = cache_root() / "drafts" / f"{path.stem}-q8_0-{file_hash(path)[:16]}.gguf"
    if out.exists():
        return out
    say(progress, f"making a Q8_0 copy of the draft {path.name} (first load only)")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = own_tmp(out)  # two processes may make it at once
    params = C.llama_model_quantize_default_params()
    params.ftype, params.allow_requantize = C.LLAMA_FTYPE_MOSTLY_Q8_0, True
    params.nthread = os.cpu_count() or 1
    if C.llama_model_quantize(str(path).encode(), str(tmp).encode(), ctypes.byref(params)):
        tmp.unlink(missing_ok=True)
        raise PairError(f"llama.cpp could not make a Q8_0 copy of {path.name}; "
                        "try --draft-format original")
    tmp.replace(out)
    return out
