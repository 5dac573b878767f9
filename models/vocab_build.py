"""Builds a pair's vocabulary translation: token bytes from the target's Hugging Face tokenizer
and from the draft's llama.cpp model, the load-time analysis, cached on disk per file pair."""
from __future__ import annotations

import hashlib
import json
import logging
import re
from pathlib import Path
from typing import Callable

import numpy as np

from core.vocab import IdentityVocab, MappedVocab, Tokenize, VocabMap, VocabSide
from models.catalog import PairError
from models.convert import cache_root, file_hash

log = logging.getLogger("duo.vocab")
VERSION = 1  # bump when the extraction or the analysis changes: old cache files are ignored
_FALLBACK = re.compile(r"<0x([0-9A-Fa-f]{2})>")


# -- token bytes from each tokenizer ---------------------------------------------------------
def hf_side(tokenizer, size: int, eos: set[int]) -> VocabSide:
    """A transformers tokenizer's ids as bytes: byte-level ('Ġ' = space) or SentencePiece
    style ('▁' = space, <0xNN> byte fallback); special added tokens are control tokens."""
    decoder = _decoder_json(tokenizer)
    byte_level = '"ByteLevel"' in decoder
    byte_fallback = '"ByteFallback"' in decoder
    names = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    control = {i: str(t) for i, t in tokenizer.added_tokens_decoder.items() if t.special}
    unbyte = _unicode_to_bytes() if byte_level else {}
    pieces, fallback = [], set()
    for i, name in enumerate(names):
        if i in control or name is None:
            pieces.append(b"")
        elif byte_level:
            pieces.append(bytes(unbyte[c] for c in name) if all(c in unbyte for c in name)
                          else name.encode())
        elif byte_fallback and _FALLBACK.fullmatch(name):
            pieces.append(bytes([int(name[3:5], 16)]))
            fallback.add(i)
        else:
            pieces.append(name.replace("\u2581", " ").encode())
    pieces += [b""] * (size - len(pieces))  # embedding rows past the tokenizer: never text
    return VocabSide(pieces[:max(size, len(names))], control, eos, fallback)


def llama_side(drafter) -> VocabSide:
    """A llama.cpp model's ids as bytes; control/unknown/unused ids are control tokens."""
    from llama_cpp import llama_cpp as C

    vocab = drafter.model.vocab
    not_text = C.LLAMA_TOKEN_ATTR_CONTROL | C.LLAMA_TOKEN_ATTR_UNKNOWN | C.LLAMA_TOKEN_ATTR_UNUSED
    pieces, control, fallback, eos = [], {}, set(), set()
    for i in range(drafter.n_vocab):
        attr = C.llama_vocab_get_attr(vocab, i)
        piece = drafter.token_bytes(i)
        if C.llama_vocab_is_eog(vocab, i):
            eos.add(i)
        if attr & not_text:
            control[i] = piece.decode("utf-8", "replace")
            pieces.append(b"")
        else:
            pieces.append(piece)
            if attr & C.LLAMA_TOKEN_ATTR_BYTE:
                fallback.add(i)
    return VocabSide(pieces, control, eos, fallback)


def hf_tokenize(tokenizer, side: VocabSide) -> Tokenize:
    """Text -> target ids with no special tokens and no added prefix space."""
    enc = tokenizer.backend_tokenizer

    def plain(text: str) -> list[int]:
        return enc.encode(text, add_special_tokens=False).ids

    if b"".join(side.pieces[i] for i in plain("a")) == b"a":
        return plain
    nl = plain("\n")  # SentencePiece's dummy prefix: tokenize after a newline, drop it

    def after_newline(text: str) -> list[int]:
        ids = plain("\n" + text)
        return ids[len(nl):] if ids[:len(nl)] == nl else ids
    return after_newline


def llama_tokenize(drafter) -> Tokenize:
    return lambda text: drafter.tokenize(text, special=False)


