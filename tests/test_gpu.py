"""The GPU tests (`make test-gpu`: the cuda cases, gpu marker, TORCHINDUCTOR_CUDAGRAPH_OR_ERROR=1)
and their CPU twins (the same functions in `make test`, so an API drift fails here first): the
compiled static target's argmax equals the eager one in float32 across rollbacks and at the
window's end; crossing spans compiles and records nothing after a span's first crossing; int8 and
int4 targets give greedy `duo` = `vanilla`; the memory picker's choice runs within its estimate
on a simulated small card; a switch of compiled targets on the owner thread frees their code.
cuda runs smol-self's weights, the CPU a 2-layer random Llama.
long: each cuda check and its CPU twin are one function, with the helpers both use."""
from __future__ import annotations

import json
from contextlib import contextmanager

import pytest
import torch

CUDA = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
DEVICES = [pytest.param("cpu", id="cpu"), pytest.param("cuda", id="cuda", marks=CUDA)]
PROMPTS = ["Write a haiku about the sea.", "What is 17 times 23? Explain briefly.",
           "Translate to French: the cat sleeps on the warm windowsill."]
N = 48
TIE = 0.25  # two bfloat16 steps at these logit sizes (tests/test_target_dtype.py)
# The compiled twins share one compiled target a device (`cpu_compiled`, `cuda_compiled`: one
# window, one set of chunk sizes, float32, two graphs: the 1-token step and the dynamic
# chunk). A target of each twin's own traced both again: about 6 CPU seconds each from the
# on-disk inductor cache, and 75-94 s each on an H100 beside five other workers (2026-11-27).
CPU_CTX, CPU_BUCKETS = 600, (1, 4, 16)  # two sizes past 1: the dynamic chunk, as the app's
# a compile of smol-self's step on cuda takes about 30 s a chunk size (H200, 2026-11-26): the
# pairs loaded here compile three sizes, not the app's six (chunks pad up to the next size)
GPU_BUCKETS = (1, 8, 32)


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


@pytest.fixture(scope="module")
def cpu_compiled():
    """The CPU twins' compiled target (float32, CPU_CTX, CPU_BUCKETS), shared: each twin
    rolls it back to what it needs. Made on an owner thread (models/owner.py), as the app
    makes its target; the switch test (after the twins) closes it there. `warm_graphs`:
    dynamo's graph count after its warm-up (no twin's use may add one)."""
    from torch._dynamo.utils import counters

    from models.owner import Owner

    owner = Owner()
    target = owner.call(static, "cpu", "float32", CPU_CTX, CPU_BUCKETS)
    target.warm_graphs, target.owner = counters["stats"]["unique_graphs"], owner
    yield target
    owner.call(target.close)  # again, if the switch closed it: a no-op
    owner.stop()


@pytest.fixture(scope="module")
def cuda_compiled():
    """The cuda twins' compiled target (smol-self, float32: the argmax check's dtype, no TF32;
    CPU_CTX, CPU_BUCKETS), shared as on the CPU, made and run on this thread (the owner
    thread's own check: tests/test_owner_thread.py)."""
    from torch._dynamo.utils import counters

    torch.backends.cuda.matmul.allow_tf32 = False
    target = static("cuda", "float32", CPU_CTX, CPU_BUCKETS)
    target.warm_graphs = counters["stats"]["unique_graphs"]
    yield target
    target.close()


@contextmanager
def compiled_target(request, device):
    """The device's shared compiled target, empty (and left empty: the fixture closes it)."""
    target = request.getfixturevalue(f"{device}_compiled")
    assert target.model is not None, "the switch test (after the twins) closed it"
    target.rollback(0)
    yield target
    target.rollback(0)


def needs_sm80(device: str, what: str) -> None:
    """bf16 and int4 kernels want compute capability 8.0 (Ampere) or newer: skip, saying why."""
    if device.startswith("cuda") and torch.cuda.get_device_capability(0) < (8, 0):
        cc = ".".join(map(str, torch.cuda.get_device_capability(0)))
        pytest.skip(f"{what} needs compute capability 8.0 or newer; this card has {cc}")


def model_for(device: str, dtype: str):
    """(name or folder, a model or None): smol-self's converted weights on cuda; on the CPU a
    fresh 2-layer random Llama (same seed, same weights: one per target)."""
    from measure.gpu_bench import TINY, random_model, smol_dir
    from models.target.eager import DTYPES

    if device == "cuda":
        return smol_dir(dtype), None
    return "tiny", random_model(TINY, "cpu", DTYPES[dtype])


