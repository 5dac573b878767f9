"""--add-pair's same-tokenizer check: the target's tokens (tokenizer.json, else transformers) compared
id by id with the draft's (models/gguf_header.py). The load-time alignment is models/vocab_build.py."""
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
    """Same tokenizer when the token strings agree id by id over (nearly) all real tokens;
    padding entries ([PAD..], empty) at either end are ignored."""
    real_t, real_d = _real(target), _real(draft)
    n = min(len(target), len(draft))
    pairs = [(target[i], draft[i]) for i in range(n) if _is_real(target[i]) and _is_real(draft[i])]
    differ = sum(1 for a, b in pairs if a != b)
    same = bool(pairs) and differ <= len(pairs) // 1000 and len(pairs) >= 0.98 * max(real_t, real_d)
    return same, f"target {real_t} tokens, draft {real_d}, {len(pairs)} compared, {differ} differ"


def _is_real(tok: str) -> bool:
    return bool(tok) and not tok.startswith("[PAD")


def _real(tokens: list[str]) -> int:
    return sum(1 for t in tokens if _is_real(t))
