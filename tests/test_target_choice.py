"""`--target-compile`: `auto` is on for cuda; on the CPU it follows a measurement made once
and cached; bad values are refused with the list of choices."""
from __future__ import annotations

import pytest

import models.target_choice as choice


@pytest.fixture
def fake_targets(monkeypatch, tmp_path):
    """Record which target class load_target builds, without loading a model."""
    import models.target_static as static
    import models.target_torch as eager

    built = []

    class Fake:
        def __init__(self, *args, **kwargs):
            built.append((type(self).__name__, kwargs.get("compile")))

    monkeypatch.setattr(static, "StaticTarget", type("StaticTarget", (Fake,), {}))
    monkeypatch.setattr(eager, "TorchTarget", type("TorchTarget", (Fake,), {}))
    monkeypatch.setenv("DUO_CACHE_DIR", str(tmp_path))
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


@pytest.mark.parametrize("eager,compiled,picked", [([0.030, 0.060], [0.020, 0.050], "StaticTarget"),
                                                  ([0.030, 0.060], [0.040, 0.070], "TorchTarget")])
def test_auto_on_the_cpu_follows_the_measurement_once(fake_targets, monkeypatch, eager,
                                                      compiled, picked):
    calls = []

    def compare(*args):
        calls.append(args)
        return {"eager": eager, "compiled": compiled}
    monkeypatch.setattr(choice, "compare_paths", compare)
    for _ in range(2):
        t = choice.load_target("m", "cpu", "float32", 4096, "auto")
        assert fake_targets[-1][0] == picked and "measured faster on this CPU" in t.compile_choice
    assert len(calls) == 1  # the verdict is cached
