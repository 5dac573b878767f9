"""The tokens of a GGUF draft without loading it (--add-pair): a GGUF header parser that reads only
as far as the key asked for (`tokenizer.ggml.tokens`, `general.file_type`), from a local file or
from the Hub with HTTP Range requests."""
from __future__ import annotations

import struct
from typing import Callable

from huggingface_hub import hf_hub_url
from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

from models.pairs.catalog import PairError
from models.pairs.hub import HubConfig, hub_errors

GGUF_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
                10: "<Q", 11: "<q", 12: "<d"}


def gguf_field(read: Callable[[int], bytes], name: str):
    """The value of key `name` in a GGUF header, reading only as far as it; None if absent."""
    if read(4) != b"GGUF":
        raise PairError("not a GGUF file (bad magic)")
    version = _unpack(read, "<I")
    count = "<I" if version == 1 else "<Q"
    _unpack(read, count)  # tensors
    for _ in range(_unpack(read, count)):
        key = _gguf_str(read, count)
        value = _gguf_value(read, _unpack(read, "<I"), count, keep=key == name)
        if key == name:
            return value
    return None


def _unpack(read, fmt: str):
    data = read(struct.calcsize(fmt))
    if len(data) < struct.calcsize(fmt):
        raise PairError("GGUF header ends early (truncated file)")
    return struct.unpack(fmt, data)[0]


def _gguf_str(read, count: str) -> str:
    return read(_unpack(read, count)).decode("utf-8", errors="replace")


def _gguf_value(read, vtype: int, count: str, keep: bool):
    if vtype in GGUF_SCALARS:
        return _unpack(read, GGUF_SCALARS[vtype])
    if vtype == 8:
        return _gguf_str(read, count)
    if vtype != 9:
        raise PairError(f"GGUF header has an unknown value type {vtype}")
    etype, n = _unpack(read, "<I"), _unpack(read, count)
    if etype in GGUF_SCALARS and not keep:
        read(n * struct.calcsize(GGUF_SCALARS[etype]))
        return None
    items = [_gguf_value(read, etype, count, keep) for _ in range(n)]
    return items if keep else None


class RangeReader:
    """A file on the Hub read front to back with HTTP Range requests, a few MiB at a time."""

    def __init__(self, cfg: HubConfig, repo: str, file: str, revision: str = "main", chunk: int = 4 << 20):
        self.url = hf_hub_url(repo, file, revision=revision, endpoint=cfg.endpoint)
        self.headers = build_hf_headers(token=cfg.token or False)
        self.cfg, self.repo, self.chunk = cfg, repo, chunk
        self.buf, self.pos = b"", 0

    def read(self, n: int) -> bytes:
        while len(self.buf) - self.pos < n:
            if not self._more():
                break
        out = self.buf[self.pos:self.pos + n]
        self.pos += len(out)
        return out

    def _more(self) -> bool:
        start = len(self.buf)
        headers = {**self.headers, "Range": f"bytes={start}-{start + self.chunk - 1}"}
        with hub_errors(self.cfg, self.repo):
            r = get_session().get(self.url, headers=headers, follow_redirects=True)
            if r.status_code == 416:  # asked past the end of the file
                return False
            hf_raise_for_status(r)
        data = r.content if r.status_code == 206 else r.content[start:]
        self.buf += data
        return bool(data)
