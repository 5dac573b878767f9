"""GGUF -> PyTorch weights, converted once and cached as safetensors, keyed by file hash."""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import threading
import time
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

from filelock import FileLock

log = logging.getLogger("duo.convert")
_PARSE_ONCE = threading.Lock()  # one conversion at a time in a process patches gguf


def cache_root() -> Path:
    root = os.environ.get("DUO_CACHE_DIR") or Path.home() / ".cache" / "duodecoding"
    return Path(root)


def file_hash(path: Path) -> str:
    """sha256 of the file, remembered per (path, size, mtime) so later loads skip hashing."""
    st = path.stat()
    memo = cache_root() / "hashes.json"
    key = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}"
    known = json.loads(memo.read_text()) if memo.exists() else {}
    if key not in known:
        digest = hashlib.sha256()
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                digest.update(block)
        known[key] = digest.hexdigest()
        memo.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(memo, json.dumps(known, indent=1))
    return known[key]


def converted_dir(gguf: Path, progress=None, dtype: str = "float32") -> Path:
    """A directory holding config, tokenizer and model.safetensors for `gguf` (made if new),
    in the dtype the target runs in (an 8B model in float32 would take 32 GiB of disk)."""
    name = file_hash(gguf)[:32] + ("" if dtype == "float32" else f"-{dtype}")
    out = cache_root() / "converted" / name
    if (out / "model.safetensors").exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{out}.lock"):  # another process converting it: its folder, once done
        if not (out / "model.safetensors").exists():
            say(progress, f"converting {gguf.name} to PyTorch weights in {dtype} (first load "
                          "only; 10-60 s)")
            t0 = time.perf_counter()
            _convert(gguf, out, dtype)
            say(progress, f"converted {gguf.name} in {time.perf_counter() - t0:.1f} s -> {out}")
    return out


def _convert(gguf: Path, out: Path, dtype: str = "float32") -> None:
    import torch
    from safetensors.torch import save_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tmp = own_tmp(out)  # written beside, renamed when whole: a reader never sees half
    tmp.mkdir(parents=True, exist_ok=True)
    with _PARSE_ONCE, _gguf_parsed_once(), _no_bar():
        tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name,
                                                     dtype=getattr(torch, dtype))
    tok.save_pretrained(str(tmp))
    model.config.quantization_config = None  # the saved weights are plain, dequantized
    model.config.save_pretrained(str(tmp))
    if model.generation_config is not None:
        model.generation_config.save_pretrained(str(tmp))
    save_model(model, str(tmp / "model.safetensors"))
    try:
        tmp.rename(out)
    except OSError:  # another process finished first: keep its copy
        if not (out / "model.safetensors").exists():
            raise
        shutil.rmtree(tmp, ignore_errors=True)


@contextmanager
def _gguf_parsed_once():
    """transformers reads a GGUF's header three times (config, tokenizer, weights: each a
    Python parse of the whole vocabulary) and builds gguf's tensor-name map once a module
    (about 400 times for smol-self): within the block one parse a file and one map an
    architecture serve them all (read-only both; a third of smol-self's conversion)."""
    import gguf

    reader_class, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    readers: dict = {}

    def reader(path, mode="r"):
        key = (str(path), mode)
        if key not in readers:
            readers[key] = reader_class(path, mode)
        return readers[key]
    gguf.GGUFReader, gguf.get_tensor_name_map = reader, lru_cache(maxsize=None)(name_map)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = reader_class, name_map


@contextmanager
def _no_bar():
    """transformers' GGUF conversion draws its own tqdm bar on stderr; our progress line says
    the same (the start and the time it took)."""
    import transformers.modeling_gguf_pytorch_utils as gguf_utils

    bar, gguf_utils.tqdm = gguf_utils.tqdm, lambda items, *a, **k: items
    try:
        yield
    finally:
        gguf_utils.tqdm = bar


def say(progress, msg: str) -> None:
    """To `progress` (the loader's: the terminal's log or the page's), else to the log."""
    (progress or log.info)(msg)


def own_tmp(path: Path) -> Path:
    """A name beside `path` that only this process and thread writes (writers may race: each
    makes its own, then renames it over `path`, so a reader never sees half a file)."""
    return path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")


def write_atomic(path: Path, text: str) -> None:
    tmp = own_tmp(path)
    tmp.write_text(text)
    tmp.replace(path)
