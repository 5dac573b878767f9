"""`--target-compile`: `auto` is on for cuda (eager, and saying why, without Triton) and off on
the CPU, with nothing timed; bad values are refused with the list of choices.
`--target-dtype auto` on a GPU without bfloat16, and the default window."""
from __future__ import annotations

import pytest

import models.target.choice as choice


@pytest.fixture
def fake_targets(monkeypatch):
    """Record which target class load_target builds, without loading a model."""
    import models.target.static as static
    import models.target.eager as eager

    built = []

    class Fake:
        def __init__(self, *args, **kwargs):
            built.append((type(self).__name__, kwargs.get("compile")))

    monkeypatch.setattr(static, "StaticTarget", type("StaticTarget", (Fake,), {}))
    monkeypatch.setattr(eager, "TorchTarget", type("TorchTarget", (Fake,), {}))
    monkeypatch.setattr(choice, "triton_missing", lambda: None)
    return built


def test_auto_compiles_on_cuda_and_obeys_on_off(fake_targets):
    t = choice.load_target("m", "cuda", "bfloat16", 4096, "auto")
    assert fake_targets[-1] == ("StaticTarget", True) and "compiled on cuda" in t.compile_choice
    choice.load_target("m", "cpu", "float32", 4096, "on")
    assert fake_targets[-1] == ("StaticTarget", True)
    t = choice.load_target("m", "cuda", "bfloat16", 4096, "off")
    assert fake_targets[-1] == ("TorchTarget", None) and t.compile_choice == "off: as asked"
    with pytest.raises(ValueError, match="--target-compile must be one of auto, on, off"):
        choice.load_target("m", "cpu", "float32", 4096, "yes")


def test_auto_runs_the_eager_target_on_the_cpu_and_says_why(fake_targets):
    t = choice.load_target("m", "cpu", "float32", 4096, "auto")
    assert fake_targets[-1] == ("TorchTarget", None) and t.compile_choice == f"auto: {choice.CPU_PATH}"


def test_cuda_without_triton_runs_eager_and_says_why(fake_targets, monkeypatch):
    monkeypatch.setattr(choice, "triton_missing", lambda: "Triton is not installed (pip install triton)")
    t = choice.load_target("m", "cuda", "bfloat16", 4096, "auto")
    assert fake_targets[-1] == ("TorchTarget", None)
    assert t.compile_choice == "auto: eager, since Triton is not installed (pip install triton)"
    with pytest.raises(ValueError, match="--target-compile on: Triton is not installed"):
        choice.load_target("m", "cuda", "bfloat16", 4096, "on")
    choice.load_target("m", "cpu", "float32", 4096, "on")  # the CPU compiles without Triton
    assert fake_targets[-1] == ("StaticTarget", True)


def test_triton_missing_tells_package_from_gpu(monkeypatch):
    import torch.utils._triton as triton

    monkeypatch.setattr(triton, "has_triton_package", lambda: False)
    assert "not installed" in choice.triton_missing()
    monkeypatch.setattr(triton, "has_triton_package", lambda: True)
    monkeypatch.setattr(triton, "has_triton", lambda: False)
    assert "compute capability 7.0" in choice.triton_missing()
    monkeypatch.setattr(triton, "has_triton", lambda: True)
    assert choice.triton_missing() is None


def test_auto_dtype_is_float16_on_a_gpu_without_bfloat16(monkeypatch):
    import torch

    from models.target.eager import pick_dtype
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: including_emulation)
    assert pick_dtype("cuda") == "float16"  # emulated bf16 does not count
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)
    assert pick_dtype("cuda:1") == "bfloat16"
    assert pick_dtype("cpu") == "float32" and pick_dtype("cuda", "float32") == "float32"


LLAMA31_8B = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
              "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
              "max_position_embeddings": 131072}


@pytest.mark.parametrize("gib, ctx, why", [(24, 8192, "the default, min(trained window 131072, 8192)"),
                                           (8, 4704, "what cuda:0 (Fake, 8.0 GiB total) holds in int4"),
                                           (4, 64, "holds in int4")])
def test_default_window_is_the_trained_capped_at_8192_and_by_memory(monkeypatch, tmp_path, gib, ctx, why):
    import json

    from models.fit import memory
    (tmp_path / "config.json").write_text(json.dumps(LLAMA31_8B))
    where = f"cuda:0 (Fake, {gib:.1f} GiB total)"
    free = int((gib - 0.5) * memory.GIB)
    monkeypatch.setattr(memory, "device_memory", lambda device: (free, gib * memory.GIB, where))
    monkeypatch.setattr(choice, "_running", lambda device, dtype: memory.PRECISIONS)
    got, reason = choice.pick_ctx(tmp_path, "cuda:0", "bfloat16")
    assert got == ctx and why in reason
    assert choice.pick_ctx(tmp_path, "cuda:0", "bfloat16", 100_000) == (100_000, "as asked")
    monkeypatch.setattr(memory, "device_memory", lambda device: (None, None, device))
    assert choice.pick_ctx(tmp_path, "mps", "bfloat16")[0] == 8192