def static(device, dtype, n_ctx, buckets, compile=True, quant="none"):
    from models.target.static import StaticTarget

    name, model = model_for(device, dtype)
    return StaticTarget(name, device, n_ctx, dtype, compile=compile, buckets=buckets,
                        quant=quant, model=model)


def eager(device, dtype, n_ctx):
    from models.target.eager import TorchTarget

    name, model = model_for(device, dtype)
    return TorchTarget(name, device, n_ctx, dtype, model=model)


def text_ids(device: str, n: int) -> list[int]:
    """Real text on smol-self (confident rows, no near-ties); a fixed walk on the tiny model."""
    if device != "cuda":
        return [(i * 37) % 300 + 3 for i in range(n)]
    from transformers import AutoTokenizer

    from measure.gpu_bench import smol_dir
    ids = AutoTokenizer.from_pretrained(str(smol_dir("float32")))(" ".join(PROMPTS * 40))
    return list(ids["input_ids"][:n])


def test_cuda_graphs_engage_across_rollbacks(device, request):
    """No cudagraph skip while the compiled target runs and rolls back (a skip would fall back
    to plain kernels silently; cudagraph_or_error turns it into an error). The shared target
    is float32; bf16's graphs engage in the owner-thread test (tests/test_owner_thread.py)
    and the memory-cap test, both run under TORCHINDUCTOR_CUDAGRAPH_OR_ERROR=1."""
    from torch._dynamo.utils import counters

    if device == "cuda":
        torch._inductor.config.triton.cudagraph_or_error = True
    before = counters["inductor"]["cudagraph_skips"]
    with compiled_target(request, device) as target:
        target.logits(list(range(100, 140)), 1)
        for n in (40, 20, 39):
            target.rollback(n)
            assert target.logits(list(range(200, 208)), 8).shape[0] == 8
    assert counters["inductor"]["cudagraph_skips"] == before


def _argmaxes(target, steps) -> list[list[int]]:
    out = []
    for keep, chunk in steps:
        target.rollback(keep)
        out.append(target.logits(chunk, len(chunk)).argmax(-1).tolist())
    return out


def _refilled(steps, text):
    """Each step's cache must hold `keep` tokens first: rollbacks only shrink it, so a step
    past the first 120 tokens refills that many from the text."""
    out = []
    for keep, chunk in steps:
        if keep > 120:
            out.append((0, text[:keep]))
        out.append((keep, chunk))
    return out


