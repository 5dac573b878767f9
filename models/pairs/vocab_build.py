"""Builds a pair's vocabulary translation at load time: token bytes from the target's Hugging Face
tokenizer and from the draft's llama.cpp model, the analysis (`VocabMap`: twins, control
tokens, whether the pair can work), cached on disk per file pair. core/align.py translates."""
from __future__ import annotations

import copy
import hashlib
import json
import logging
import re
from pathlib import Path
from typing import Callable

import numpy as np

from core.align import IdentityVocab, MappedVocab, Tokenize, VocabSide
from models.pairs.catalog import PairError
from models.pairs.convert import cache_root, file_hash

log = logging.getLogger("duo.vocab")
VERSION = 1  # bump when the extraction or the analysis changes: old cache files are ignored
_FALLBACK = re.compile(r"<0x([0-9A-Fa-f]{2})>")
# Control tokens with the same job in different families (chat-template turn markers).
ROLES = {
    "turn_start": ("<|im_start|>", "<start_of_turn>", "<|start_header_id|>", "<|user|>"),
    "turn_end": ("<|im_end|>", "<end_of_turn>", "<|eot_id|>", "<|end|>"),
}
MIN_SHARED = 256  # fewer tokens spelled alike and a draft cannot say anything useful
PROBE = "Hello, world! The year 2024: naïve café, 你好, emoji 😀.\n    return x**2"


# -- the analysis: which ids are spelled alike, how control tokens correspond --------------
class VocabMap:
    """Load-time analysis: which draft ids have a target twin spelled with the same bytes
    (1:1), how control tokens correspond, and whether the pair can work at all."""

    def __init__(self, draft: VocabSide, target: VocabSide, d2t: np.ndarray | None = None):
        self.draft, self.target = draft, target
        self.d2t = self._twins() if d2t is None else np.array(d2t, dtype=np.int32)
        self.control_t2d, self.control_d2t = self._controls()
        for d, t in self.control_d2t.items():
            self.d2t[d] = t
        self._report: dict | None = None  # report(), once asked

    def _twins(self) -> np.ndarray:
        by_bytes: dict[bytes, int] = {}
        for t, p in enumerate(self.target.pieces):
            if self.target.text_id(t) and (p not in by_bytes or by_bytes[p] in
                                           self.target.fallback):
                by_bytes[p] = t
        d2t = np.full(len(self.draft), -1, dtype=np.int32)
        for d, p in enumerate(self.draft.pieces):
            if self.draft.text_id(d):
                d2t[d] = by_bytes.get(p, -1)
        return d2t

    def _controls(self) -> tuple[dict[int, int], dict[int, int]]:
        """Control tokens: same name, same role (turn markers), end-of-text to end-of-text.
        Target controls with no counterpart vanish from the draft's context; draft controls
        with no counterpart are never proposed."""
        t2d, d2t = {}, {}
        d_by_name = {n: i for i, n in self.draft.control.items()}
        d_by_role = {r: i for i, n in self.draft.control.items() for r, ns in ROLES.items()
                     if n in ns}
        for t, name in self.target.control.items():
            role = next((r for r, ns in ROLES.items() if name in ns), None)
            d = d_by_name.get(name, d_by_role.get(role))
            if d is None and t in self.target.eos and self.draft.eos:
                d = min(self.draft.eos)
            if d is not None:
                t2d[t] = d
                d2t.setdefault(d, t)
        if self.target.eos:
            for d in self.draft.eos:
                d2t.setdefault(d, min(self.target.eos))
        return t2d, d2t

    def report(self) -> dict:
        """What the analysis found (sizes, shares, controls): counted once, the map being
        settled at its making (a load asks for it three times, a count over both
        vocabularies: about 50 ms for gemma-smol's); a copy each call."""
        if self._report is None:
            self._report = self._count()
        return copy.deepcopy(self._report)

    def _count(self) -> dict:
        text_d = [i for i in range(len(self.draft)) if self.draft.text_id(i)]
        text_t = sum(self.target.text_id(i) for i in range(len(self.target)))
        shared = int((self.d2t[text_d] >= 0).sum()) if text_d else 0
        return {
            "draft_size": len(self.draft), "target_size": len(self.target),
            "draft_text_tokens": len(text_d), "target_text_tokens": text_t,
            "shared_tokens": shared,
            "draft_share": round(shared / len(text_d), 4) if text_d else 0.0,
            "target_share": round(shared / text_t, 4) if text_t else 0.0,
            "draft_controls": len(self.draft.control),
            "target_controls": len(self.target.control),
            "controls_mapped": {self.target.control[t]: self.draft.control[d]
                                for t, d in sorted(self.control_t2d.items())},
            "target_byte_fallback": len(self.target.fallback),
            "draft_bytes_covered": len(self.draft.byte_id),
            "target_bytes_covered": len(self.target.byte_id),
        }

    def problems(self, draft_tok: Tokenize | None = None,
                 target_tok: Tokenize | None = None) -> list[str]:
        """Why this pair cannot work (empty when it can)."""
        rep, out = self.report(), []
        if rep["shared_tokens"] < MIN_SHARED:
            out.append(f"the vocabularies share only {rep['shared_tokens']} tokens with "
                       f"identical bytes (need {MIN_SHARED}): they do not spell text alike")
        for side, tok, pieces in (("draft", draft_tok, self.draft.pieces),
                                  ("target", target_tok, self.target.pieces)):
            if tok is None:
                continue
            back = b"".join(pieces[i] for i in tok(PROBE))
            if back != PROBE.encode():
                out.append(f"the {side} tokenizer does not give its text back byte for byte "
                           f"(a normalizer changes it: {PROBE!r} -> "
                           f"{back.decode('utf-8', 'replace')!r})")
        if not self.draft.eos:
            out.append("the draft has no end-of-text token")
        return out


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


# -- the pair ---------------------------------------------------------------------------------
def build_vocab(drafter, tokenizer, target_size: int, target_eos: set[int],
                progress: Callable[[str], None] | None = None):
    """IdentityVocab when both sides spell every id alike, else a MappedVocab; PairError
    when the two vocabularies cannot work together (the message says why)."""
    say = progress or log.info
    d_tok: Tokenize = lambda text: drafter.tokenize(text, special=False)  # noqa: E731
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
    """Byte-exact: every id both sides have spells the same bytes and is a control token
    with the same name on both or on neither; ids only one side has are padding (no bytes,
    no control token), which the target never produces."""
    d, t = vmap.draft, vmap.target
    n = min(len(d), len(t))
    if d.pieces[:n] != t.pieces[:n]:
        return False
    if {i: c for i, c in d.control.items() if i < n} != {i: c for i, c in t.control.items()
                                                        if i < n}:
        return False
    longer = d if len(d) > n else t
    return all(not longer.pieces[i] and i not in longer.control for i in range(n, len(longer)))


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
