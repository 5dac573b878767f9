"""Tests that only mean something on a CUDA GPU (`make test-gpu`, TORCHINDUCTOR_CUDAGRAPH_OR_ERROR
=1): CUDA graphs engage, the compiled static target's argmax equals the eager one in float32
across rollbacks and at the window's end, int8/int4 targets load and greedy `duo` equals
`vanilla` on them, and the memory picker's choice runs under a capped GPU memory."""
from __future__ import annotations

import pytest
import torch

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

PROMPTS = ["Write a haiku about the sea.", "What is 17 times 23? Explain briefly.",
           "Translate to French: the cat sleeps on the warm windowsill."]
N = 48
TIE = 0.25  # two bfloat16 steps at these logit sizes (tests/test_target_dtype.py)


@pytest.fixture(scope="module")
def smol_dir():
    from measure.gpu_bench import smol_dir
    return smol_dir  # dtype -> smol-self's converted target


def test_cuda_graphs_engage(smol_dir):
    """No cudagraph skip is logged while the compiled target runs (a skip would fall back
    to plain kernels silently; cudagraph_or_error turns it into an error)."""
    from torch._dynamo.utils import counters

    from models.target.static import StaticTarget

    torch._inductor.config.triton.cudagraph_or_error = True
    before = counters["inductor"]["cudagraph_skips"]
    target = StaticTarget(smol_dir("bfloat16"), "cuda", 256, "bfloat16", buckets=(1, 8))
    try:
        target.logits(list(range(100, 140)), 1)
        for n in (40, 20, 39):
            target.rollback(n)
            assert target.logits(list(range(200, 208)), 8).shape[0] == 8
    finally:
        target.close()
    assert counters["inductor"]["cudagraph_skips"] == before


def _argmaxes(target, steps) -> list[list[int]]:
    out = []
    for keep, chunk in steps:
        target.rollback(keep)
        out.append(target.logits(chunk, len(chunk)).argmax(-1).tolist())
    return out


def test_compiled_static_argmax_equals_eager_in_float32(smol_dir):
    """Same rows' argmax across rollbacks and up to the window's last slot (float32, no TF32)."""
    from models.target.static import StaticTarget
    from models.target.eager import TorchTarget

    torch.backends.cuda.matmul.allow_tf32 = False
    n_ctx, d = 160, smol_dir("float32")
    text = _text_ids(d, n_ctx)  # real text: confident rows, no near-ties to trip on
    p = text[:120]
    steps = _refilled([(0, p), (120, p[:8]), (124, p[8:9]), (100, p[10:42]), (128, p[:3]),
                       (n_ctx - 8, p[50:58]), (n_ctx - 1, p[60:61])], text)
    eager = TorchTarget(d, "cuda", n_ctx, "float32")
    want = _argmaxes(eager, steps)
    eager.close()
    static = StaticTarget(d, "cuda", n_ctx, "float32", buckets=(1, 2, 4, 8, 16, 32))
    got = _argmaxes(static, steps)
    static.close()
    assert got == want


def _text_ids(d, n: int) -> list[int]:
    from transformers import AutoTokenizer

    ids = AutoTokenizer.from_pretrained(str(d))(" ".join(PROMPTS * 40))["input_ids"]
    return list(ids[:n])


def _refilled(steps, text):
    """Each step's cache must hold `keep` tokens first: rollbacks only shrink it, so a step
    past the first 120 tokens refills that many from the text."""
    out = []
    for keep, chunk in steps:
        if keep > 120:
            out.append((0, text[:keep]))
        out.append((keep, chunk))
    return out


@pytest.fixture(scope="module", params=[("int8", "float32"), ("int4", "bfloat16")])
def quant_pair(request):
    from models.loader import LoadOptions, Pair

    quant, dtype = request.param
    pair = Pair("smol-self", LoadOptions(device="cuda", dtype=dtype, target_quant=quant,
                                         target_compile="on"))
    yield pair
    pair.close()


def _tokens(pair, ids, method):
    from core.engine import GenConfig
    from scripts.benchmark import run_one

    return run_one(pair, ids, GenConfig(method=method, max_new_tokens=N))["token_ids"]


def test_quantized_target_loads_and_duo_equals_vanilla(quant_pair):
    """int8 (float32): token for token. int4 (bfloat16 only): equal, or parted at a tie."""
    t = quant_pair.target
    assert t.device.startswith("cuda") and t.path == "static-compiled"
    for prompt in PROMPTS:
        ids = quant_pair.prompt_ids(prompt)
        want, got = _tokens(quant_pair, ids, "vanilla"), _tokens(quant_pair, ids, "duo")
        if t.dtype == "float32":
            assert got == want, f"{t.quant}: duo left vanilla on {prompt!r}"
            continue
        i = next((i for i, (a, b) in enumerate(zip(want, got)) if a != b), None)
        if i is not None:
            t.rollback(0)
            logits = t.logits(ids + want[:i], 1)[0]
            top = float(logits.max())
            assert top - float(logits[want[i]]) <= TIE and top - float(logits[got[i]]) <= TIE


@pytest.fixture
def capped():
    """Caps this process's GPU memory at what it holds now plus `room` bytes (what the
    picker is then told is free)."""
    def cap(room: int) -> int:
        import gc

        gc.collect()
        torch.cuda.empty_cache()
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction((torch.cuda.memory_reserved(0) + room)
                                                   / total, 0)
        return room
    yield cap
    torch.cuda.set_per_process_memory_fraction(1.0, 0)
    torch.cuda.empty_cache()


def test_memory_picker_choice_runs_under_the_cap(smol_dir, capped, monkeypatch):
    """The cap leaves room for int8 but not bf16 (margin included): the picker says int8,
    and the int8 target with a full window runs under the cap within the picker's estimate."""
    import json

    import models.fit.memory as memory
    from models.target.choice import pick_ctx
    from models.target.eager import TorchTarget

    d = smol_dir("bfloat16")
    dims = memory.model_dims(json.loads((d / "config.json").read_text()))
    ctx = 2048
    need = {k: dims.needed(k, ctx) for k in memory.PRECISIONS}
    free = capped((need["int8"] + need["none"]) // 2)
    pick = memory.pick_quant(dims, ctx, free, "cuda")
    assert pick.kind == "int8", pick.reason
    monkeypatch.setattr(memory, "free_bytes", lambda device: (free, "a capped GPU"))
    n_ctx, _ = pick_ctx(d, "cuda", "bfloat16", None, "int8")
    assert dims.needed("int8", n_ctx) <= free
    torch.cuda.reset_peak_memory_stats()
    held = torch.cuda.memory_allocated()
    target = TorchTarget(d, "cuda", ctx, "bfloat16", "int8", 32)
    try:
        ids = [(i * 37) % 5000 + 100 for i in range(ctx)]
        for start in range(0, ctx, 512):
            target.logits(ids[start:start + 512], 1)
        assert torch.cuda.max_memory_allocated() - held <= need["int8"]
    finally:
        target.close()
    with pytest.raises(memory.DoesNotFit):
        memory.pick_quant(dims, ctx, int(need["int4"] * 0.9), "cuda")
