"""The oracle's greedy ids kept on disk in the suite's cache folder, keyed by the target's
weights and settings, the library versions and the source of core/ and models/: a later run,
or the other worker, reads them instead of decoding again."""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_CODE: list[str] = []


def code_hash() -> str:
    """Every file that decodes (core/, models/) and the torch and transformers versions."""
    if not _CODE:
        import torch
        import transformers

        h = hashlib.sha256(f"{torch.__version__}|{transformers.__version__}".encode())
        for path in sorted([*ROOT.glob("core/**/*.py"), *ROOT.glob("models/**/*.py")]):
            h.update(str(path.relative_to(ROOT)).encode())
            h.update(path.read_bytes())
        _CODE.append(h.hexdigest()[:16])
    return _CODE[0]


def _path() -> Path:
    """In the suite's cache folder (tests/profiles.py), whatever a test set DUO_CACHE_DIR to."""
    from models.pairs.convert import cache_root

    return Path(os.environ.get("DUO_SUITE_CACHE") or cache_root()) / "oracle.json"


def _key(pair, ids: list[int], fields: dict | None = None) -> str:
    """`fields`: a request's adjustments (a schema, biases, penalties) vanilla ran under."""
    t = pair.target
    asked = [list(ids), fields] if fields else list(ids)
    prompt = hashlib.sha256(json.dumps(asked, sort_keys=True).encode()).hexdigest()[:24]
    return "|".join([pair.target_dir.name, str(t.device), str(t.dtype), str(t.quant),
                     str(t.path), f"packed{int(t.packed)}", code_hash(), prompt])


def load(pair, ids: list[int], fields: dict | None = None) -> tuple[list[int], int]:
    """(tokens, new tokens asked for) stored for this pair and prompt; ([], 0) if none."""
    path = _path()
    try:
        tokens, asked = json.loads(path.read_text())[_key(pair, ids, fields)]
    except (OSError, ValueError, KeyError):
        return [], 0
    return tokens, asked


def store(pair, ids: list[int], tokens: list[int], asked: int,
          fields: dict | None = None) -> None:
    path = _path()
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        known = {}
    code = f"|{code_hash()}|"
    known = {k: v for k, v in known.items() if code in k}  # older code's oracles go
    known[_key(pair, ids, fields)] = [tokens, asked]
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # a reader never sees half a file
    tmp.write_text(json.dumps(known))
    os.replace(tmp, path)
