"""The eager target backend (the reference target path): a transformers causal LM on cuda
(bf16) or the CPU (fp32) unless told otherwise, with a DynamicCache cropped back to any
prefix. models/target/static.py is the fast path behind the same verbs."""
from __future__ import annotations

import gc
from contextlib import contextmanager
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, DynamicCache

from core.backends import SampleCheck, Scores, check_chunk
from core.constraints import Adjustments
from core.sampling import SamplingConfig
from models.fit.footprint import trained_window
from models.target.sampling import device_scores


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def pick_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def pick_dtype(device: str, name: str = "auto") -> str:
    """'auto': bfloat16 on cuda, float16 on a GPU without bfloat16 (before sm80: an RTX 20xx,
    a T4); float32 on the CPU, where verifying n tokens at once gives the same logits as n
    single steps (in 16-bit formats near-ties can flip: see README)."""
    if name == "auto":
        if not device.startswith("cuda"):
            return "float32"
        no_bf16 = torch.cuda.is_available() and not torch.cuda.is_bf16_supported(including_emulation=False)
        return "float16" if no_bf16 else "bfloat16"
    if name not in DTYPES:
        raise ValueError(f"unknown target dtype '{name}'; known: auto, {', '.join(DTYPES)}")
    return name


class TorchTarget:
    path = "eager"  # which target path runs: stats and the placement line say it
    graph_threads: int = 0  # a compiled CPU target's count (its graphs are guarded on it)

    def __init__(self, model_dir: str | Path, device: str | None = None, n_ctx: int | None = None,
                 dtype: str = "auto", quant: str = "none", quant_group: int | None = None,
                 progress=None, *, model=None, pack: bool = False):
        """`model`: an already built causal LM (random weights of a real shape, say) used
        instead of loading `model_dir`, which then only names it; `quant` still applies.
        `pack`: the linear layers on packed weights where that pays (models/target/packed.py)."""
        self.device = device or pick_device()
        self.dtype = pick_dtype(self.device, dtype)
        self.quant = quant  # weight-only: none, int8, int4 (models/target/quant.py)
        if model is not None:
            self.model = model.to(DTYPES[self.dtype])
            if quant != "none":
                from models.target.quant import quantize
                quantize(self.model, quant, self.device, quant_group)
        elif quant == "none":
            self.model = AutoModelForCausalLM.from_pretrained(  # never pickle weights
                str(model_dir), dtype=DTYPES[self.dtype], use_safetensors=True)
        else:
            from models.target.quant import load_or_quantize
            self.model = load_or_quantize(model_dir, quant, self.device, DTYPES[self.dtype],
                                          quant_group, progress)
        self.model.to(self.device).eval()
        self.packed, self.pack_choice = False, "not packed"
        if pack:
            from models.target import packed
            self.packed, self.pack_choice = packed.choose(self.device, self.model.dtype, quant,
                                                          self.model)
            if self.packed:
                packed.pack(self.model)
        cfg = self.model.config
        self.name = Path(model_dir).name
        self.vocab_size = int(cfg.get_text_config().vocab_size)
        trained = trained_window(cfg.to_dict())
        self.n_ctx = min(int(n_ctx or trained), trained)
        self.eos_ids = _eos_ids(self.model)
        self.cache = self._new_cache()
        self.cached_ids: list[int] = []  # the tokens in the cache, in order

    @property
    def n_cached(self) -> int:
        return len(self.cached_ids)

    @torch.inference_mode()
    def score(self, tokens: list[int], n_rows: int, sampling: SamplingConfig,
              check: SampleCheck | None = None, adjust: Adjustments | None = None) -> Scores:
        return device_scores(self.logits(tokens, n_rows), sampling, check, adjust, tokens)

    @torch.inference_mode()
    def logits(self, tokens: list[int], n_rows: int) -> torch.Tensor:
        """Append `tokens`; float32 logits (n_rows, vocab) of the last n_rows, on the device."""
        check_chunk(tokens, n_rows, self.n_cached, self.n_ctx)
        ids = torch.tensor([tokens], dtype=torch.long, device=self.device)
        try:
            out = self.model(input_ids=ids, past_key_values=self.cache, use_cache=True,
                             logits_to_keep=n_rows)
        except BaseException:  # the layers may have appended part of the chunk: start over
            self.rollback(0)
            raise
        self.cache = out.past_key_values
        self.cached_ids += tokens
        return out.logits[0, -n_rows:].float()

    def rollback(self, n_keep: int) -> None:
        if n_keep == 0:
            self.cache = self._new_cache()
        else:  # crop(0) too: it trims sliding-window layers back to their window
            self.cache.crop(-max(0, self.n_cached - n_keep))
        del self.cached_ids[n_keep:]

    @contextmanager
    def preserved(self, extent: int):
        """The cache as it was comes back after the block (a profile measured between two
        turns of a chat keeps the chat's prompt cache); the block gets an empty one.
        `extent`: the positions the block may write (the static target saves those)."""
        saved = self.cache, self.cached_ids
        self.cache, self.cached_ids = self._new_cache(), []
        try:
            yield
        finally:
            self.cache, self.cached_ids = saved

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

    def close(self) -> None:
        """Free the weights and the cache (a pair switch must not hold two targets)."""
        self.model = self.cache = None
        gc.collect()  # a model's reference cycles would keep its weights until the next pass
        if self.device.startswith("cuda"):
            torch.cuda.empty_cache()


def _eos_ids(model) -> set[int]:
    ids: set[int] = set()
    for cfg in (model.generation_config, model.config):
        eos = getattr(cfg, "eos_token_id", None) if cfg is not None else None
        if eos is not None:
            ids.update(eos if isinstance(eos, (list, tuple)) else [eos])
    return ids
