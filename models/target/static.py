"""The fast target path: K/V preallocated per layer and written at absolute positions, each
forward attending only over a length bucket just past what the sequence holds
(models/target/attention.py); verify chunks compiled with their length dynamic (padded
to a few sizes; on cuda a CUDA graph each), one upload (position and ids) and one download
(argmaxes, or what the sampled verifier needs) a round; long prompts prefilled eagerly in big
chunks on the same buffers.

A rollback only moves `n_cached`: later writes overwrite the stale slots, and the mask
(built from the positions) never lets a query see a slot past its own position."""
from __future__ import annotations

import os
import threading
import time
import weakref
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

import torch

from core.backends import SampleCheck, Scores, check_chunk
from core.constraints import Adjustments
from core.sampling import SamplingConfig
from models.target import attention as span
from models.pairs.convert import cache_root
from models.fit.footprint import (BUCKETS, PREFILL_CHUNK,  # the sizes the memory picker counts
                                  span_limit, static_slots)
from models.target.sampling import device_scores
from models.target.eager import TorchTarget


_COMPILED: weakref.WeakSet = weakref.WeakSet()  # compiled targets not closed yet


class StaticTarget(TorchTarget):
    """Same verbs as TorchTarget; `compile` picks the compiled forward or the eager one."""

    def __init__(self, model_dir: str | Path, device: str | None = None, n_ctx: int | None = None,
                 dtype: str = "auto", compile: bool = True, buckets: tuple[int, ...] | None = None,
                 progress=None, quant: str = "none", quant_group: int | None = None, *, model=None):
        super().__init__(model_dir, device, n_ctx, dtype, quant, quant_group, progress, model=model)
        cuda = self.device.startswith("cuda")
        self.buckets = tuple(sorted(buckets or BUCKETS))
        self.compiled = compile
        # a dynamic chunk length where it saves compiles: two sizes past 1 (a dynamic graph
        # compiles slower than one static size)
        self._dynamic_chunk = sum(b > 1 for b in self.buckets) > 1
        self.path = "static-compiled" if compile else "static"
        self._softcap = getattr(self.model.config.get_text_config(), "final_logit_softcapping",
                                None)
        self.cache = None
        self._allocate()
        self._step = _compiled(self._decode, cuda, quant) if compile else self._decode
        if compile:
            _COMPILED.add(self)
        if compile and not cuda:  # compiled on the CPU for torch's thread count now
            self.graph_threads = torch.get_num_threads()
        self._graphs = compile and cuda  # CUDA graph trees: the calling thread's own
        if compile:
            self.warm_up(progress)

    # -- the buffers ----------------------------------------------------------------------
    def _allocate(self) -> None:
        """K/V for every layer at full length, sliding-window ones too (a ring buffer cannot
        roll back; their mask applies the window); the upload buffer and the span keys."""
        # the longest span holds a padded chunk at the window's end; the buffers are ALIGN
        # slots longer, so a span is always a strict prefix of them and every span runs the
        # one graph compiled with the span dynamic; all lengths are multiples of ALIGN
        largest = self.buckets[-1]
        size, slots = span_limit(self.n_ctx, largest), static_slots(self.n_ctx, largest)
        self._kv = span.attach(self.model, slots, self.model.dtype, self.device)
        self.spans = span.spans(size)
        self._keys = torch.arange(slots, device=self.device)
        torch._dynamo.mark_static_address(self._keys)
        self._offsets = torch.arange(largest, device=self.device)  # a chunk's 0, 1, ...
        torch._dynamo.mark_static_address(self._offsets)
        cuda = self.device.startswith("cuda")
        self._host = torch.zeros(1 + self.buckets[-1], dtype=torch.long, pin_memory=cuda)
        self._upload = torch.zeros_like(self._host, device=self.device)
        self._copied = torch.cuda.Event() if cuda else None
        torch._dynamo.mark_static_address(self._upload)

    def rollback(self, n_keep: int) -> None:
        del self.cached_ids[max(0, n_keep):]  # positions past n_cached are overwritten later

    @contextmanager
    def preserved(self, extent: int):
        """The cached positions the block may overwrite (below `extent`, a padded chunk
        past it) are copied aside and written back after it."""
        n, ids = min(self.n_cached, extent + self.buckets[-1]), list(self.cached_ids)
        saved = [buf[:, :, :n].clone() for buf in self._kv]
        self.cached_ids = []
        try:
            yield
        finally:
            for buf, part in zip(self._kv, saved):
                buf[:, :, :n].copy_(part)
            self.cached_ids = ids

    # -- the verbs --------------------------------------------------------------------------
    @torch.inference_mode()
    def score(self, tokens: list[int], n_rows: int, sampling: SamplingConfig,
              check: SampleCheck | None = None, adjust: Adjustments | None = None) -> Scores:
        """Greedy: one forward and one download of n_rows argmaxes; sampling, or rows to
        adjust or logprobs to report: the head over the n_rows hidden rows, reduced on the
        device to what the verifier needs."""
        check_chunk(tokens, n_rows, self.n_cached, self.n_ctx)
        if sampling.greedy and adjust is None and len(tokens) <= self.buckets[-1]:
            choice, _ = self._chunk(tokens)
            end = len(tokens)
            return Scores(choice=choice[end - n_rows:end].tolist())
        return device_scores(self._rows(tokens, n_rows), sampling, check, adjust, tokens)

    @torch.inference_mode()
    def logits(self, tokens: list[int], n_rows: int) -> torch.Tensor:
        """Append `tokens`; float32 logits of the last n_rows positions, on the device."""
        check_chunk(tokens, n_rows, self.n_cached, self.n_ctx)
        return self._rows(tokens, n_rows)

    def _rows(self, tokens: list[int], n_rows: int) -> torch.Tensor:
        """float32 logits (n_rows, vocab) of the last n_rows positions: a short chunk's from the
        head the compiled step already ran (the LM head runs once a round), a long one's from
        the head over the last hidden rows of the eager prefill."""
        if len(tokens) <= self.buckets[-1]:
            _, logits = self._chunk(tokens)
            rows = logits[len(tokens) - n_rows:len(tokens)]  # a copy: the graph reuses its own
            return self._capped(rows.to(torch.float32, copy=True))
        return self._capped(self.model.lm_head(self._hidden(tokens, n_rows)).float())

    def _hidden(self, tokens: list[int], n_rows: int) -> torch.Tensor:
        """Hidden rows (n_rows, dim) of the last n_rows positions of a long chunk: the eager
        forward in PREFILL_CHUNK pieces."""
        rows = []
        for start in range(0, len(tokens), PREFILL_CHUNK):
            piece = tokens[start:start + PREFILL_CHUNK]
            keep = n_rows - (len(tokens) - start - len(piece))  # rows wanted from this piece
            hidden = self._prefill(piece)
            if keep > 0:
                rows.append(hidden[len(piece) - min(keep, len(piece)):])
        return torch.cat(rows)

    # -- the forwards -----------------------------------------------------------------------
    def _chunk(self, piece: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """One compiled forward at position n_cached, `_size` long: (argmax per row, logits
        rows in the model's dtype, before any softcap), both on the device. One host-to-device copy:
        the position and the ids."""
        size = self._size(len(piece))
        n = self.n_cached
        host = self._host
        if self._copied is not None:  # the last upload must have left the pinned buffer
            self._copied.synchronize()
        host[0] = n
        host[1:1 + len(piece)] = torch.tensor(piece, dtype=torch.long)
        host[1 + len(piece):] = 0
        self._upload.copy_(host, non_blocking=True)
        if self._copied is not None:
            self._copied.record()
        if self.graph_threads and torch.get_num_threads() != self.graph_threads:
            # a graph compiled for the CPU is guarded on torch's thread count (another count
            # recompiles every shape, tens of seconds each): it runs at the count it was
            # compiled for; the eager long-prompt prefill takes what set_threads gave
            torch.set_num_threads(self.graph_threads)
        keys = self._keys[:span.span_for(n + size, self.spans)]
        offsets = self._offsets[:size]  # as `keys`: a prefix of a static buffer
        torch._dynamo.maybe_mark_dynamic(keys, 0)
        if self._graphs:
            graph_thread()
        if self._dynamic_chunk:  # one graph for chunks of 2..32 (1 is its own)
            torch._dynamo.maybe_mark_dynamic(offsets, 0)
        choice, logits = self._step(self._upload, offsets, keys)
        self.cached_ids += piece
        return choice, logits  # a CUDA graph's own buffers: read them before the next step

    def _size(self, n: int) -> int:
        """The chunk's length in the graph: the bucket that holds it (a CUDA graph is recorded
        per length)."""
        return next(b for b in self.buckets if b >= n)

    def _decode(self, upload: torch.Tensor, offsets: torch.Tensor, keys: torch.Tensor):
        ids = upload[1:1 + offsets.shape[0]].unsqueeze(0)
        pos = upload[0] + offsets
        logits = self.model.lm_head(self._forward(ids, pos, keys))
        return logits.argmax(dim=-1), logits  # the softcap keeps the order: argmax as is

    def _prefill(self, piece: list[int]) -> torch.Tensor:
        """The eager forward of a long piece (no padding, no graph) on the same buffers."""
        n = self.n_cached
        ids = torch.tensor([piece], dtype=torch.long, device=self.device)
        pos = torch.arange(n, n + len(piece), device=self.device)
        hidden = self._forward(ids, pos, self._keys[:span.span_for(n + len(piece), self.spans)])
        self.cached_ids += piece
        return hidden

    def _forward(self, ids: torch.Tensor, pos: torch.Tensor, keys: torch.Tensor):
        mask = span.masks(self.model, pos, keys)
        out = self.model.model(input_ids=ids, position_ids=pos.unsqueeze(0), attention_mask=mask,
                               use_cache=False, duo_pos=pos, duo_keys=keys)
        return out.last_hidden_state[0]

    def _capped(self, logits: torch.Tensor) -> torch.Tensor:
        cap = self._softcap
        return torch.tanh(logits / cap) * cap if cap else logits

    def warm_up(self, progress=None) -> float:
        """Compile every bucket now (cached on disk: a second start reuses the kernels), each
        three times (CUDA graphs record on a later call than the first) in each span it warms
        (warm_points)."""
        t0 = time.perf_counter()
        for i, size in enumerate(self.buckets, 1):
            if progress:
                progress(f"compiling the target forward: chunk {size} ({i}/{len(self.buckets)})")
            for start, length in self.warm_points(size):
                for _ in range(3):
                    self.rollback(0)
                    self.cached_ids = [1] * start  # the slots' contents do not matter here
                    self.score([1] * length, 1, SamplingConfig())
        self.rollback(0)
        self.synchronize()
        self.warm_up_s = time.perf_counter() - t0
        return self.warm_up_s

    def warm_points(self, size: int) -> list[tuple[int, int]]:
        """(cached tokens, chunk length) that run a `size` chunk in each span a generation can
        reach with it: with CUDA graphs every such span (one is recorded per size and span;
        a generation crossing a span unwarmed recorded it inside a measured prompt), else the
        first alone (one compiled graph serves every span). Past the first span the chunk is
        the shortest that pads to `size`, so a padded chunk at the window's end is warmed too."""
        points = [(0, size)]
        if not self._graphs:
            return points
        length = max((b for b in self.buckets if b < size), default=0) + 1
        for low, high in zip(self.spans, self.spans[1:]):
            end = min(high, self.n_ctx - length + size)  # where the padded chunk ends
            if end > low:
                points.append((end - size, length))
        return points

    def close(self) -> None:
        """Free the buffers and weights; the last compiled target to close also drops the
        compiled code and this thread's CUDA graphs (call it on the thread that ran them)."""
        was_compiled = self in _COMPILED
        _COMPILED.discard(self)
        if self.model is not None:
            span.detach(self.model)
        self._step, self._kv = None, []
        if was_compiled and not _COMPILED:
            release_compiled()
        super().close()


def release_compiled() -> None:
    """torch.compiler.reset(): dynamo's code cache (a pair switch would otherwise pile entries
    of `_decode` up toward its cache limit, then run eagerly without a word) and the calling
    thread's CUDA graph trees with their memory pool (inductor keeps them per thread)."""
    graph_thread()  # the reset reads this thread's trees
    torch.compiler.reset()


_GRAPH_THREAD = threading.local()  # .ready: this thread's trees are set up


def graph_thread() -> None:
    """Set up inductor's CUDA-graph trees on this thread, once (a step calls it: one lookup
    after the first). It keeps them in a threading.local that only the importing thread has,
    stashed in torch's thread-local state, where reset_cudagraph_trees looks first (torch 2.13
    returns early, freeing nothing, on a thread without them). torch before 2.13 asserts on
    any other thread (pytorch issue 123177; the owner thread failed so under torch 2.11 on
    the first H100 run). Torch's own `_initialize_tls` where it has one, else the same steps."""
    if getattr(_GRAPH_THREAD, "ready", False):
        return
    from torch._inductor import cudagraph_trees as trees

    if not torch._C._is_key_in_tls("tree_manager_containers"):
        if hasattr(trees, "_initialize_tls"):
            trees._initialize_tls(trees.local)
        else:
            trees.local.tree_manager_containers = {}
            trees.local.tree_manager_locks = defaultdict(threading.Lock)
            for name in ("tree_manager_containers", "tree_manager_locks"):
                torch._C._stash_obj_in_tls(name, getattr(trees.local, name))
    _GRAPH_THREAD.ready = True


def _compiled(fn, cuda: bool, quant: str = "none"):
    """torch.compile of the decode step: the span and the chunk length dynamic, so one graph
    serves chunks of 2..32 (dynamo keeps a length of 1 apart: the plain round's own graph) and
    every span; two compiles, not one per chunk size (78 against 195 CPU seconds cold for
    smol-self's six sizes on a 2-core EPYC). On cuda a CUDA graph is recorded per chunk size
    and span bucket (mode reduce-overhead).
    A quantized target's compile gets torchao's inductor settings, for this compile only."""
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache_root() / "inductor")  # kept across starts
    options = {"triton.cudagraphs": cuda}  # what mode="reduce-overhead" sets
    if quant != "none":
        from models.target.quant import inductor_options
        options.update(inductor_options())
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 32)
    return torch.compile(fn, options=options, fullgraph=True, dynamic=False)
