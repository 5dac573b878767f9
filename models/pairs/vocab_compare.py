"""--add-pair's same-tokenizer check: the target's tokens (tokenizer.json, else transformers) compared
id by id with the draft's (models/pairs/gguf_header.py), exactly. The load-time alignment is
models/pairs/vocab_build.py, which decides identity again from the bytes."""
from __future__ import annotations

import json
from pathlib import Path


def tokenizer_json_vocab(path: Path) -> list[str]:
    """Id-ordered tokens of a tokenizers-library tokenizer.json (BPE/WordPiece dict or Unigram list)."""
    tj = json.loads(path.read_text())
    vocab = tj["model"]["vocab"]
    ids = {i: t for t, i in vocab.items()} if isinstance(vocab, dict) else {i: p[0] for i, p in enumerate(vocab)}
    ids.update({a["id"]: a["content"] for a in tj.get("added_tokens", [])})
    return [ids.get(i, "") for i in range(max(ids) + 1)] if ids else []


def folder_vocab(folder: Path) -> list[str] | None:
    """The target's tokens: tokenizer.json when present, else whatever transformers can load."""
    if (folder / "tokenizer.json").is_file():
        return tokenizer_json_vocab(folder / "tokenizer.json")
    try:
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(str(folder))
        return tok.convert_ids_to_tokens(list(range(len(tok))))
    except Exception:  # noqa: BLE001 - any tokenizer we cannot read means "unknown", not a crash
        return None


def compare_vocabs(target: list[str], draft: list[str]) -> tuple[bool, str]:
    """Same tokenizer only when every id both have is the same token, and the ids only one
    has are padding ([PAD..], empty); no tolerance (the load-time check, models/pairs/vocab_build.py,
    decides again byte by byte)."""
    real_t, real_d = _real(target), _real(draft)
    n = min(len(target), len(draft))
    differ = sum(1 for i in range(n) if target[i] != draft[i]
                 and (_is_real(target[i]) or _is_real(draft[i])))
    extra = sum(1 for tok in target[n:] + draft[n:] if _is_real(tok))
    same = n > 0 and differ == 0 and extra == 0 and real_t > 0
    return same, (f"target {real_t} tokens, draft {real_d}, {n} compared, {differ} differ, "
                  f"{extra} on one side only")


def _is_real(tok: str) -> bool:
    return bool(tok) and not tok.startswith("[PAD")


def _real(tokens: list[str]) -> int:
    return sum(1 for t in tokens if _is_real(t))
