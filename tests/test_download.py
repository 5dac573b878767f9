"""scripts/download_models.py and models/pairs/hub.py against a fake Hub on 127.0.0.1: the real
huggingface_hub client downloads, resumes a cut-off transfer, catches corruption, honours gating."""
from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import download_models  # noqa: E402
from models.pairs import catalog, hub  # noqa: E402
from tests.fake_hub import TOKEN, FakeHub, FakeRepo, make_gguf, tokenizer_json  # noqa: E402

TOKENS = [f"tok{i}" for i in range(64)]
CONFIG = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 64,
          "intermediate_size": 128, "num_attention_heads": 4}
BIG = 24 * 1024 * 1024  # above huggingface_hub's 10 MiB read chunk, so a cut transfer has bytes to keep


def target_files(weights: bytes) -> dict[str, bytes]:
    return {"config.json": json.dumps(CONFIG).encode(), "tokenizer.json": tokenizer_json(TOKENS),
            "tokenizer_config.json": json.dumps({"chat_template": "{{ messages }}"}).encode(),
            "model.safetensors": weights, "pytorch_model.bin": b"old weights", "README.md": b"# card",
            "original/consolidated.00.pth": b"not needed"}


@pytest.fixture
def fake():
    h = FakeHub()
    h.add(FakeRepo("org/tiny-target", target_files(os.urandom(300_000))))
    h.add(FakeRepo("org/gated-target", target_files(os.urandom(1000)), gated=True))
    h.add(FakeRepo("org/tiny-draft-GGUF", {"tiny-q8_0.gguf": make_gguf(TOKENS), "tiny-q4.gguf": make_gguf(TOKENS[:8])}))
    h.start()
    yield h
    h.stop()


