"""What a target needs on the device (models/fit/footprint.py) and the default pick on 8-24 GiB
cards for every catalog pair: the pick plus its whole estimate fits, so warm-up has room."""
from __future__ import annotations

import pytest

from models.pairs import catalog
from models.fit import footprint, memory
from models.fit.memory import GIB, Budget, model_dims, pair_window, pick_quant, pick_window

CARDS = (8, 12, 16, 24)
BUSY = GIB // 2  # a CUDA context and a desktop already hold this much of the card

# The picker's answer for the catalog's 7-8B pairs (precision, window); the README shows it.
TABLE = {
    "llama2-7b-68m": {8: ("int4", 4096), 12: ("int8", 4096), 16: ("int8", 4096), 24: ("none", 4096)},
    "vicuna-7b-68m": {8: ("int4", 4096), 12: ("int8", 4096), 16: ("int8", 4096), 24: ("none", 4096)},
    "qwen2.5-7b-0.5b": {8: ("int4", 6048), 12: ("int8", 8192), 16: ("int8", 8192), 24: ("none", 8192)},
    "qwen2.5-7b-smol360m": {8: ("int4", 6048), 12: ("int8", 8192), 16: ("int8", 8192), 24: ("none", 8192)},
    "llama3.1-8b-1b": {8: ("int4", 4704), 12: ("int8", 7840), 16: ("int8", 8192), 24: ("none", 8192)},
}


def on_card(gib: int, group: int | None = None) -> Budget:
    return Budget("cuda:0", gib * GIB - BUSY, gib * GIB, group=group)


def default_pick(name: str, gib: int) -> tuple[str, int, int, Budget]:
    """(precision, window, bytes needed, budget) as the loader picks them by default."""
    spec = catalog.get_pair(name)
    config = spec.extra["target_config"]
    dims = model_dims(config)
    group = memory.GGUF_GROUP if "file" in spec.target else None
    budget = on_card(gib, group)
    ctx, kind = pick_window(dims, pair_window(config), budget)
    assert pick_quant(dims, ctx, budget).kind == kind  # the precision picker agrees at that window
    return kind, ctx, budget.needed(dims, kind, ctx), budget


@pytest.mark.parametrize("name", sorted(catalog.load_catalog()))
@pytest.mark.parametrize("gib", CARDS)
def test_the_default_pick_fits_with_its_working_memory(name, gib):
    kind, ctx, need, budget = default_pick(name, gib)
    assert ctx >= memory.MIN_CTX and need <= budget.free
    dims = model_dims(catalog.get_pair(name).extra["target_config"])
    parts = dims.weights(kind, 2, budget.group) + dims.kv_bytes(ctx) + dims.work_bytes(ctx) + budget.margin
    assert parts <= need <= budget.free


def test_the_table_for_the_7_8b_pairs():
    got = {name: {gib: default_pick(name, gib)[:2] for gib in CARDS} for name in TABLE}
    for name, row in got.items():
        print(name, " | ".join(f"{gib} GiB: {memory.precision_label(k)} {ctx}" for gib, (k, ctx) in row.items()))
    assert got == TABLE


def test_precision_is_kept_while_it_holds_4096_tokens():
    dims = model_dims(catalog.get_pair("llama2-7b-68m").extra["target_config"])  # MHA: 0.5 MiB per token
    budget = Budget("cuda", int(17.5 * GIB), 18 * GIB)
    assert pick_window(dims, 8192, budget) == (budget.longest(dims, "none"), "none")
    assert 4096 <= budget.longest(dims, "none") < 8192  # bf16 with a shorter window, not int8 with 8192


def test_margin_grows_with_the_card():
    assert [footprint.margin_bytes(g * GIB) / GIB for g in (8, 12, 16, 24, 80)] == [1.0, 1.25, 1.5, 2.0, 5.5]
    assert Budget("cpu", 8 * GIB).margin == memory.CPU_MARGIN


def test_int4_counts_tinygemm_padding_and_the_group():
    # Qwen2.5-7B: in_features 3584 and 18944 pad to 4096 and 19456 columns on cuda, not on the CPU
    assert footprint.linear_bytes(18944, 3584, "int4") == 18944 * 4096 // 2 + 18944 * 32 * 4
    assert footprint.linear_bytes(3584, 18944, "int4", padded=False) == 3584 * 18944 // 2 + 3584 * 148 * 4
    # a GGUF target's groups of 32 carry four times the scales of groups of 128
    g32, g128 = (footprint.linear_bytes(4096, 4096, "int4", group=g) for g in (32, 128))
    assert g32 - g128 == 4096 * (128 - 32) * 4
    assert footprint.linear_bytes(4096, 4096, "int8") == 4096 * 4096 + 4096 * 2


def test_sliding_layers_are_counted_at_full_length():
    gemma = model_dims(catalog.get_pair("gemma-smol").extra["target_config"])  # 15 of 18 layers slide
    assert gemma.kv_bytes(8192) == footprint.kv_cache_bytes(18, 1, 256, footprint.static_slots(8192))


def test_working_memory_counts_a_prefill_chunk_graph_pools_and_logits():
    dims = model_dims(catalog.get_pair("llama3.1-8b-1b").extra["target_config"])
    scores = dims.heads * footprint.PREFILL_CHUNK * (footprint.static_slots(8192)) * 4
    pools = sum(dims.activations(b, 8192) for b in footprint.BUCKETS)
    logits = footprint.LOGIT_ROWS * dims.vocab * footprint.LOGIT_BYTES
    assert dims.work_bytes(8192) > scores + pools + logits
    assert dims.work_bytes(8192) > dims.work_bytes(4096)
    assert dims.load_bytes("none") == 0 and dims.load_bytes("int4") == 14336 * 4096 * 8
