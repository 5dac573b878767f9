"""The static target's FlexAttention path (models/target/flex.py) against today's packed SDPA
(models/target/attention.py): same logits within 1e-5 and the same argmax, float32, tiny
random models (a Llama and a Gemma-3-like one with sliding-window layers)."""
from __future__ import annotations

import pytest
import torch

from measure.gpu_bench import TINY, random_model
from models.target import flex
from models.target.static import StaticTarget

REASON = flex.unavailable("cpu")
needs_flex = pytest.mark.skipif(REASON is not None, reason=f"no FlexAttention: {REASON}")
# a prefill chunk, then decode steps of 1 and 8 tokens up to and across the 256 -> 384 span
STEPS = [200, 8, 1, 8, 8, 8, 1, 8, 8, 1, 8, 8]


def gemma_like():
    """A tiny Gemma 3 text model: a sliding-window layer (window 32) then a full one."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(0)
    cfg = Gemma3TextConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                           num_key_value_heads=2, head_dim=16, intermediate_size=128,
                           vocab_size=320, max_position_embeddings=1024, sliding_window=32,
                           layer_types=["sliding_attention", "full_attention"])
    return Gemma3ForCausalLM(cfg).to(torch.float32).eval()


def llama(layers: int = 2):
    return random_model({**TINY, "num_hidden_layers": layers}, "cpu", torch.float32)


def target(model, attention: str, compile: bool = False, buckets=(1, 8)) -> StaticTarget:
    return StaticTarget("tiny", "cpu", 1024, "float32", compile=compile, buckets=buckets,
                        model=model, attention=attention)


def run(t: StaticTarget) -> list[torch.Tensor]:
    """Logits of every position of every step (float32, on the CPU)."""
    out, n = [], 0
    for size in STEPS:
        ids = [(7 * (n + i)) % 300 + 3 for i in range(size)]
        out.append(t.logits(ids, size).float().cpu())
        n += size
    assert 384 in t.spans and n > 256  # the steps crossed the 256 -> 384 span
    return out


def assert_same(a: list[torch.Tensor], b: list[torch.Tensor]) -> None:
    for x, y in zip(a, b, strict=True):
        assert (x - y).abs().max().item() <= 1e-5
        assert torch.equal(x.argmax(-1), y.argmax(-1))


def test_unknown_attention_is_refused_by_name():
    with pytest.raises(ValueError, match="unknown attention 'paged'.*sdpa, flex"):
        StaticTarget("no-such-dir", "cpu", attention="paged")


def test_flex_refuses_a_device_it_cannot_compile_for():
    assert "mps" in flex.unavailable("mps")
    with pytest.raises(ValueError, match="attention 'flex' is not available"):
        flex.module_for("flex", "mps")


@needs_flex
@pytest.mark.parametrize("build", [llama, gemma_like], ids=["llama", "gemma3-sliding"])
def test_flex_equals_sdpa_eager(build):
    """The uncompiled static target: prefill and 1/8-token steps across a span crossing."""
    sdpa, flx = target(build(), "sdpa"), target(build(), "flex")
    assert_same(run(sdpa), run(flx))
    sdpa.close(), flx.close()


@needs_flex
def test_compiled_flex_equals_sdpa():
    """The compiled flex step (inductor's CPU template) against the eager SDPA path, across a
    span crossing (the span stays dynamic: no recompile). One chunk size, 8 (a compile each):
    the 1-token steps run padded to it. One layer: inductor emits the template once a layer
    (each its own C++ file, g++ about 10 CPU s each cold: 2 layers 41 CPU s, 1 layer 29);
    what a layer does with its own cache and mask is flex's eager path's, tested on two
    layers above (and the Gemma-like mix), and the compiled step's on two and more layers
    in tests/test_gpu.py and tests/test_target_static.py."""
    from torch._dynamo.utils import counters

    sdpa = target(llama(1), "sdpa")
    flx = target(llama(1), "flex", compile=True, buckets=(8,))
    # the eager flex prefill traces its own wrapper once per length: run's first, here
    flx.logits([3] * STEPS[0], 1), flx.rollback(0)
    graphs = counters["stats"]["unique_graphs"]  # after the warm-up
    assert_same(run(sdpa), run(flx))
    assert counters["stats"]["unique_graphs"] == graphs
    sdpa.close(), flx.close()


def test_flex_asks_for_ieee_float32_dots_on_cuda():
    """torch 2.11 compiled a float32 flex kernel on cuda with TF32 dots (5e-3 off the eager
    SDPA on the first H100 run): the kernel options ask for IEEE there, nothing elsewhere."""
    from types import SimpleNamespace

    assert flex.kernel_options(SimpleNamespace(is_cuda=True, dtype=torch.float32)) == {
        "FLOAT32_PRECISION": "'ieee'"}
    assert flex.kernel_options(SimpleNamespace(is_cuda=True, dtype=torch.bfloat16)) is None
    assert flex.kernel_options(torch.zeros(1)) is None


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_compiled_flex_equals_sdpa_on_cuda():
    """The compiled flex step on cuda (float32, chunk sizes 1 and 8) against the eager SDPA
    path, across a span crossing (the span stays dynamic)."""
    def cuda_target(attention, compile):
        return StaticTarget("tiny", "cuda", 1024, "float32", compile=compile, buckets=(1, 8),
                            model=random_model(TINY, "cuda", torch.float32),
                            attention=attention)
    sdpa, flx = cuda_target("sdpa", False), cuda_target("flex", True)
    assert_same(run(sdpa), run(flx))
    sdpa.close(), flx.close()


def test_window_bench_compares_the_attentions_tiny(tmp_path):
    """scripts/window_bench.py --attention at its tiny size: a row per attention, span and
    chunk, and the ratio column."""
    import json

    import scripts.window_bench as wb
    wb.main(["--attention", "sdpa,flex", "--tiny", "--device", "cpu", "--chunks", "1,8",
             "--repeats", "1", "--out", str(tmp_path)])
    rows = json.loads((tmp_path / "attention.json").read_text())
    assert {(r["attention"], r["span"], r["chunk"]) for r in rows} == {
        (a, s, n) for a in ("sdpa", "flex") for s in (256, 512) for n in (1, 8)}
    table = (tmp_path / "attention.md").read_text()
    assert "| flex / sdpa |" in table and "| 512 | 8 |" in table
