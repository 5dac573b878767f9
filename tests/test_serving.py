"""The serving-engine commands (models/pairs/serving.py, download_models.py --serve): every catalog
pair on vLLM, SGLang and llama-server, checked against the options each engine documents (kept
below as data, with where and at which version they were read); refusals name the engine's limit."""
from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import download_models  # noqa: E402
from models.pairs import catalog, serving  # noqa: E402
from models.pairs.serving import ServingRefusal, serve_command  # noqa: E402


def command_argvs(text: str) -> list[list[str]]:
    """The argv of each command in serve_command's text (comments dropped, continuations joined)."""
    joined = text.replace(" \\\n", " ")
    return [shlex.split(line) for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


# ---- what the engines document (read with the search tools, November 2026) ----------------------

VLLM = {
    "program": ["vllm", "serve"],
    "options": {"--speculative-config", "--max-model-len", "--port", "--host", "--tensor-parallel-size"},
    "source": "https://docs.vllm.ai/en/v0.25.0/features/speculative_decoding/draft_model/ (vllm serve ... --host "
              "--port --seed -tp --max-model-len --gpu-memory-utilization --speculative-config '{\"model\": ..., "
              "\"num_speculative_tokens\": 5, \"method\": \"draft_model\"}'); vllm-project/vllm "
              "docs/features/spec_decode/draft_model.md @ 0b896b16; --tensor-parallel-size: engine arguments "
              "(docs.vllm.ai serving/engine_args)",
}
VLLM_SPEC_KEYS = {
    "keys": {"method", "model", "num_speculative_tokens", "use_heterogeneous_vocab", "draft_sample_method"},
    "draft_sample_method": {"greedy", "probabilistic"},
    "source": "vllm-project/vllm vllm/config/speculative.py @ 002e77c1f0ef9b19cff8b9e21cfbd6feb3d6b443 "
              "(SpeculativeConfig: method 'draft_model', model, num_speculative_tokens required for a draft "
              "model, use_heterogeneous_vocab 'Requires method=draft_model' and greedy draft sampling only, "
              "draft_sample_method greedy|probabilistic; verify_equal_vocab_size_if_draft_model otherwise); "
              "TLI from PR #38174, in vLLM 0.23-0.26",
}
SGLANG = {
    "program": ["python", "-m", "sglang.launch_server"],
    "options": {"--model-path", "--host", "--port", "--context-length", "--tp", "--speculative-algorithm",
                "--speculative-draft-model-path", "--speculative-num-steps", "--speculative-eagle-topk",
                "--speculative-num-draft-tokens"},
    "algorithms": {"EAGLE", "EAGLE3", "STANDALONE", "NGRAM", "NEXTN"},
    "source": "sgl-project/sglang docs/advanced_features/speculative_decoding.md @ 067ad4d335bb (Standalone "
              "Speculative Decoding; Full Parameter Reference: STANDALONE defaults num-steps 3, eagle-topk 1, "
              "num-draft-tokens 4) and docs/advanced_features/server_arguments.md @ 004813e1dd46 (--model-path, "
              "--context-length, --host, --port; '--tp 2' for tensor parallelism); vocabulary check: PR #23838",
}
LLAMA_SERVER = {
    "program": ["llama-server"],
    "options": {"-m", "-md", "--spec-type", "-ngld", "--spec-draft-n-max", "--spec-draft-sampling", "-c",
                "--host", "--port", "--split-mode"},
    "spec_types": {"none", "draft-simple", "draft-eagle3", "draft-mtp", "draft-dflash", "draft-dspark",
                   "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache"},
    "draft_sampling": {"greedy", "probabilistic"},
    "split_modes": {"none", "layer", "row", "tensor"},
    "removed": {"--draft", "--draft-n", "--draft-max", "--draft-min", "--draft-n-min"},
    "source": "ggml-org/llama.cpp tools/server/README.md @ 00dc8057ab28 (HELP table: -m; --spec-draft-model, -md; "
              "--spec-type list, default none; --spec-draft-ngl, -ngld N|auto|all; --spec-draft-n-max default 3; "
              "--spec-draft-sampling greedy|probabilistic; -c; --host; --port; -sm/--split-mode; --draft-max "
              "'has been removed', PR #22397) and common/speculative.cpp @ 001d906a (draft-simple throws when "
              "common_speculative_are_compatible fails); builds around b11004",
}
HF_CLI = {"program": ["hf", "download"], "options": {"--local-dir"},
          "source": "huggingface_hub 2.4.0 (requirements.txt): hf download REPO_ID [FILENAMES]... --local-dir"}
DOCS = {"vllm": VLLM, "sglang": SGLANG, "llama-server": LLAMA_SERVER}

REFUSED = {("gemma-smol", "sglang"), ("gemma-smol", "llama-server"), ("qwen2.5-7b-smol360m", "sglang"),
           ("qwen2.5-7b-smol360m", "llama-server"), ("qwen2.5-7b-0.5b", "sglang")}
PAIRS = sorted(catalog.read_entries(catalog.CATALOG_FILE), key=lambda e: e["name"])
CASES = [(e["name"], engine) for e in PAIRS for engine in serving.ENGINES]


@pytest.fixture(autouse=True)
def builtin_only(tmp_path, monkeypatch):
    monkeypatch.setenv("DUO_USER_CATALOG", str(tmp_path / "user.json"))


def options(argv: list[str], program: list[str]) -> dict[str, list[str]]:
    """{option: its values} of one command, after checking it starts with `program` and that every
    word after it belongs to an option."""
    assert argv[:len(program)] == program, argv
    rest, opts, current = argv[len(program):], {}, None
    if program[-1] == "serve" or program == HF_CLI["program"]:
        while rest and not rest[0].startswith("-"):
            opts.setdefault("", []).append(rest.pop(0))
    for word in rest:
        if word.startswith("-"):
            assert word not in opts, f"{word} given twice"
            current = opts.setdefault(word, [])
        else:
            assert current is not None, f"stray word {word!r}"
            current.append(word)
    return opts


def server(text: str, engine: str) -> dict[str, list[str]]:
    """The last command (the server) as options, checked against the engine's documented set; the
    commands before it are Hub downloads."""
    argvs = command_argvs(text)
    for argv in argvs[:-1]:
        fetch = options(argv, HF_CLI["program"])
        assert set(fetch) - {""} <= HF_CLI["options"] and len(fetch[""]) == 2
    opts = options(argvs[-1], DOCS[engine]["program"])
    assert set(opts) - {""} <= DOCS[engine]["options"], set(opts) - DOCS[engine]["options"]
    return opts


def one(opts: dict, flag: str) -> str:
    assert len(opts[flag]) == 1, (flag, opts[flag])
    return opts[flag][0]


# ---- every pair on every engine ---------------------------------------------------------------

@pytest.mark.parametrize("name,engine", CASES)
def test_every_pair_exports_or_names_the_limit(name, engine):
    spec = catalog.get_pair(name)
    if (name, engine) in REFUSED:
        with pytest.raises(ServingRefusal, match="vocab"):
            serve_command(spec, engine)
        return
    text = serve_command(spec, engine)
    e = serving.ENGINES[engine]
    assert text.splitlines()[0].startswith(f"# {e.title} {e.version}: pair '{name}'")
    check = {"vllm": check_vllm, "sglang": check_sglang, "llama-server": check_llama_server}[engine]
    check(spec, server(text, engine), text)


def check_vllm(spec, opts, text):
    s = spec.serve
    assert opts[""] == [s.target_hf]
    config = json.loads(one(opts, "--speculative-config"))
    assert set(config) <= VLLM_SPEC_KEYS["keys"]
    assert config["method"] == "draft_model" and config["model"] == s.draft_hf
    assert isinstance(config["num_speculative_tokens"], int) and config["num_speculative_tokens"] > 0
    different = not spec.same_tokenizer or s.draft_vocab_size != s.target_vocab_size
    assert config.get("use_heterogeneous_vocab", False) is different
    assert ("greedy" in text) is different  # the limit is said where it applies
    assert int(one(opts, "--max-model-len")) <= 8192


def check_sglang(spec, opts, text):
    assert one(opts, "--model-path") == spec.serve.target_hf
    assert one(opts, "--speculative-algorithm") == "STANDALONE" in SGLANG["algorithms"]
    assert one(opts, "--speculative-draft-model-path") == spec.serve.draft_hf
    steps, topk, tokens = (int(one(opts, f"--speculative-{k}"))
                           for k in ("num-steps", "eagle-topk", "num-draft-tokens"))
    assert (steps, topk, tokens) == (3, 1, 4)  # STANDALONE's documented defaults, all three set


def check_llama_server(spec, opts, text):
    s = spec.serve
    assert one(opts, "-m").endswith(f"{s.target_gguf['repo']}/{s.target_gguf['file']}")
    assert one(opts, "-md").endswith(f"{s.draft_gguf['repo']}/{s.draft_gguf['file']}")
    assert one(opts, "--spec-type") == "draft-simple" in LLAMA_SERVER["spec_types"]
    assert one(opts, "-ngld") == "0" and int(one(opts, "--spec-draft-n-max")) == 3
    assert not set(opts) & LLAMA_SERVER["removed"]
    fetched = {f"{one(options(a, HF_CLI['program']), '--local-dir')}/{a[3]}" for a in command_argvs(text)[:-1]}
    assert {one(opts, "-m"), one(opts, "-md")} == fetched  # the server reads what the downloads wrote


# ---- settings ---------------------------------------------------------------------------------

def test_several_gpus():
    spec = catalog.get_pair("llama3.1-8b-1b")
    assert one(server(serve_command(spec, "vllm", gpus=2), "vllm"), "--tensor-parallel-size") == "2"
    assert one(server(serve_command(spec, "sglang", gpus=4), "sglang"), "--tp") == "4"
    split = one(server(serve_command(spec, "llama-server", gpus=2), "llama-server"), "--split-mode")
    assert split in LLAMA_SERVER["split_modes"]
    assert "--tensor-parallel-size" not in server(serve_command(spec, "vllm"), "vllm")


def test_draft_placement_is_llama_servers_choice():
    spec = catalog.get_pair("smol-1.7b-360m")
    assert one(server(serve_command(spec, "llama-server", draft_on="gpu"), "llama-server"), "-ngld") == "all"
    for engine in ("vllm", "sglang"):
        with pytest.raises(ValueError, match="llama-server only"):
            serve_command(spec, engine, draft_on="cpu")


def test_probabilistic_drafting():
    same, cross = catalog.get_pair("smol-1.7b-360m"), catalog.get_pair("gemma-smol")
    config = json.loads(one(server(serve_command(same, "vllm", draft_sampling="probabilistic"), "vllm"),
                            "--speculative-config"))
    assert config["draft_sample_method"] in VLLM_SPEC_KEYS["draft_sample_method"] - {"greedy"}
    opts = server(serve_command(same, "llama-server", draft_sampling="probabilistic"), "llama-server")
    assert one(opts, "--spec-draft-sampling") == "probabilistic" in LLAMA_SERVER["draft_sampling"]
    with pytest.raises(ServingRefusal, match="greedy draft sampling only"):
        serve_command(cross, "vllm", draft_sampling="probabilistic")
    with pytest.raises(ServingRefusal, match="no draft-sampling setting"):
        serve_command(same, "sglang", draft_sampling="probabilistic")


@pytest.mark.parametrize("kwargs,message", [({"engine": "tgi"}, "unknown engine 'tgi'"),
                                            ({"engine": "vllm", "gpus": 0}, "at least 1"),
                                            ({"engine": "vllm", "draft_sampling": "typical"}, "draft_sampling"),
                                            ({"engine": "llama-server", "draft_on": "npu"}, "cpu or gpu")])
def test_bad_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        serve_command(catalog.get_pair("smol-self"), **kwargs)


# ---- refusals name the limit ----------------------------------------------------------------

@pytest.mark.parametrize("name,engine,limit", [
    ("qwen2.5-7b-0.5b", "sglang", "target 152064 tokens, draft 151936"),
    ("gemma-smol", "sglang", "PR #23838"),
    ("gemma-smol", "llama-server", "common_speculative_are_compatible"),
    ("qwen2.5-7b-smol360m", "llama-server", "sizes at most 128 apart"),
])
def test_refusals_name_the_engine_limit(name, engine, limit):
    with pytest.raises(ServingRefusal, match=limit) as refusal:
        serve_command(catalog.get_pair(name), engine)
    assert "vLLM" in str(refusal.value)  # and say which engine takes the pair


def test_a_pair_without_serving_files_is_refused_by_name():
    spec = catalog.PairSpec("mine", {"path": "/models/t"}, {"path": "/models/d.gguf"})
    for engine, what in (("vllm", "safetensors repo"), ("llama-server", "GGUF of the target")):
        with pytest.raises(ServingRefusal, match=f"{what}.*'mine' records none"):
            serve_command(spec, engine)


def test_gated_note_names_only_the_repos_used():
    spec = catalog.get_pair("llama3.1-8b-1b")
    assert "meta-llama/Llama-3.2-1B-Instruct" in serve_command(spec, "vllm").split("# gated:")[1]
    assert "# gated" not in serve_command(spec, "llama-server")  # its GGUFs are not gated


# ---- the CLI ----------------------------------------------------------------------------------

def test_cli_prints_all_three(capsys):
    assert download_models.main(["--serve", "all", "smol-1.7b-360m"]) == 0
    out = capsys.readouterr().out
    assert [line.split(":")[0] for line in out.splitlines() if line.startswith("# ") and ": pair '" in line] == \
        [f"# {e.title} {e.version}" for e in serving.ENGINES.values()]
    assert out.rstrip().endswith(serving.WHEN_TO_MOVE)


def test_cli_all_shows_refusals_as_comments(capsys):
    assert download_models.main(["--serve", "all", "gemma-smol"]) == 0
    out = capsys.readouterr().out
    assert "vllm serve google/gemma-3-270m" in out and out.count(": refused: ") == 2


@pytest.mark.parametrize("argv,code,message", [
    (["--serve", "tgi", "smol-self"], 2, "unknown engine 'tgi'"),
    (["--serve", "vllm", "nope"], 2, "unknown pair 'nope'"),
    (["--serve", "vllm", "smol-self", "--draft-on", "gpu"], 2, "--draft-on goes with --serve llama-server"),
    (["--list", "--gpus", "2"], 2, "--gpus goes with --serve"),
    (["--serve", "sglang", "gemma-smol"], 1, "STANDALONE"),
])
def test_cli_errors(capsys, argv, code, message):
    assert run(argv) == code
    assert message in capsys.readouterr().err


def run(argv: list[str]) -> int:
    """download_models.main's exit code, whether it returns it or argparse exits with it."""
    try:
        return download_models.main(argv)
    except SystemExit as e:
        return e.code