@pytest.fixture
def env(fake, tmp_path, monkeypatch):
    """HF_ENDPOINT at the fake Hub, a private cache and user catalog, no token anywhere."""
    monkeypatch.setenv("HF_ENDPOINT", fake.url)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    monkeypatch.setenv("DUO_USER_CATALOG", str(tmp_path / "user" / "pairs.json"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr("huggingface_hub.get_token", lambda: None)
    user = tmp_path / "user" / "pairs.json"
    user.parent.mkdir()
    user.write_text(json.dumps({"pairs": [
        {"name": "fake", "target": {"repo": "org/tiny-target"},
         "draft": {"repo": "org/tiny-draft-GGUF", "file": "tiny-q8_0.gguf"}},
        {"name": "fake-gated", "target": {"repo": "org/gated-target"}, "gated": True,
         "draft": {"repo": "org/tiny-draft-GGUF", "file": "tiny-q8_0.gguf"}}]}))
    return tmp_path


def run(capsys, *argv) -> tuple[int, str, str]:
    code = download_models.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def blob_gets(fake: FakeHub, repo: str = "org/tiny-target", file: str = "model.safetensors") -> list[str | None]:
    """The Range header of each GET of one LFS file from the CDN."""
    return [rng for method, path, rng in fake.requests if method == "GET" and path == f"/blob/{repo}/{file}"]


def test_downloads_pair_with_the_hub_client(env, fake, capsys):
    code, out, err = run(capsys, "--pair", "fake")
    assert (code, err) == (0, "")
    spec = catalog.get_pair("fake")
    kind, folder = catalog.target_source(spec)
    assert kind == "hf" and folder.parent.name == "snapshots"
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors",
                                                        "tokenizer.json", "tokenizer_config.json"]
    assert catalog.draft_path(spec).read_bytes() == fake.repos["org/tiny-draft-GGUF"].files["tiny-q8_0.gguf"]
    assert catalog.is_downloaded(spec)
    assert ("GET", "/api/models/org/tiny-target/revision/main", None) in fake.requests
    assert ("HEAD", "/org/tiny-target/resolve/main/model.safetensors", None) in fake.requests
    assert "pair 'fake' is ready" in out


def test_second_run_downloads_nothing(env, fake, capsys):
    assert run(capsys, "--pair", "fake")[0] == 0
    fake.requests.clear()
    assert run(capsys, "--pair", "fake")[0] == 0
    assert blob_gets(fake) == []
    assert not any(m == "GET" and "/resolve/" in p for m, p, _ in fake.requests)


def test_resumes_a_cut_transfer_with_range(env, fake, capsys):
    weights = os.urandom(BIG)
    fake.repos["org/tiny-target"].files["model.safetensors"] = weights
    fake.faults["model.safetensors"] = "cut_once"
    code, _, err = run(capsys, "--pair", "fake")
    assert (code, err) == (0, "")
    ranges = [r for r in blob_gets(fake) if r]
    assert len(ranges) == 1 and int(ranges[0].removeprefix("bytes=").rstrip("-")) >= 10 * 1024 * 1024
    _, folder = catalog.target_source(catalog.get_pair("fake"))
    assert (folder / "model.safetensors").read_bytes() == weights


def test_corrupted_file_is_detected_and_removed(env, fake, capsys):
    fake.faults["model.safetensors"] = "corrupt"
    code, _, err = run(capsys, "--pair", "fake")
    assert code == 1
    assert err.count("\n") == 1 and "model.safetensors is corrupted" in err and "two attempts" in err
    assert len(blob_gets(fake)) == 2
    assert not catalog.is_downloaded(catalog.get_pair("fake"))
    blobs = list((env / "cache" / "models--org--tiny-target" / "blobs").iterdir())
    assert all(b.stat().st_size < 300_000 for b in blobs)  # only the small files remain


def test_one_corrupted_transfer_is_fetched_again(env, fake, capsys):
    fake.faults["model.safetensors"] = "corrupt_once"
    assert run(capsys, "--pair", "fake")[0] == 0
    assert len(blob_gets(fake)) == 2
    assert catalog.is_downloaded(catalog.get_pair("fake"))


def test_gated_repo_refused_by_the_client_without_token(env, fake):
    cfg = hub.HubConfig.from_env()
    plan = hub.plan_target(cfg, "org/gated-target")
    assert plan.gated
    with pytest.raises(hub.GatedError, match="gated repository.*HF_TOKEN"):
        hub.fetch_file(cfg, plan, plan.files[0])
    assert ("HEAD", "/org/gated-target/resolve/main/config.json", None) in fake.requests


def test_gated_pair_needs_token_before_any_download(env, fake, capsys):
    code, out, err = run(capsys, "--pair", "fake-gated")
    assert code == 2 and err.count("\n") == 1 and "export HF_TOKEN" in err
    assert not any(m == "HEAD" or p.startswith("/blob") for m, p, _ in fake.requests)


def test_gated_repo_with_token(env, fake, capsys, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert run(capsys, "--pair", "fake-gated")[0] == 0
    assert catalog.is_downloaded(catalog.get_pair("fake-gated"))


def test_gated_repo_with_a_token_lacking_access(env, fake, capsys, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_someone_else")
    code, _, err = run(capsys, "--pair", "fake-gated")
    assert code == 2 and "HF_TOKEN is set but has no access" in err


def test_local_dir_download_is_recorded(env, fake, capsys):
    code, out, _ = run(capsys, "--pair", "fake", "--local-dir", str(env / "models"))
    assert code == 0
    kind, folder = catalog.target_source(catalog.get_pair("fake"))
    assert folder == env / "models" / "org--tiny-target"
    assert catalog.draft_path(catalog.get_pair("fake")) == env / "models" / "org--tiny-draft-GGUF" / "tiny-q8_0.gguf"
    assert not (env / "cache" / "models--org--tiny-target").exists()
    fake.requests.clear()
    assert run(capsys, "--pair", "fake")[0] == 0  # goes back to the recorded folder
    assert blob_gets(fake) == []


def test_dry_run_lists_files_and_writes_nothing(env, fake, capsys):
    code, out, _ = run(capsys, "--pair", "fake", "--dry-run")
    assert code == 0
    assert "model.safetensors" in out and "README.md" not in out and "pytorch_model.bin" not in out
    assert "tiny-q8_0.gguf" in out and "tiny-q4.gguf" not in out
    assert "would download" in out and "nothing written" in out
    assert not (env / "cache").exists()


def test_dry_run_marks_gated_without_token(env, fake, capsys):
    code, out, _ = run(capsys, "--pair", "fake-gated", "--dry-run")
    assert code == 0 and "HF_TOKEN not set" in out


def test_missing_gguf_names_the_ones_there(env, fake):
    with pytest.raises(hub.HubError, match="tiny-q4.gguf, tiny-q8_0.gguf"):
        hub.plan_draft(hub.HubConfig.from_env(), "org/tiny-draft-GGUF", "nope.gguf")


def test_unknown_repo(env, fake, capsys):
    code, _, err = run(capsys, "--add-pair", "x", "--target", "org/nothing",
                       "--draft", "org/tiny-draft-GGUF:tiny-q8_0.gguf")
    assert code == 2 and "'org/nothing' not found" in err


def test_offline_message(env, capsys, monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    code, out, err = run(capsys, "--pair", "fake")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "cannot reach the Hugging Face Hub" in err and "smol-self" in err


def test_add_pair_from_the_hub_reads_gguf_header_by_range(env, fake, capsys):
    code, out, err = run(capsys, "--add-pair", "mine", "--target", "org/tiny-target",
                         "--draft", "org/tiny-draft-GGUF:tiny-q8_0.gguf")
    assert (code, err) == (0, "")
    spec = catalog.get_pair("mine")
    assert spec.same_tokenizer and spec.chat and spec.user
    assert spec.target == {"repo": "org/tiny-target"} and spec.draft["file"] == "tiny-q8_0.gguf"
    assert any(blob_gets(fake, "org/tiny-draft-GGUF", "tiny-q8_0.gguf"))
    assert not any(p.endswith("model.safetensors") and m == "GET" for m, p, _ in fake.requests)
    assert spec.extra["target_config"] == CONFIG  # sizes each precision in --list before the download
    code, out, _ = run(capsys, "--list", "--json")
    row = next(r for r in json.loads(out) if r["name"] == "mine")
    assert set(row["vram_gib"]) == {"bf16", "int8", "int4"} and row["vram_gib"]["bf16"] >= row["vram_gib"]["int4"]


def test_add_pair_different_tokenizers(env, fake, capsys):
    code, out, _ = run(capsys, "--add-pair", "mine2", "--target", "org/tiny-target",
                       "--draft", "org/tiny-draft-GGUF:tiny-q4.gguf")
    assert code == 0 and "different" in out
    assert catalog.get_pair("mine2").same_tokenizer is False


def test_add_pair_gated_target_without_token(env, fake, capsys):
    code, _, err = run(capsys, "--add-pair", "g", "--target", "org/gated-target",
                       "--draft", "org/tiny-draft-GGUF:tiny-q8_0.gguf")
    assert code == 2 and "gated" in err


def test_not_enough_disk_is_said_before_downloading(env, fake, capsys, monkeypatch):
    monkeypatch.setattr(hub, "free_disk", lambda root: 1000)
    code, _, err = run(capsys, "--pair", "fake")
    assert code == 2 and "only 0.0 GB is free" in err
    assert not any(m == "HEAD" for m, _, _ in fake.requests)
