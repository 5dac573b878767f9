"""The target backend: a transformers causal LM on cuda (bf16) or the CPU (fp32) unless told
otherwise, with a KV cache that can be cropped back to any prefix."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from transformers import AutoModelForCausalLM, DynamicCache


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def pick_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def pick_dtype(device: str, name: str = "auto") -> str:
    """'auto': bfloat16 on cuda; float32 on the CPU, where verifying n tokens at once gives
    the same logits as n single steps (in 16-bit formats near-ties can flip: see README)."""
    if name == "auto":
        return "bfloat16" if device.startswith("cuda") else "float32"
    if name not in DTYPES:
        raise ValueError(f"unknown target dtype '{name}'; known: auto, {', '.join(DTYPES)}")
    return name


class TorchTarget:
    def __init__(self, model_dir: str | Path, device: str | None = None,
                 n_ctx: int | None = None, dtype: str = "auto"):
        self.device = device or pick_device()
        self.dtype = pick_dtype(self.device, dtype)
        self.model = AutoModelForCausalLM.from_pretrained(str(model_dir),
                                                          dtype=DTYPES[self.dtype])
        self.model.to(self.device).eval()
        cfg = self.model.config
        self.name = Path(model_dir).name
        self.vocab_size = int(cfg.get_text_config().vocab_size)
        self.n_ctx = int(n_ctx or getattr(cfg, "max_position_embeddings", 4096) or 4096)
        self.eos_ids = _eos_ids(self.model)
        self.cache = self._new_cache()

    @property
    def n_cached(self) -> int:
        return int(self.cache.get_seq_length())

    @torch.inference_mode()
    def score(self, tokens: list[int], n_rows: int) -> np.ndarray:
        if not tokens:
            raise ValueError("score() needs at least one token")
        ids = torch.tensor([tokens], dtype=torch.long, device=self.device)
        out = self.model(input_ids=ids, past_key_values=self.cache, use_cache=True,
                         logits_to_keep=n_rows)
        self.cache = out.past_key_values
        return out.logits[0, -n_rows:].float().cpu().numpy()

    def rollback(self, n_keep: int) -> None:
        if n_keep == 0:
            self.cache = self._new_cache()
        else:  # crop(0) too: it trims sliding-window layers back to their window
            self.cache.crop(-max(0, self.n_cached - n_keep))

    def _new_cache(self) -> DynamicCache:
        cache = DynamicCache(config=self.model.config)
        for layer in cache.layers:  # sliding-window layers must keep what a rollback needs
            if hasattr(layer, "activate_past_recording"):
                layer.activate_past_recording()
        return cache

    def set_threads(self, n: int) -> int:
        """Set torch's CPU threads; returns the previous count."""
        prev = torch.get_num_threads()
        if n and not self.device.startswith("cuda"):
            torch.set_num_threads(n)
        return prev

    def synchronize(self) -> None:
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()

    def device_name(self) -> str:
        if self.device.startswith("cuda"):
            return f"{self.device} ({torch.cuda.get_device_name(0)})"
        return "CPU"


def _eos_ids(model) -> set[int]:
    ids: set[int] = set()
    for cfg in (model.generation_config, model.config):
        eos = getattr(cfg, "eos_token_id", None) if cfg is not None else None
        if eos is not None:
            ids.update(eos if isinstance(eos, (list, tuple)) else [eos])
    return ids
