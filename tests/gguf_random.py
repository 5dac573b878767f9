"""A Llama GGUF of random weights written with the `gguf` package (F16): a target of a shape
no file of which is at hand, for the conversion's tests."""
from __future__ import annotations

from pathlib import Path

import numpy as np


def write_random_gguf(path: Path, config: dict, layers: int | None = None) -> Path:
    """An F16 Llama GGUF of this shape with `layers` layers (default: the config's), random
    weights (one array per shape, shared by the layers: speed does not depend on values)."""
    import gguf

    c, n_layers = config, layers or config["num_hidden_layers"]
    h, f, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    hd = c.get("head_dim") or h // c["num_attention_heads"]
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    w = gguf.GGUFWriter(str(path), "llama")
    _header(w, c, n_layers, hd)
    _vocab(w, v)
    rand = _random_arrays({"embd": (v, h), "q": (q, h), "kv": (kv, h), "o": (h, q),
                           "up": (f, h), "down": (h, f), "out": (v, h)})
    norm = np.ones(h, dtype=np.float32)
    w.add_tensor("token_embd.weight", rand["embd"])
    for i in range(n_layers):
        for name, arr in (("attn_norm", norm), ("attn_q", rand["q"]), ("attn_k", rand["kv"]),
                          ("attn_v", rand["kv"]), ("attn_output", rand["o"]),
                          ("ffn_norm", norm), ("ffn_gate", rand["up"]), ("ffn_up", rand["up"]),
                          ("ffn_down", rand["down"])):
            w.add_tensor(f"blk.{i}.{name}.weight", arr)
    w.add_tensor("output_norm.weight", norm)
    w.add_tensor("output.weight", rand["out"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _header(w, c: dict, n_layers: int, head_dim: int) -> None:
    w.add_context_length(min(int(c["max_position_embeddings"]), 131072))
    w.add_embedding_length(c["hidden_size"])
    w.add_block_count(n_layers)
    w.add_feed_forward_length(c["intermediate_size"])
    w.add_head_count(c["num_attention_heads"])
    w.add_head_count_kv(c["num_key_value_heads"])
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(float(c["rope_theta"]))
    w.add_layer_norm_rms_eps(float(c["rms_norm_eps"]))
    w.add_file_type(1)  # mostly F16


def _vocab(w, size: int) -> None:
    """A sentencepiece-style vocabulary: unk, bos, eos, the 256 byte tokens, filler words."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    tokens += [f"\u2581t{i}" for i in range(size - len(tokens))]
    types = [2, 3, 3] + [6] * 256 + [1] * (size - 259)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * size)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)


def _random_arrays(shapes: dict[str, tuple[int, int]]) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {k: (rng.standard_normal(s, dtype=np.float32) * 0.02).astype(np.float16)
            for k, s in shapes.items()}