# -- the pair ---------------------------------------------------------------------------------
def build_vocab(drafter, tokenizer, target_size: int, target_eos: set[int],
                progress: Callable[[str], None] | None = None):
    """IdentityVocab when both sides spell every id alike, else a MappedVocab; PairError
    when the two vocabularies cannot work together (the message says why)."""
    say = progress or log.info
    d_tok = llama_tokenize(drafter)
    path = _cache_path(drafter, tokenizer)
    vmap = _load(path)
    if vmap is None:
        vmap = VocabMap(llama_side(drafter), hf_side(tokenizer, target_size, target_eos))
        _save(path, vmap)
    t_tok = hf_tokenize(tokenizer, vmap.target)
    if _identical(vmap):
        return IdentityVocab(drafter.n_vocab, target_size)
    problems = vmap.problems(d_tok, t_tok)
    rep = vmap.report()
    if problems:
        raise PairError("the draft and target vocabularies cannot be aligned: "
                        + "; ".join(problems))
    say(f"vocabularies differ: {rep['shared_tokens']} tokens spelled alike "
        f"({rep['draft_share']:.0%} of the draft's, {rep['target_share']:.0%} of the "
        f"target's); drafts are translated through the text")
    return MappedVocab(vmap, d_tok, t_tok, target_size)


def _identical(vmap: VocabMap) -> bool:
    d, t = vmap.draft, vmap.target
    n = len(d)
    return n <= len(t) and d.pieces == t.pieces[:n] and all(t.pieces[i] == b"" for i in
                                                             range(n, len(t)))


# -- the disk cache ---------------------------------------------------------------------------
def _cache_path(drafter, tokenizer) -> Path:
    draft_file = Path(drafter.model.path_model)
    tok_dir = Path(getattr(tokenizer, "name_or_path", "") or ".")
    tok_files = sorted(p for p in tok_dir.glob("tokenizer*") if p.is_file()) \
        if tok_dir.is_dir() else []
    parts = [file_hash(draft_file)] + [file_hash(p) for p in tok_files]
    if not tok_files:  # no files to name the tokenizer: its whole vocabulary is the key
        parts.append(hashlib.sha256(json.dumps(tokenizer.get_vocab(), sort_keys=True)
                                    .encode()).hexdigest())
    key = hashlib.sha256(f"v{VERSION}|".encode() + "|".join(parts).encode()).hexdigest()
    return cache_root() / "vocab" / f"{key[:32]}.npz"


def _save(path: Path, vmap: VocabMap) -> None:
    arrays = {"d2t": vmap.d2t}
    meta = {}
    for name, side in (("draft", vmap.draft), ("target", vmap.target)):
        arrays[f"{name}_blob"] = np.frombuffer(b"".join(side.pieces), dtype=np.uint8)
        arrays[f"{name}_len"] = np.array([len(p) for p in side.pieces], dtype=np.int32)
        meta[name] = {"control": {str(k): v for k, v in side.control.items()},
                      "eos": sorted(side.eos), "fallback": sorted(side.fallback)}
    meta["report"] = vmap.report()
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.stem + ".tmp.npz")
    np.savez(tmp, **arrays)
    tmp.replace(path)


def _load(path: Path) -> VocabMap | None:
    if not path.exists():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(z["meta"].tobytes())
            sides = {}
            for name in ("draft", "target"):
                blob, lens = z[f"{name}_blob"].tobytes(), z[f"{name}_len"]
                ends = np.cumsum(lens)
                pieces = [blob[e - n:e] for e, n in zip(ends.tolist(), lens.tolist())]
                m = meta[name]
                sides[name] = VocabSide(pieces, {int(k): v for k, v in m["control"].items()},
                                        m["eos"], m["fallback"])
            return VocabMap(sides["draft"], sides["target"], d2t=z["d2t"])
    except (OSError, ValueError, KeyError) as e:
        log.warning("ignoring unreadable vocabulary cache %s: %s", path, e)
        return None


def _decoder_json(tokenizer) -> str:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    dec = getattr(backend, "decoder", None)
    if dec is None:
        return ""
    try:
        state = dec.__getstate__()
        return state.decode() if isinstance(state, bytes) else json.dumps(state)
    except Exception:  # noqa: BLE001 - an unknown decoder: treat tokens as plain text
        return type(dec).__name__


def _unicode_to_bytes() -> dict[str, int]:
    """The inverse of GPT-2's bytes_to_unicode (the 'Ġ' = space table)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}
