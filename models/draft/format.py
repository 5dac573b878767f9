"""The draft file's GGUF type and its Q8_0 copy (made once, cached), which prefills long prompts
(models/draft/prefill.py): llama.cpp runs some GGUF types much faster than others (a Q8_0 copy of
the SmolLM2 Q4_1 draft prefilled 700 tokens in 1.4 s instead of 2.8 s on one thread, AVX-512)."""
from __future__ import annotations

import ctypes
import os
from pathlib import Path

from models.pairs.catalog import PairError
from models.pairs.convert import cache_root, file_hash, own_tmp, say

EIGHT_BITS_OR_MORE = {"F32", "F16", "BF16", "Q8_0"}


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
                        "try --draft-prefill own")
    tmp.replace(out)
    return out
