"""The draft backend: a GGUF model in llama.cpp on the CPU, with its own KV cache and threads."""
from __future__ import annotations

import ctypes
import threading
import time
from pathlib import Path
from typing import Callable

import numpy as np
from llama_cpp import _internals as internals
from llama_cpp import llama_cpp as C
from llama_cpp._logger import set_verbose

from core.backends import Draft
from core.sampling import SamplingConfig, logits_to_probs, sample

set_verbose(False)  # llama.cpp's context logs would drown the CLI's stderr


class LlamaDrafter:
    """Drafts with llama.cpp; contexts and proposals are target ids, translated by `vocab`."""

    def __init__(self, path: str | Path, n_threads: int = 1, n_ctx: int = 4096,
                 n_batch: int = 512, max_seqs: int = 8):
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"draft model file not found: {path}")
        self.name = path.name
        mp = C.llama_model_default_params()
        mp.n_gpu_layers = 0
        self.model = internals.LlamaModel(path_model=str(path), params=mp, verbose=False)
        cp = C.llama_context_default_params()
        cp.n_ctx, cp.n_batch, cp.n_ubatch = n_ctx, n_batch, n_batch
        cp.n_threads = cp.n_threads_batch = n_threads
        cp.n_seq_max, cp.kv_unified = max_seqs, True
        self.ctx = internals.LlamaContext(model=self.model, params=cp, verbose=False)
        self.n_ctx, self.n_batch, self.max_seqs = n_ctx, n_batch, max_seqs
        self.n_vocab = self.model.n_vocab()
        self.batch = C.llama_batch_init(n_batch, 0, max_seqs)
        self.tokens: list[int] = []  # draft ids whose KV is in sequence 0
        self.vocab = None  # set by the loader (IdentityVocab or a translating map)

    # -- the verbs ------------------------------------------------------------------------
    def propose(self, context: list[int], n: int, sampling: SamplingConfig,
                rng_at: Callable[[int], np.random.Generator],
                stop: threading.Event | None = None) -> Draft:
        ids = self.vocab.to_draft(context, greedy=sampling.greedy)
        n = max(0, min(n, self.n_ctx - len(ids) - 1))
        t0 = time.perf_counter()
        logits = self._sync(ids)
        sync_s = time.perf_counter() - t0
        out, rows = [], []
        for i in range(n):
            if stop is not None and stop.is_set():
                break
            tok, q = self._choose(logits, sampling, rng_at, len(context) + i)
            out.append(tok)
            rows.append(q)
            if i + 1 < n:
                logits = self._decode_one(tok)
        q_draft = None if sampling.greedy or not rows else self.vocab.q_to_target(np.stack(rows))
        return Draft(self.vocab.to_target(out), q_draft, sync_s=sync_s)

    def rollback(self, n_keep: int) -> None:
        if n_keep < len(self.tokens):
            C.llama_memory_seq_rm(self.ctx.memory, -1, n_keep, -1)
            del self.tokens[n_keep:]

    def set_threads(self, n: int) -> None:
        C.llama_set_n_threads(self.ctx.ctx, n, n)

    # -- internals ------------------------------------------------------------------------
    def _choose(self, logits: np.ndarray, sampling: SamplingConfig, rng_at, pos: int):
        if self.vocab.draft_mask is not None:
            logits = np.where(self.vocab.draft_mask, logits, -np.inf)
        if sampling.greedy:
            return int(np.argmax(logits)), None
        q = logits_to_probs(logits, sampling)
        return sample(q, rng_at(pos)), q

    def _sync(self, ids: list[int]) -> np.ndarray:
        """Keep the longest common prefix in the KV cache, evaluate the rest, return the
        logits after the last id."""
        if not ids:
            raise ValueError("the draft needs a non-empty context")
        lcp = _common_prefix(self.tokens, ids)
        self.rollback(min(lcp, len(ids) - 1))
        rest = ids[len(self.tokens):]
        for start in range(0, len(rest), self.n_batch):
            chunk = rest[start:start + self.n_batch]
            self._fill(chunk, len(self.tokens))
            self._run()
            self.tokens.extend(chunk)
        return self._logits(self.batch.n_tokens - 1)

    def _decode_one(self, tok: int) -> np.ndarray:
        self._fill([tok], len(self.tokens))
        self._run()
        self.tokens.append(tok)
        return self._logits(0)

    def _fill(self, toks: list[int], pos0: int, seq: int = 0) -> None:
        b = self.batch
        b.n_tokens = len(toks)
        for i, t in enumerate(toks):
            b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = t, pos0 + i, 1, False
            b.seq_id[i][0] = seq
        b.logits[len(toks) - 1] = True

    def _run(self) -> None:
        rc = C.llama_decode(self.ctx.ctx, self.batch)
        if rc != 0:
            raise RuntimeError(f"llama_decode failed ({rc}); context full?")

    def _logits(self, i: int) -> np.ndarray:
        ptr = C.llama_get_logits_ith(self.ctx.ctx, i)
        return np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)).copy()

    # -- tokenizer (for vocabulary analysis) -------------------------------------------------
    def token_bytes(self, tok: int) -> bytes:
        buf = ctypes.create_string_buffer(256)
        n = C.llama_token_to_piece(self.model.vocab, tok, buf, 256, 0, True)
        return buf.raw[:max(n, 0)]

    def tokenize(self, text: str, special: bool = True) -> list[int]:
        return self.model.tokenize(text.encode("utf-8"), False, special)

    def close(self) -> None:
        if self.batch is not None:
            C.llama_batch_free(self.batch)
            self.batch = None
        self.ctx.close()
        self.model.close()


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
