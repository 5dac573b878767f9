"""The target's dtype: float32 on the CPU by default (exact greedy, tested in
test_real_lossless.py); in bfloat16, as on cuda, verifying n tokens at once rounds differently
from n single steps, so greedy output may leave the target's own choice, but only at ties."""
from __future__ import annotations

import numpy as np
import pytest

from core.engine import GenConfig
from models.target.eager import pick_dtype
from scripts.benchmark import run_one
from tests.conftest import UNTIMED

PROMPTS = ["Why is the sky blue?", "What is 17 times 23? Show the steps.",
           "Write a Python function that reverses a linked list.",
           "Explain recursion to a ten-year-old.", "Write a short poem about autumn leaves.",
           "Translate into French: 'Where is the train station?'"]
N = 64
TIE = 0.5  # logits: a few bfloat16 steps at their size (0.125 between 16 and 32)


def test_dtype_defaults_and_errors():
    assert pick_dtype("cpu") == "float32"
    assert pick_dtype("cuda") == pick_dtype("cuda:1") == "bfloat16"
    assert pick_dtype("cpu", "bfloat16") == "bfloat16"
    with pytest.raises(ValueError, match="unknown target dtype 'int3'; known: auto, float32"):
        pick_dtype("cpu", "int3")


def test_conversion_in_bfloat16_rounds_the_float32_weights(tmp_path, monkeypatch):
    """A GGUF converted for a bfloat16 target: its own folder (`-bfloat16`) with the config and
    tokenizer, every weight the float32 conversion's rounded to bfloat16. A random 2-layer
    GGUF (tests/gguf_random.py): the same code path as smol-self's (about 20 CPU seconds
    on a fresh cache), a fraction of the cost."""
    import torch
    from safetensors.torch import load_file

    from tests.gguf_random import write_random_gguf
    from measure.gpu_bench import TINY
    from models.pairs.convert import converted_dir

    monkeypatch.setenv("DUO_CACHE_DIR", str(tmp_path))
    gguf = write_random_gguf(tmp_path / "tiny.gguf", TINY)
    bf16, fp32 = converted_dir(gguf, None, "bfloat16"), converted_dir(gguf)
    assert bf16.name == f"{fp32.name}-bfloat16" and bf16.parent == tmp_path / "converted"
    assert {"config.json", "tokenizer.json"} <= {f.name for f in bf16.iterdir()}
    a, b = load_file(bf16 / "model.safetensors"), load_file(fp32 / "model.safetensors")
    assert a.keys() == b.keys() and {t.dtype for t in a.values()} == {torch.bfloat16}
    assert all(torch.equal(a[k], b[k].to(torch.bfloat16)) for k in a)


def test_a_conversion_parses_its_gguf_once(tmp_path):
    """Inside a conversion transformers' three reads of the header (config, tokenizer,
    weights) get one parse and its ~400 tensor-name maps one map; gguf's own come back after
    (smol-self's and gemma-smol's conversions were byte for byte the same either way)."""
    import gguf

    from tests.gguf_random import write_random_gguf
    from measure.gpu_bench import TINY
    from models.pairs.convert import _gguf_parsed_once

    path = write_random_gguf(tmp_path / "tiny.gguf", TINY)
    reader_class, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    with _gguf_parsed_once():
        assert gguf.GGUFReader(path) is gguf.GGUFReader(str(path))
        arch = gguf.MODEL_ARCH.LLAMA
        assert gguf.get_tensor_name_map(arch, 2) is gguf.get_tensor_name_map(arch, 2)
    assert (gguf.GGUFReader, gguf.get_tensor_name_map) == (reader_class, name_map)


def test_one_conversion_at_a_time_and_the_waiter_gets_its_folder(tmp_path, monkeypatch):
    """Two loads of one GGUF at once (the app and a CLI, or the suite's workers on a fresh
    cache): the second waits on the first's lock, then finds its folder; one conversion."""
    import threading
    import time

    import models.pairs.convert as convert

    monkeypatch.setenv("DUO_CACHE_DIR", str(tmp_path))
    gguf = tmp_path / "a.gguf"
    gguf.write_bytes(b"GGUF")
    made = []

    def fake_convert(src, out, dtype):
        made.append(out)
        time.sleep(0.3)  # the other load arrives meanwhile
        out.mkdir(parents=True)
        (out / "model.safetensors").write_bytes(b"")
    monkeypatch.setattr(convert, "_convert", fake_convert)
    folders = []
    loads = [threading.Thread(target=lambda: folders.append(convert.converted_dir(gguf)))
             for _ in range(2)]
    for load in loads:
        load.start()
    for load in loads:
        load.join()
    assert len(made) == 1 and folders == [made[0]] * 2


@pytest.fixture(scope="module")
def bf16_pair(pair_with):
    """smol-self with a bfloat16 target loaded from the float32 conversion the suite made
    (rounded at load): bit for bit the weights of its bfloat16 conversion (the GGUF's values
    rounded either way; the conversion: the test above), which a fresh cache would convert
    again (about 20 CPU seconds)."""
    import models.loader as loader
    from tests.cut_target import source

    folder = source("smol-self")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(loader, "converted_dir", lambda *a, **k: folder)
        pair = pair_with(dtype="bfloat16")
    assert pair.target_dir == folder and str(pair.target.model.dtype) == "torch.bfloat16"
    return pair


def tokens(pair, ids, method):
    untimed = UNTIMED if method == "duo" else {}  # its rejections counted
    stats = run_one(pair, ids, GenConfig(method=method, max_new_tokens=N, gamma=4, **untimed))
    return stats["token_ids"], stats


# the two methods share the prompts out (each prompt's drafts are rejected by sps on 2, 3 and
# 5 and by duo on 0 and 4; sps on 1 and duo on 5 end early at the end id)
@pytest.mark.parametrize("method,prompts", [("sps", (1, 2, 3)), ("duo", (0, 4, 5))])
def test_bfloat16_leaves_the_target_s_choice_only_at_rounding_ties(bf16_pair, method, prompts):
    """Every token `sps` and `duo` give in bfloat16 is the target's greedy choice after the
    same prefix, or within a rounding tie of it. The target's logits for every position come
    from one forward of the prompt and the answer (rounded as a verify chunk is): vanilla's
    64 single steps a prompt (30 CPU seconds on a cold cache, bfloat16 is slow on a CPU) gave
    the reference only up to the first token that left it; this checks every token."""
    rejected = 0
    for prompt in (PROMPTS[i] for i in prompts):
        ids = bf16_pair.prompt_ids(prompt)
        got, stats = tokens(bf16_pair, ids, method)
        assert stats["target_dtype"] == "bfloat16" and 0 < len(got) <= N
        rejected += stats["drafted"] - stats["accepted"]
        bf16_pair.target.rollback(0)
        rows = bf16_pair.target.logits(ids + got, len(got) + 1).float().cpu().numpy()
        gap = rows.max(-1)[:-1] - rows[np.arange(len(got)), got]
        assert (gap <= TIE).all(), \
            f"{method} left the target's choice at token {int(gap.argmax())} of {prompt!r}"
        if len(got) < N:  # it ended where the target's choice (or a tie) is an end id
            eos = sorted(bf16_pair.target.eos_ids)
            assert stats["stop_reason"] == "eos" and rows[-1].max() - rows[-1][eos].max() <= TIE
    assert rejected > 0  # rolled back in bfloat16
