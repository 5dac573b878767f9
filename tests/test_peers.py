"""The benchmark's peer methods on the real smol-self pair (eager target; the static target's
in tests/test_defaults.py): greedy transformers peers give vanilla's tokens exactly (float32
on the CPU) on a model of their own sharing the target's weights, llama.cpp decodes the
target's GGUF, and bad requests fail with a clear ValueError."""
from __future__ import annotations

import copy
from dataclasses import replace

import pytest

from models.pairs.catalog import PairSpec
from measure.peers import PeerConfig, check, run_peer
from scripts.benchmark import method_config, parse

# test_real_lossless.py's first two: the oracle's ids on disk (the second was this file's own:
# 16 vanilla steps in a fresh clone)
PROMPTS = ["Why is the sky blue?", "Write a haiku about a cat sleeping in the sun."]
N = 16


@pytest.fixture(scope="module")
def pair(smol_pair):
    """smol-self on one core (the same loaded models): torch's and llama.cpp's threads spin at
    barriers, and on a busy test machine a second one stalls for seconds a token. hf-static
    without torch.compile (minutes on a CPU; the benchmark compiles)."""
    import measure.peers as peers

    one_core = copy.copy(smol_pair)
    one_core.opts = replace(smol_pair.opts, cores=1)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(peers, "STATIC_COMPILE", False)
        yield one_core


@pytest.fixture(scope="module")
def vanilla(smol_pair):
    """Vanilla's greedy token ids for each prompt: the oracle's (tests/conftest.py;
    tests/test_real_lossless.py's, on disk), not 32 single steps again."""
    from tests.conftest import vanilla_ids

    return {p: vanilla_ids(smol_pair, smol_pair.prompt_ids(p), N) for p in PROMPTS}


@pytest.mark.parametrize("method", ["hf-assisted", "hf-pld", "hf-static"])
def test_transformers_peers_match_vanilla(pair, vanilla, method):
    for prompt in PROMPTS:
        s = run_peer(pair, pair.prompt_ids(prompt), PeerConfig(method, N))
        assert s["token_ids"] == vanilla[prompt], (method, prompt)
        assert s["new_tokens"] == len(s["token_ids"])
        assert s["wall_s"] > 0 and 0 < s["ttft_s"] <= s["wall_s"]
        assert s["method"] == method and (s["rounds"] >= 1) == (method != "hf-static")
    if method == "hf-static":
        assert s["compiled"] is False and s["static_cache_len"] >= N


def shares_weights(twin, model) -> bool:
    """Every parameter of `twin` is the same tensor as `model`'s."""
    ours = dict(model.named_parameters(remove_duplicate=False))
    return all(p is ours[name] for name, p in twin.named_parameters(remove_duplicate=False))


def test_the_peers_model_shares_the_target_s_weights_and_leaves_it_alone(pair):
    import torch

    from measure.peer_model import peer_model

    model = pair.target.model
    twin = peer_model(pair.target)
    assert twin is not model and shares_weights(twin, model)
    assert twin.config is not model.config and twin.config._attn_implementation == "sdpa"
    assert twin.lm_head.weight is model.model.embed_tokens.weight  # still tied
    x = torch.tensor([pair.prompt_ids(PROMPTS[0])])
    with torch.inference_mode():
        assert torch.equal(twin(x).logits, model(x).logits)


def test_llamacpp_decodes_the_target_gguf(pair):
    s = run_peer(pair, pair.prompt_ids(PROMPTS[0]), PeerConfig("llamacpp", N))
    assert s["new_tokens"] == N == len(s["token_ids"])
    assert s["stop_reason"] == "max_new_tokens"
    assert 0 < s["ttft_s"] <= s["wall_s"]


def test_unknown_peer_is_a_value_error(pair):
    with pytest.raises(ValueError, match="unknown peer method 'hf-nope'"):
        run_peer(pair, [1, 2, 3], PeerConfig("hf-nope", N))
    args = parse(["--questions", "q.jsonl", "--out", "o"])
    with pytest.raises(ValueError, match="hf-assisted, hf-pld, hf-static, llamacpp"):
        method_config(args, "hf-nope")
    assert method_config(args, "hf-pld") == PeerConfig("hf-pld", args.max_new_tokens)


class FakePair:
    def __init__(self, spec: PairSpec):
        self.spec = spec


def test_llamacpp_needs_a_gguf_target(tmp_path):
    for name in ("config.json", "model.safetensors"):
        (tmp_path / name).write_text("{}")
    pair = FakePair(PairSpec("hf-target", {"path": str(tmp_path)}, {"path": "d.gguf"}))
    with pytest.raises(ValueError, match="pair 'hf-target' has a safetensors target"):
        check(pair, "llamacpp")
    with pytest.raises(ValueError, match="llamacpp decodes the target's own GGUF"):
        run_peer(pair, [1, 2, 3], PeerConfig("llamacpp", N))
    check(pair, "hf-pld")  # the transformers peers run on any target
