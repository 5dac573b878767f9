"""The fast target path: a preallocated KV cache indexed by position, chunks padded to a few
fixed lengths, and the forward compiled with torch.compile (CUDA graphs on cuda).

A rollback only moves `n_cached`: later writes overwrite the stale slots, and the causal mask
(built from the positions) never lets a query see a slot past its own position."""
from __future__ import annotations

import os
import time
from pathlib import Path

import torch
from transformers.cache_utils import Cache, StaticLayer

from models.convert import cache_root
from models.target_torch import TorchTarget, _check_chunk

CUDA_BUCKETS = (1, 2, 4, 8, 16, 32)
CPU_BUCKETS = (1, 2, 4, 8, 16, 32)


class StaticTarget(TorchTarget):
    """Same verbs as TorchTarget; `compile` picks the compiled forward or the eager one."""

    def __init__(self, model_dir: str | Path, device: str | None = None,
                 n_ctx: int | None = None, dtype: str = "auto", compile: bool = True,
                 buckets: tuple[int, ...] | None = None, progress=None, quant: str = "none",
                 quant_group: int | None = None, *, model=None):
        super().__init__(model_dir, device, n_ctx, dtype, quant, quant_group, progress,
                         model=model)
        cuda = self.device.startswith("cuda")
        self.buckets = tuple(sorted(buckets or (CUDA_BUCKETS if cuda else CPU_BUCKETS)))
        self.compiled = compile
        self.path = "static-compiled" if compile else "static"
        self._softcap = getattr(self.model.config.get_text_config(), "final_logit_softcapping",
                                None)
        self.cache = None
        self._allocate()
        self._step = _compiled(self._forward, cuda) if compile else self._forward
        self.fixed_threads = torch.get_num_threads() if compile and not cuda else None
        if compile:
            self.warm_up(progress)

    # -- the cache ------------------------------------------------------------------------
    def _allocate(self) -> None:
        """Every layer a full-length static layer, sliding-window ones too (a ring buffer
        cannot roll back; their mask still applies the window)."""
        cfg = self.model.config.get_text_config(decoder=True)
        size = self.n_ctx + self.buckets[-1]  # a padded chunk at the window's end still fits
        self.cache = Cache(layers=[StaticLayer(max_cache_len=size)
                                   for _ in range(cfg.num_hidden_layers)])
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        self.cache.early_initialization(1, kv_heads, head_dim, self.model.dtype,
                                        torch.device(self.device))
        self._lengths = [layer.cumulative_length for layer in self.cache.layers]

    def rollback(self, n_keep: int) -> None:
        del self.cached_ids[max(0, n_keep):]  # positions past n_cached are overwritten later

    # -- the forward ------------------------------------------------------------------------
    @torch.inference_mode()
    def logits(self, tokens: list[int], n_rows: int) -> torch.Tensor:
        """Append `tokens` in pieces of at most the largest bucket, each padded to a bucket;
        float32 logits of the last n_rows real positions, on the device."""
        _check_chunk(tokens, n_rows, self.n_cached, self.n_ctx)
        top, hidden = self.buckets[-1], []
        for start in range(0, len(tokens), top):
            piece = tokens[start:start + top]
            keep = max(0, n_rows - (len(tokens) - start - len(piece)))  # rows wanted here
            h = self._piece(piece)
            if keep:
                hidden.append(h[len(piece) - min(keep, len(piece)):len(piece)])
        return self._head(torch.cat(hidden))

    def _piece(self, piece: list[int]) -> torch.Tensor:
        """One padded forward at position n_cached; returns the hidden rows (bucket, dim)."""
        size = next(b for b in self.buckets if b >= len(piece))
        ids = torch.tensor([piece + [0] * (size - len(piece))], device=self.device)
        n = self.n_cached
        pos = torch.arange(n, n + size, device=self.device).unsqueeze(0)
        torch._foreach_mul_(self._lengths, 0)  # the layers write at `cumulative_length`:
        torch._foreach_add_(self._lengths, n)  # two kernels, not one per layer
        hidden = self._step(ids, pos)[0].clone()  # a CUDA graph reuses its output buffer
        self.cached_ids += piece
        return hidden

    def _forward(self, ids: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        return self.model.model(input_ids=ids, position_ids=pos, past_key_values=self.cache,
                                use_cache=True).last_hidden_state

    def _head(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = self.model.lm_head(hidden).float()
        cap = self._softcap
        return torch.tanh(logits / cap) * cap if cap else logits

    def warm_up(self, progress=None) -> float:
        """Compile every bucket now (cached on disk: a second start reuses the kernels)."""
        t0 = time.perf_counter()
        for i, size in enumerate(self.buckets, 1):
            if progress:
                progress(f"compiling the target forward: chunk {size} ({i}/{len(self.buckets)})")
            for _ in range(2):  # CUDA graphs record on a later call than the first
                self.rollback(0)
                self.logits([1] * size, 1)
        self.rollback(0)
        self.synchronize()
        self.warm_up_s = time.perf_counter() - t0
        return self.warm_up_s

    def set_threads(self, n: int) -> int:
        """A graph compiled for the CPU is guarded on torch's thread count (another count
        recompiles every shape, tens of seconds each): the compiled CPU target keeps the count
        it was compiled with."""
        if self.fixed_threads:
            return self.fixed_threads
        return super().set_threads(n)

    def close(self) -> None:
        self._step, self._lengths = None, []
        super().close()


def _compiled(fn, cuda: bool):
    """torch.compile of the forward with fixed shapes; CUDA graphs on cuda."""
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache_root() / "inductor")  # kept across starts
    mode = "reduce-overhead" if cuda else None
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 32)
    return torch.compile(fn, mode=mode, fullgraph=True, dynamic=False)