def test_compiled_static_argmax_equals_eager_in_float32(device, request):
    """Same rows' argmax across rollbacks and up to the window's last slot (float32, no TF32)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    n_ctx = CPU_CTX
    text = text_ids(device, n_ctx)
    p = text[:120]
    steps = _refilled([(0, p), (120, p[:8]), (124, p[8:9]), (100, p[10:42]), (128, p[:3]),
                       (n_ctx - 8, p[50:58]), (n_ctx - 1, p[60:61])], text)
    reference = eager(device, "float32", n_ctx)
    want = _argmaxes(reference, steps)
    reference.close()
    with compiled_target(request, device) as target:  # a 32-token chunk runs eager
        got = _argmaxes(target, steps)
    assert got == want


def test_crossing_spans_compiles_and_records_nothing_after_the_first_time(device, request):
    """Filling 300+ tokens (window 600) crosses the 256 and 384 spans: a second fill, chunk by
    chunk over the same spans, adds no dynamo graph and no cudagraph skip."""
    from torch._dynamo.utils import counters

    from models.target.attention import ALIGN

    ids = text_ids(device, 400)

    def fill(target):
        target.rollback(0)
        target.logits(ids[:200], 1)  # eager prefill (longer than a chunk)
        n = 200
        while n < 392:
            size = 8 if n % 16 else 1
            target.logits(ids[n:n + size], 1)
            n += size
    with compiled_target(request, device) as target:
        assert all(s % ALIGN == 0 for s in target.spans)  # the last span too
        fill(target)
        graphs = counters["stats"]["unique_graphs"]
        skips = counters["inductor"]["cudagraph_skips"]
        fill(target)
        assert counters["stats"]["unique_graphs"] == graphs
        assert counters["inductor"]["cudagraph_skips"] == skips


def test_one_dynamic_graph_serves_every_chunk_length(device, request):
    """Chunks of 1 to 16 tokens, across the 256 span, on a target compiled for (1, 4, 16): each
    gives the eager static target's logits, and after the warm-up no graph is compiled (the
    1-token step and the dynamic chunk serve all) and no CUDA graph skipped. A chunk pads to a
    size (on cuda a CUDA graph per size)."""
    from torch._dynamo.utils import counters

    reference = static(device, "float32", CPU_CTX, CPU_BUCKETS, compile=False)
    ids = text_ids(device, 320)
    with compiled_target(request, device) as target:
        graphs = target.warm_graphs  # since the shared target's warm-up: the other twins' too
        skips = counters["inductor"]["cudagraph_skips"]
        assert [target._size(n) for n in (1, 3, 9)] == [1, 4, 16]
        for t in (target, reference):
            t.logits(ids[:240], 1)
        n = 240
        for size in (1, 2, 3, 9, 5, 6, 11, 8, 1, 16, 3):  # 240 + 65: past the 256 span
            rows = target.logits(ids[n:n + size], size)
            want = reference.logits(ids[n:n + size], size)
            torch.testing.assert_close(rows, want, rtol=1e-4, atol=1e-4)
            n += size
        assert counters["stats"]["unique_graphs"] == graphs
        assert counters["inductor"]["cudagraph_skips"] == skips
    reference.close()


def test_threads_other_than_the_importer_set_up_their_graph_trees(cpu_compiled, monkeypatch):
    """torch before 2.13 asserts when a thread other than the one that imported inductor's
    cudagraph_trees looks up its trees (pytorch issue 123177; the owner thread's load failed
    so under torch 2.11 on the first H100 run). With that lookup patched in, a fresh thread
    fails it, and a step of a target with CUDA graphs on (as on cuda) and the release of
    compiled code each set their thread up first."""
    from torch._inductor import cudagraph_trees as trees

    from models.owner import Owner
    from models.target import static as module

    def strict(local, name):  # torch 2.11's get_obj
        if hasattr(local, name):
            return getattr(local, name)
        assert torch._C._is_key_in_tls(name)
        return torch._C._get_obj_in_tls(name)

    def step_then_lookup():
        cpu_compiled.rollback(0)
        cpu_compiled.logits([3, 4], 1)
        return trees.get_container(0)

    def release_then_lookup():
        module.release_compiled()
        return trees.get_container(0)

    monkeypatch.setattr(trees, "get_obj", strict)
    monkeypatch.setattr(torch.compiler, "reset", lambda: None)  # the twins' code stays
    monkeypatch.setattr(cpu_compiled, "_graphs", True)
    owners = [Owner() for _ in range(3)]
    try:
        with pytest.raises(AssertionError):
            owners[0].call(trees.get_container, 0)
        assert owners[1].call(step_then_lookup).device_index == 0
        assert owners[2].call(release_then_lookup).device_index == 0
    finally:
        for owner in owners:
            owner.stop()


@pytest.mark.parametrize("own_setup", [True, False], ids=["torch-2.13", "torch-2.11"])
def test_a_reset_on_a_fresh_thread_empties_the_trees_graph_thread_set_up(own_setup,
                                                                        monkeypatch):
    """graph_thread stashes a fresh thread's trees in torch's thread-local state, where
    reset_cudagraph_trees looks (torch 2.13 returns early, freeing nothing, where it finds
    none): after a lookup there, a reset leaves the thread's container empty. With torch's
    `_initialize_tls`, and without it (torch 2.11 has none: graph_thread's own steps)."""
    from torch._inductor import cudagraph_trees as trees

    from models.owner import Owner
    from models.target.static import graph_thread

    if not own_setup:
        monkeypatch.delattr(trees, "_initialize_tls", raising=False)

    def set_up_look_up_reset():
        graph_thread()
        trees.get_container(0)
        containers = trees.get_obj(trees.local, "tree_manager_containers")
        held = len(containers)
        trees.reset_cudagraph_trees()
        return held, len(containers)

    owner = Owner()
    try:
        assert owner.call(set_up_look_up_reset) == (1, 0)
    finally:
        owner.stop()


def test_the_warm_up_runs_each_chunk_size_in_every_span_a_generation_reaches():
    """With CUDA graphs (one recorded per chunk size and span) the warm-up runs each size
    three times in every span up to the window's end, a padded chunk at the end included;
    without them (one compiled graph for every span) in the first span alone."""
    from collections import Counter

    target = static("cpu", "float32", CPU_CTX, CPU_BUCKETS, compile=False)
    ran = Counter()

    def step(upload, offsets, keys):
        ran[(offsets.shape[0], keys.shape[0])] += 1
        return decode(upload, offsets, keys)

    decode, target._step = target._step, step
    try:
        target.warm_up()
        assert ran == Counter({(size, 256): 3 for size in CPU_BUCKETS})
        ran.clear()
        target._graphs = True
        target.warm_up()
        assert target.spans == [256, 384, 512, 640]
        assert ran == Counter({(size, span): 3 for size in CPU_BUCKETS
                               for span in target.spans})
        assert target.n_cached == 0
    finally:
        target.close()


def test_switching_compiled_targets_frees_their_compiled_code(cpu_compiled):
    """A pair switch on the owner thread: the CPU twins' compiled target (made there) closed,
    another compiled tiny target of the same shapes loaded, run and closed there. Each close
    of the last compiled target leaves dynamo no entry for the decode step, so switches never
    pile up toward its cache limit (the second load finds none of the first's: a third would
    show nothing more). Here, after the other twins, not in tests/test_owner_thread.py: the
    first target is the twins' (a load of its own, a process's first compile, took dynamo's
    and inductor's one-time start, about 5 CPU seconds, beside the cache's 1.5)."""
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    from models.target.static import StaticTarget

    code, owner = StaticTarget._decode.__code__, cpu_compiled.owner

    def run_close(target, seed: int) -> tuple[int, int]:
        target.rollback(0)
        target.logits([seed, seed + 1], 1)
        compiled = len(_debug_get_cache_entry_list(code))
        target.close()
        return compiled, len(_debug_get_cache_entry_list(code))

    def load_run_close(seed: int) -> tuple[int, int]:
        # the twins' thread count (a pair loaded since may have set another): a CPU graph is
        # guarded on it (models/target/static.py), another count compiles again
        torch.set_num_threads(cpu_compiled.graph_threads)
        return run_close(static("cpu", "float32", CPU_CTX, CPU_BUCKETS), seed)

    assert owner.call(run_close, cpu_compiled, 3) == (2, 0)  # the 1-token step, the chunk
    assert owner.call(load_run_close, 5) == (2, 0)


QUANTS = [pytest.param(("cpu", "int8", "float32"), id="cpu-int8"),
          pytest.param(("cuda", "int8", "float32"), id="cuda-int8", marks=CUDA),
          pytest.param(("cuda", "int4", "bfloat16"), id="cuda-int4", marks=CUDA)]


@pytest.fixture(scope="module", params=QUANTS)
def quant_pair(request):
    """smol-self in int8 (float32) or int4 (bfloat16): compiled on cuda, eager on the CPU
    (where test_quant_target covers the rest; this twin checks the calls), with the target
    cut to a few layers there as in test_quant_target (its int8 copy, made once). The CPU
    reference pair (`pair_with`) only for the CPU twin: on cuda it is not needed."""
    from models.loader import LoadOptions, Pair

    device, quant, dtype = request.param
    needs_sm80(device, f"{quant} with {dtype}")
    if device == "cpu":
        from tests.cut_target import load_cut

        yield load_cut(request.getfixturevalue("pair_with"), target_quant=quant, dtype=dtype)
        return
    pair = Pair("smol-self", LoadOptions(device=device, dtype=dtype, target_quant=quant,
                                         target_compile="on", compile_buckets=GPU_BUCKETS))
    yield pair
    pair.close()


def _tokens(pair, ids, method, n):
    from core.engine import GenConfig
    from scripts.benchmark import run_one

    return run_one(pair, ids, GenConfig(method=method, max_new_tokens=n))["token_ids"]


def test_quantized_target_loads_and_duo_equals_vanilla(quant_pair):
    """int8 (float32): token for token. int4 (bfloat16 only): equal, or parted at a tie."""
    t = quant_pair.target
    cuda = t.device.startswith("cuda")
    assert t.path == ("static-compiled" if cuda else "eager") and t.quant != "none"
    n, prompts = (N, PROMPTS) if cuda else (8, PROMPTS[:1])
    for prompt in prompts:
        ids = quant_pair.prompt_ids(prompt)
        want, got = _tokens(quant_pair, ids, "vanilla", n), _tokens(quant_pair, ids, "duo", n)
        if t.dtype == "float32":
            assert got == want, f"{t.quant}: duo left vanilla on {prompt!r}"
            continue
        i = next((i for i, (a, b) in enumerate(zip(want, got)) if a != b), None)
        if i is not None:
            t.rollback(0)
            logits = t.logits(ids + want[:i], 1)[0]
            top = float(logits.max())
            assert top - float(logits[want[i]]) <= TIE and top - float(logits[got[i]]) <= TIE


# -- memory: the picker on a simulated card, and (cuda) the pick run under a cap near it ------
CARD = 2 * 1024 ** 3  # a simulated 2 GiB card: its margin is 0.5 + 1/16 of it
CTX = 2048


def smol_config() -> dict:
    from models.fit.memory import target_config
    from models.pairs.catalog import get_pair

    return target_config(get_pair("smol-self"))


def smol_dims():
    from models.fit.memory import model_dims

    return model_dims(smol_config())


def simulate_card(monkeypatch, free: int) -> None:
    """The picker sees `free` bytes of a CARD-sized card (its total sizes the margin)."""
    import models.fit.memory as memory

    monkeypatch.setattr(memory, "device_memory", lambda device: (free, CARD, "a simulated card"))


def test_memory_picker_takes_int8_between_the_needs(monkeypatch, tmp_path):
    """Room for int8 but not bf16 (margin included): the picker says int8, the window picker
    keeps the window, and less than int4 needs is refused."""
    import models.fit.memory as memory
    from models.target.choice import pick_ctx

    dims, card = smol_dims(), memory.Budget("cuda", None, CARD)
    need = {k: card.needed(dims, k, CTX) for k in memory.PRECISIONS}
    free = (need["int8"] + need["none"]) // 2
    pick = memory.pick_quant(dims, CTX, memory.Budget("cuda", free, CARD))
    assert pick.kind == "int8", pick.reason
    simulate_card(monkeypatch, free)
    (tmp_path / "config.json").write_text(json.dumps(smol_config()))
    n_ctx, _ = pick_ctx(tmp_path, "cuda", "bfloat16", None, "int8")
    assert n_ctx >= CTX and memory.Budget("cuda", free, CARD).fits(dims, "int8", n_ctx)
    with pytest.raises(memory.DoesNotFit):
        memory.pick_quant(dims, CTX, memory.Budget("cuda", int(need["int4"] * 0.9), CARD))


@pytest.fixture
def capped():
    """Caps this process's GPU memory at what it holds now plus `room` bytes."""
    def cap(room: int) -> int:
        import gc

        gc.collect()
        torch.cuda.empty_cache()
        total = torch.cuda.get_device_properties(0).total_memory
        held = torch.cuda.memory_reserved(0)
        torch.cuda.set_per_process_memory_fraction((held + room) / total, 0)
        return held
    yield cap
    torch.cuda.set_per_process_memory_fraction(1.0, 0)
    torch.cuda.empty_cache()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_int8_target_runs_within_its_estimate_under_a_cap(capped, monkeypatch):
    """The compiled int8 target (what the app runs) with a full CTX window runs with the
    process capped at the picker's estimate less its margin: an estimate short of the real
    need fails here (out of memory, or a peak past it)."""
    import models.fit.memory as memory
    from measure.gpu_bench import smol_dir
    from models.target.static import StaticTarget

    needs_sm80("cuda", "bfloat16")
    dims, card = smol_dims(), memory.Budget("cuda", None, CARD)
    estimate = card.needed(dims, "int8", CTX) - card.margin
    held = capped(estimate)
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    target = StaticTarget(smol_dir("bfloat16"), "cuda", CTX, "bfloat16", quant="int8",
                          quant_group=32, buckets=(1, 8))  # the chunks fed here
    try:
        ids = [(i * 37) % 5000 + 100 for i in range(CTX)]
        target.logits(ids[:CTX - 40], 1)
        for start in range(CTX - 40, CTX - 8, 8):
            target.logits(ids[start:start + 8], 1)
        assert torch.cuda.max_memory_allocated() - base <= estimate, held
    finally:
        target.close()


def test_a_sampled_round_runs_the_head_once(device):
    """A sampled verify chunk takes its rows from the head the step already ran (one LM head
    call a round, not a second one over the hidden rows), and they equal the eager target's."""
    from core.backends import SampleCheck
    from core.sampling import Noise, SamplingConfig

    target = static(device, "float32", 128, (4,), compile=False)
    calls = []
    target.model.lm_head.register_forward_hook(lambda *a: calls.append(1))
    ids = text_ids(device, 20)
    target.logits(ids[:16], 1)
    calls.clear()
    check = SampleCheck(draft=ids[17:20], q_draft=None, noise=Noise(1), base=16, coupled=True)
    assert len(target.score(ids[16:20], 4, SamplingConfig(temperature=0.8), check).choice) == 4
    assert len(calls) == 1
    target.rollback(16)
    rows = target.logits(ids[16:20], 4)
    reference = eager(device, "float32", 128)
    reference.logits(ids[:16], 1)
    torch.testing.assert_close(rows, reference.logits(ids[16:20], 4), rtol=1e-4, atol=1e-4)
    target.close()
    reference.close()
