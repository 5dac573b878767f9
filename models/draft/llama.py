"""The draft backend: a GGUF model in llama.cpp on the CPU, with its own KV cache and threads;
its several sequences (branches, pre-drafts) are models/draft/branches.py."""
from __future__ import annotations

import ctypes
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from llama_cpp import _internals as internals
from llama_cpp import llama_cpp as C

from core.align import common_prefix
from core.backends import Branching, Draft, Draws, Plan, Proposal
from core.constraints import Adjuster, apply_row
from core.sampling import SamplingConfig, logits_to_probs
from models.draft.branches import Branches
from models.quiet import route_llama_logs

route_llama_logs()  # llama.cpp's log lines go to logging at debug level, not to stderr


# llama.cpp's flash_attn_type per attention kernel (models/draft/attention.py): -1 (its auto:
# flash attention where it supports the model, its default), 0 (off: the plain kernel)
FLASH_ATTN_TYPE = {"flash": -1, "plain": 0}


@dataclass
class Choice:
    """What the loader picked for the draft (its attention kernel, its prompt prefill), and why."""
    kind: str
    reason: str

    def to_dict(self) -> dict:
        return {"kind": self.kind, "reason": self.reason}


class LlamaDrafter(Branches):
    """Drafts with llama.cpp; contexts and proposals are target ids, translated by `vocab`
    (core/align.py). With a `branching` policy it drafts several sequences in one batch."""

    def __init__(self, path: str | Path, n_threads: int = 1, n_ctx: int = 4096,
                 n_batch: int = 512, max_seqs: int = 8, attention: str = "flash"):
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"draft model file not found: {path}")
        # timings are kept per name (models/fit/profiler.py): each kernel has its own
        self.name = path.name if attention == "flash" else f"{path.name}|{attention}-attention"
        self.attention = attention  # models/draft/attention.py
        mp = C.llama_model_default_params()
        mp.n_gpu_layers = 0
        mp.use_extra_bufts = extra_buffers_safe()
        self.model = internals.LlamaModel(path_model=str(path), params=mp, verbose=False)
        trained = self.model.n_ctx_train()  # never past its trained window (0: unknown)
        n_ctx = min(n_ctx, trained) if trained > 0 else n_ctx
        cp = C.llama_context_default_params()
        cp.n_ctx, cp.n_batch, cp.n_ubatch = n_ctx, n_batch, n_batch
        cp.n_threads = cp.n_threads_batch = n_threads
        cp.n_seq_max, cp.kv_unified = max_seqs, True
        cp.flash_attn_type = FLASH_ATTN_TYPE[attention]
        self.ctx = internals.LlamaContext(model=self.model, params=cp, verbose=False)
        self.n_ctx, self.n_batch, self.max_seqs = n_ctx, n_batch, max_seqs
        self.n_threads = self._applied = n_threads
        self.n_vocab = self.model.n_vocab()
        self.batch = C.llama_batch_init(n_batch, 0, max_seqs)
        self.tokens: list[int] = []  # draft ids whose KV is in sequence 0
        self.branches: dict[int, list[int]] = {}  # seq id -> its draft ids after its base
        self.branch_base: dict[int, int] = {}  # seq id -> the prefix it shares with seq 0
        self.vocab = None  # set by the loader (core/align.py: IdentityVocab or MappedVocab)
        self.prefill = None  # a CopyPrefill (models/draft/prefill.py) for long prompts, or none

    # -- the verbs ------------------------------------------------------------------------
    def propose(self, context: list[int], n: int, sampling: SamplingConfig, draws: Draws,
                stop: threading.Event | None = None, branching: Branching | None = None,
                adjust: Adjuster | None = None, predraft: Plan | None = None,
                guess: list[int] = ()) -> Proposal:
        """`adjust` applies to the draft's rows only when its ids are the target's: with
        another tokenizer the draft proposes unadjusted and the target's mask decides.
        `guess` (target ids, used when they are the draft's): the tokens evaluated in one batch
        and kept while the draft picks them itself (_extend)."""
        self.vocab.settle(context)  # stats: how much of the last proposal this context kept
        ids = self.vocab.to_draft(context)
        if len(ids) >= self.n_ctx - 1:  # the draft's window is full: the target goes on alone
            return Proposal()
        if not self.vocab.same:  # draft and target positions differ: no pre-drafts
            predraft = None
        mask = self.vocab.draft_mask(sampling.greedy)
        n = max(0, min(n, self.n_ctx - len(ids) - 1))
        t0 = time.perf_counter()
        logits = self._sync(ids, stop)
        if logits is None:  # stopped while it caught up: the job is not wanted
            return Proposal()
        sync_s = time.perf_counter() - t0

        adjust = adjust if self.vocab.same else None

        def adjusted(row, drafted, base=None):  # None: the grammar refuses this prefix
            if adjust is None:
                return row
            step = adjust.row((context if base is None else base) + drafted)
            return None if step is None else apply_row(row, step)

        def pick(row, drafted, base=None):  # base: a pre-draft's context, else `context`
            row = adjusted(row, drafted, base)
            if row is None:
                return None, None
            at = len(context if base is None else base) + len(drafted)
            return self._choose(row, mask, sampling, draws, at)
        guess = list(guess) if self.vocab.same and predraft is None else []
        if (branching is None and predraft is None) or n < 2:
            seqs, rows, ranking, p_top = [[]], [[]], [], 0.0
            self._extend(logits, n, pick, stop, seqs[0], rows[0], guess)
            ranks, pre = {}, {}
        else:
            seqs, rows, ranks, ranking, p_top, pre = self._branched(
                logits, n, pick, stop, branching, mask, adjusted, predraft, context, guess)
        greedy = sampling.greedy
        main = self._draft(seqs[0], rows[0], greedy, after=context, ranked=ranks.get(0))
        others = [self._draft(seqs[s], rows[s], greedy) for s in range(1, len(seqs)) if
                  s not in pre]
        first = [self.vocab.to_target([t], greedy)[0] for t in ranking]
        drafts = {o: self._draft(seqs[s], rows[s], greedy, ranked=ranks.get(s))
                  for s, o in pre.items()}
        return Proposal(main, others, first, p_top, sync_s, predrafts=drafts)

    def _draft(self, toks: list[int], rows: list, greedy: bool, after: list[int] | None = None,
               ranked: list | None = None) -> Draft:
        q = None if greedy or not rows else self.vocab.q_to_target(np.stack(rows))
        return Draft(self.vocab.to_target(toks, greedy, after), q, ranked)

    def _extend(self, logits, n, pick, stop, out, rows, guess=()) -> None:
        """Draft sequence 0 up to n tokens after `out`, one decode per token (the last one
        undecoded). `guess` (the lookup's continuation): evaluated in one batch first, its
        logits serve while the draft picks the guessed token itself, so the tokens are the
        same as without it, with fewer decodes; the KV past a miss is dropped."""
        base = len(self.tokens)
        ahead = self._decode_batch([(t, 0) for t in guess[:n - 1]]) if n > 1 and guess else []
        for i in range(n):
            if stop is not None and stop.is_set():
                break
            tok, q = pick(logits, out)
            if tok is None:
                break
            out.append(tok)
            rows.append(q)
            if i + 1 >= n:
                break
            if i < len(ahead) and guess[i] == tok:
                logits = ahead[i]
                continue
            if ahead:  # a miss: the guessed tokens from here on leave the cache
                self.rollback(base + i)
                ahead = []
            logits = self._decode_batch([(tok, 0)])[0]

    def rollback(self, n_keep: int) -> None:
        """Keep the first n_keep tokens; 0 forgets the prompt, on the prefill copy too (a cold
        run must pay the draft's prefill, not find it in the copy from the run before)."""
        if n_keep == 0 and self.prefill is not None:
            self.prefill.copy.rollback(0)
        if n_keep < len(self.tokens):
            C.llama_memory_seq_rm(self.ctx.memory, -1, n_keep, -1)
            del self.tokens[n_keep:]

    @contextmanager
    def preserved(self):
        """Sequence 0's cache as it was comes back after the block (a profile measured between
        two turns of a chat): its state is copied to host memory and set back; the block starts
        from an empty cache. Branches are dropped."""
        C.llama_memory_seq_keep(self.ctx.memory, 0)
        self.branches, self.branch_base = {}, {}
        tokens, state = list(self.tokens), self._state()
        self.rollback(0)
        try:
            yield
        finally:
            C.llama_memory_clear(self.ctx.memory, True)
            self.branches, self.branch_base, self.tokens = {}, {}, []
            if state is not None and C.llama_state_seq_set_data(self.ctx.ctx, state,
                                                                 len(state), 0) > 0:
                self.tokens = tokens  # else: an empty cache, the next call fills it

    def _state(self):
        """Sequence 0's state as bytes in host memory (None when empty)."""
        size = C.llama_state_seq_get_size(self.ctx.ctx, 0) if self.tokens else 0
        if not size:
            return None
        state = (ctypes.c_uint8 * size)()
        return state if C.llama_state_seq_get_data(self.ctx.ctx, state, size, 0) else None

    def set_threads(self, n: int) -> int:
        """Returns the previous count."""
        prev, self.n_threads = self.n_threads, n
        self._use_threads(n)
        if self.prefill is not None:
            self.prefill.set_threads(n)
        return prev

    # -- internals ------------------------------------------------------------------------
    def _choose(self, logits: np.ndarray, mask: np.ndarray | None, sampling: SamplingConfig,
                draws: Draws, pos: int):
        if mask is not None:
            logits = np.where(mask, logits, -np.inf)
        if sampling.greedy:
            return int(np.argmax(logits)), None
        q = logits_to_probs(logits, sampling)
        return draws.draw(q, pos), q

    def _sync(self, ids: list[int], stop: threading.Event | None = None) -> np.ndarray | None:
        """Keep the longest common prefix in the KV cache, evaluate the rest, return the
        logits after the last id; None when `stop` is set before the end (the cache then
        holds a prefix of `ids`), checked between batches."""
        if not ids:
            raise ValueError("the draft needs a non-empty context")
        if self.branches:
            self._settle_branches(ids)
        lcp = common_prefix(self.tokens, ids)
        self.rollback(min(lcp, len(ids) - 1))
        rest = ids[len(self.tokens):]
        if self.prefill is not None and len(rest) > self.prefill.min_tokens:  # all but the last
            self.prefill.fill(self, ids[:-1], stop)
            rest = ids[len(self.tokens):]
        for start in range(0, len(rest), self.n_batch):
            if stop is not None and stop.is_set():
                return None
            chunk = rest[start:start + self.n_batch]
            self._fill([(t, 0) for t in chunk], last_only=True)
            self._decode()
            self.tokens.extend(chunk)
        return self._logits(self.batch.n_tokens - 1)

    def _decode_batch(self, entries: list[tuple[int, int]]) -> list[np.ndarray]:
        """One decode of (token, sequence) entries, each at the next position of its
        sequence; returns the logits after each."""
        self._fill(entries, last_only=False)
        self._decode()
        for tok, seq in entries:
            (self.tokens if seq == 0 else self.branches[seq]).append(tok)
        return [self._logits(i) for i in range(len(entries))]

    def _fill(self, entries: list[tuple[int, int]], last_only: bool) -> None:
        b, pos = self.batch, {}
        b.n_tokens = len(entries)
        for i, (tok, seq) in enumerate(entries):
            p = pos.get(seq, self._next_pos(seq))
            pos[seq] = p + 1
            b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = tok, p, 1, not last_only
            b.seq_id[i][0] = seq
        b.logits[len(entries) - 1] = True

    def _next_pos(self, seq: int) -> int:
        return len(self.tokens) if seq == 0 else self.branch_base[seq] + len(self.branches[seq])

    def _use_threads(self, n: int) -> None:
        if n != self._applied:
            C.llama_set_n_threads(self.ctx.ctx, n, n)
            self._applied = n

    def _decode(self) -> None:
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
        if self.prefill is not None:
            self.prefill.close()
            self.prefill = None
        if self.batch is not None:
            C.llama_batch_free(self.batch)
            self.batch = None
        self.ctx.close()
        self.model.close()


def extra_buffers_safe() -> bool:
    """llama.cpp's extra weight buffers (AMX, repacking) crash in decode where the CPU
    advertises AMX (seen on an Intel Xeon VM); elsewhere they are kept for speed."""
    try:
        with open("/proc/cpuinfo") as f:
            return "amx_tile" not in f.read()
    except OSError:
        return True
