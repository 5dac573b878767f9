"""The eager CPU target's linear layers on oneDNN's packed weights (models/target/packed.py)
give the unpacked layers' products and `vanilla`'s greedy output, and are chosen where they
fit; the default pair's CPU target is packed (tests/test_defaults.py)."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from core.engine import GenConfig
from models.fit.memory import GIB
from models.target import packed
from tests.conftest import UNTIMED
from tests.cut_target import load_cut

PROMPTS = ["Why is the sky blue?", "Write a Python function that reverses a string."]
N = 24  # tokens: the cut target turns drafts down within them (asserted)


@pytest.mark.parametrize("bias", [False, True])
def test_packed_linear_gives_the_linear_s_products(bias):
    """1 and 2 rows take torch's own product (the same bits), 3 and more the packed one."""
    torch.manual_seed(0)
    linear = nn.Linear(96, 300, bias=bias)
    twin = packed.PackedLinear(linear)
    assert twin.weight is linear.weight and twin.packed.layout == torch._mkldnn
    with torch.inference_mode():
        for shape in [(1, 96), (1, 2, 96), (3, 96), (1, 7, 96), (40, 96)]:
            x = torch.randn(shape)
            got, want = twin(x), linear(x)
            assert got.shape == want.shape
            if x.reshape(-1, 96).shape[0] < packed.PACKED_FROM:
                assert torch.equal(got, want)
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def tiny() -> nn.Module:
    return nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Sequential(nn.Linear(64, 32)))


def test_pack_replaces_every_linear_layer():
    model = tiny()
    x = torch.randn(5, 64)
    want = model(x)
    assert packed.pack(model) == 2
    assert not any(isinstance(m, nn.Linear) for m in model.modules())
    torch.testing.assert_close(model(x), want, atol=1e-5, rtol=1e-5)


def test_a_float32_cpu_target_is_packed_where_the_copy_fits():
    model, f32 = tiny(), torch.float32
    need = packed.linear_bytes(model)
    assert need == (64 * 64 + 64 * 32) * 4
    assert packed.choose("cpu", f32, "none", model, free=8 * GIB)[0]
    ok, why = packed.choose("cpu", f32, "none", model, free=packed.MARGIN + need - 1)
    assert not ok and "does not fit" in why
    for device, dtype, quant, needle in [("cuda", f32, "none", "on cuda"),
                                         ("cpu", f32, "int8", "int8"),
                                         ("cpu", torch.bfloat16, "none", "float32 only")]:
        ok, why = packed.choose(device, dtype, quant, model, free=8 * GIB)
        assert not ok and needle in why


@pytest.fixture(scope="module")
def cut_packed(pair_with):
    """The cut smol-self (tests/cut_target.py) on the eager path, its weights packed."""
    pair = load_cut(pair_with, target_pack=True)
    assert pair.target.packed and "packed weights" in pair.describe()["target"]
    return pair


@pytest.fixture(scope="module")
def oracle(pair_with):
    """The unpacked cut target's vanilla output for each prompt (kept on disk)."""
    from tests.conftest import vanilla_ids

    cut = load_cut(pair_with)
    assert not cut.target.packed
    return {p: vanilla_ids(cut, cut.prompt_ids(p), N) for p in PROMPTS}


@pytest.mark.parametrize("method", ["vanilla", "duo"])
def test_packed_eager_target_greedy_identical_to_the_unpacked_vanilla(cut_packed, oracle,
                                                                       method):
    rejected = 0
    for prompt in PROMPTS:
        cut_packed.lookup_memory.clear()
        untimed = {"gamma": 4, **UNTIMED} if method == "duo" else {}  # its rejections counted
        cfg = GenConfig(method=method, max_new_tokens=N, **untimed)
        events = list(cut_packed.generate(cut_packed.prompt_ids(prompt), cfg))
        assert [t for e in events for t in e.tokens] == oracle[prompt], (method, prompt)
        stats = events[-1].stats
        assert stats["target_packed"] is True
        rejected += stats["drafted"] - stats["accepted"]
    assert method == "vanilla" or rejected > 0  # packed chunks of several rows verified
