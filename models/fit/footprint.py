"""What a target takes on the device, before it is loaded: its weights in each precision (the
layouts torchao really stores), its KV cache and the working memory of its forward."""
from __future__ import annotations

from dataclasses import dataclass

from models.pairs.catalog import PairError

GIB = 1024 ** 3
# Families whose MLP has two matrices (up, down); the rest (Llama, Qwen, Gemma, ...) gate with three.
UNGATED_MLP = {"gpt2", "gpt_neox", "gptj", "opt", "bloom", "falcon", "phi", "starcoder2", "gpt_bigcode"}
ALIGN = 64             # the static buffers' length and every span are multiples of this
PREFILL_CHUNK = 512    # models/target/static.py prefills prompts in chunks of this many tokens
BUCKETS = (1, 2, 4, 8, 16, 32)  # decode chunks, one CUDA graph each (one pool for all)
LOGIT_ROWS = 33        # at most this many rows of logits at once (a verify chunk + 1)
LOGIT_BYTES = 4 + 2 + 4 + 8  # per row and token: float32 logits, a bf16 copy, probabilities, sort index
INT4_COLUMNS = 1024    # torchao's tinygemm layout pads in_features to a multiple of this...
INT4_ROWS = 8          # ...and out_features to a multiple of this (its ntile)
INT4_GROUP = 128       # int4 default group; a target converted from a GGUF uses 32
# cuBLAS's workspace on the owner thread's stream (torch's default CUBLAS_WORKSPACE_CONFIG is
# :4096:8 on Hopper, 32 MiB, less elsewhere; cuBLASLt shares it); no cuDNN runs in a decoder
CUDA_WORKSPACES = 32 * 1024 ** 2


@dataclass(frozen=True)
class ModelDims:
    """The sizes of a decoder-only transformer that decide its parameter count, and the memory
    it takes: weights per precision, KV cache, working memory."""
    hidden: int
    layers: int
    vocab: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    experts: int = 1
    gated_mlp: bool = True
    tied: bool = False

    @classmethod
    def from_config(cls, config: dict) -> "ModelDims":
        c = config.get("text_config") or config
        h = _first(c, "hidden_size", "n_embd", "d_model")
        heads = _first(c, "num_attention_heads", "n_head", default=max(1, h // 128))
        return cls(hidden=h, layers=_first(c, "num_hidden_layers", "n_layer", "num_layers"),
                   vocab=_first(c, "vocab_size"),
                   intermediate=_first(c, "intermediate_size", "n_inner", "ffn_dim", default=4 * h),
                   heads=heads, kv_heads=_first(c, "num_key_value_heads", default=heads),
                   head_dim=_first(c, "head_dim", default=h // heads),
                   experts=_first(c, "num_local_experts", "num_experts", default=1),
                   gated_mlp=c.get("model_type") not in UNGATED_MLP,
                   tied=bool(config.get("tie_word_embeddings", c.get("tie_word_embeddings", False))))

    def parameters(self) -> int:
        attn = 2 * self.hidden * self.heads * self.head_dim + 2 * self.hidden * self.kv_heads * self.head_dim
        mlp = (3 if self.gated_mlp else 2) * self.hidden * self.intermediate * self.experts
        embed = self.vocab * self.hidden * (1 if self.tied else 2)
        return self.layers * (attn + mlp + 2 * self.hidden) + embed + self.hidden

    def linears(self) -> list[tuple[int, int, int]]:
        """(out_features, in_features, how many) of every quantizable linear layer."""
        h, q, kv, n = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim, self.layers
        mlp = n * self.experts
        up = [(self.intermediate, h, (2 if self.gated_mlp else 1) * mlp), (h, self.intermediate, mlp)]
        return [(q, h, n), (kv, h, 2 * n), (h, q, n)] + up

    @property
    def linear_params(self) -> int:
        return sum(o * i * c for o, i, c in self.linears())

    def weights(self, kind: str, base_bytes: int = 2, group: int | None = None, padded: bool = True) -> int:
        """Weights in `kind`; embeddings, lm_head and norms stay in the base dtype. padded: int4
        in cuda's tinygemm layout (the CPU's int4 layout does not pad)."""
        rest = (self.parameters() - self.linear_params) * base_bytes
        return rest + sum(c * linear_bytes(o, i, kind, base_bytes, group or INT4_GROUP, padded)
                          for o, i, c in self.linears())

    def kv_bytes(self, ctx: int, dtype_bytes: int = 2) -> int:
        """Keys and values of every layer at full length, sliding-window layers too: the static
        cache allocates them so (static_slots(ctx)); the eager path's windows are not counted."""
        return kv_cache_bytes(self.layers, self.kv_heads, self.head_dim, static_slots(ctx), dtype_bytes)

    def activations(self, tokens: int, ctx: int, base_bytes: int = 2) -> int:
        """One forward of `tokens` tokens over a cache of ctx: hidden states, q/k/v, the MLP's
        intermediates and, as the worst case, a float32 score matrix and its mask."""
        width = 4 * self.hidden + (self.heads + 2 * self.kv_heads) * self.head_dim + 3 * self.intermediate
        keys = static_slots(ctx)
        return tokens * width * base_bytes + self.heads * tokens * keys * 4 + tokens * keys * (1 + base_bytes)

    def work_bytes(self, ctx: int, base_bytes: int = 2) -> int:
        """Working memory of the forward beside weights and KV cache: a prefill chunk, the one
        CUDA graph pool every decode bucket shares (one owner thread records them all: its peak
        is the largest bucket's, with that graph's output logits), the verifier's logits."""
        prefill = self.activations(min(PREFILL_CHUNK, ctx), ctx, base_bytes)
        pool = max(self.activations(b, ctx, base_bytes) + b * self.vocab * base_bytes for b in BUCKETS)
        return prefill + pool + LOGIT_ROWS * self.vocab * LOGIT_BYTES

    def dequant_bytes(self, kind: str, base_bytes: int = 2) -> int:
        """int8 weight-only computes mm(x, w.t().to(dtype)): a chunk of 2+ rows writes a copy of
        the weight in the base dtype first (inductor folds the cast for one row only), one
        linear at a time: the largest one's copy."""
        return max(o * i for o, i, _ in self.linears()) * base_bytes if kind == "int8" else 0

    def load_bytes(self, kind: str, base_bytes: int = 2) -> int:
        """Transient memory of quantizing onto the device: the largest linear layer in the base
        dtype, its padded copy and its int32 codes."""
        if kind == "none":
            return 0
        return max(o * i for o, i, _ in self.linears()) * (2 * base_bytes + 4)

    def needed(self, kind: str, ctx: int, margin: int, base_bytes: int = 2, group: int | None = None,
               padded: bool = True) -> int:
        """Everything the target holds at its peak (loading, or running at ctx), plus the margin;
        on cuda (padded) also cuBLAS's workspaces."""
        run = (self.kv_bytes(ctx, base_bytes) + self.work_bytes(ctx, base_bytes)
               + self.dequant_bytes(kind, base_bytes) + (CUDA_WORKSPACES if padded else 0))
        weights = self.weights(kind, base_bytes, group, padded)
        return weights + max(run, self.load_bytes(kind, base_bytes)) + margin


def linear_bytes(out: int, inp: int, kind: str, base_bytes: int = 2, group: int = INT4_GROUP,
                 padded: bool = True) -> int:
    """One linear layer's weight: int8 a byte per weight and a scale per row; int4 half a byte
    and a bf16 scale and zero per group, over tinygemm's padded shape when `padded`."""
    if kind == "none":
        return out * inp * base_bytes
    if kind == "int8":
        return out * inp + out * base_bytes
    if kind == "int4":
        if padded:
            out, inp = _ceil(out, INT4_ROWS), _ceil(inp, INT4_COLUMNS)
        return out * inp // 2 + out * (inp // group) * 2 * 2
    raise ValueError(f"unknown precision '{kind}'; known: none, int8, int4")


def _first(c: dict, *keys: str, default: int | None = None) -> int:
    for k in keys:
        if c.get(k):
            return int(c[k])
    if default is None:
        raise PairError(f"config.json has none of {', '.join(keys)}; cannot size the model")
    return default


def _ceil(n: int, m: int) -> int:
    return -(-n // m) * m


def span_limit(ctx: int, largest_chunk: int = BUCKETS[-1]) -> int:
    """The longest span of the static target: the window plus a padded chunk at its end,
    rounded up to ALIGN (every span then keeps the alignment attention kernels expect)."""
    return _ceil(ctx + largest_chunk, ALIGN)


def static_slots(ctx: int, largest_chunk: int = BUCKETS[-1]) -> int:
    """The static K/V buffers' length: ALIGN past the longest span, so every span is a strict
    prefix (one graph with the span dynamic) and the buffers stay a multiple of ALIGN."""
    return span_limit(ctx, largest_chunk) + ALIGN


def kv_cache_bytes(n_layers: int, n_kv_heads: int, head_dim: int, ctx: int, dtype_bytes: int = 2) -> int:
    """Keys and values of ctx tokens in every layer."""
    return 2 * n_layers * n_kv_heads * head_dim * ctx * dtype_bytes


model_dims = ModelDims.from_config  # of a llama / mistral / qwen2 / gemma3 style config.json

def margin_bytes(total: int | None) -> int:
    """Room left unused: 0.5 GiB plus 1/16 of the card (1.0 GiB at 8 GiB, 2.0 at 24): cuBLAS and
    compile workspaces, allocator fragmentation and other programs grow with the card."""
    return GIB // 2 + (total or 8 * GIB) // 16


def max_context(fits, hi: int = 1 << 22) -> int:
    """The largest ctx for which fits(ctx) holds (0 when none does); fits is monotonic."""
    lo = 0
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


SIZE_KEYS = ("model_type", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
             "head_dim", "intermediate_size", "vocab_size", "tie_word_embeddings", "num_local_experts",
             "num_experts", "sliding_window", "use_sliding_window", "layer_types", "max_position_embeddings")


def size_config(config: dict) -> dict:
    """The part of a config.json that sizes the target (the catalog's target_config)."""
    c = config.get("text_config") or config
    out = {k: c[k] for k in SIZE_KEYS if c.get(k) is not None}
    if "tie_word_embeddings" in config:
        out["tie_word_embeddings"] = config["tie_word_embeddings"]
    return out


def trained_window(config: dict) -> int:
    """The context the target was trained for (max_position_embeddings; 4096 when not given):
    the one bound of the window, for the picker (models/target/choice.py) and the targets."""
    c = config.get("text_config") or config
    return int(c.get("max_position_embeddings") or 4096)
