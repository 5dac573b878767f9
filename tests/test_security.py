"""Security defaults: this machine only unless told, no public link unless --share, no remote
code, no pickle weights, model paths never from request text, and the API key nowhere but in
the check."""
from __future__ import annotations

import ast
import json
import logging
import pickle
import sys
from pathlib import Path

import httpx
import pytest

from tests.conftest import ROOT
from tests.live_server import Served

SOURCES = [p for d in ("app", "core", "models", "scripts") for p in (ROOT / d).rglob("*.py")]


def test_app_listens_on_this_machine_without_a_link_by_default(monkeypatch):
    from app.main import parse

    monkeypatch.delenv("DUO_API_KEY", raising=False)
    args = parse([])
    assert args.host == "127.0.0.1" and args.share is False and args.api_key is None
    assert parse(["--share"]).share is True


def test_the_page_is_launched_local_and_unshared(monkeypatch):
    """serve_ui hands gradio the host and --share as parsed (launch stopped there)."""
    import gradio as gr

    from app.host import ModelHost
    from app.main import parse, serve_ui

    seen = {}

    def launch(self, **kw):
        seen.update(kw)
        raise OSError("stopped by the test")
    monkeypatch.setattr(gr.Blocks, "launch", launch)
    with pytest.raises(SystemExit):
        serve_ui(ModelHost(lambda name, say: None), None, parse([]), 0.0)
    assert seen["server_name"] == "127.0.0.1" and seen["share"] is False


def test_no_remote_code_anywhere():
    found = [f"{p.relative_to(ROOT)}:{n}" for p in SOURCES
             for n, line in enumerate(p.read_text().splitlines(), 1)
             if "trust_remote_code=True" in line.replace(" ", "")]
    assert not found


def test_every_model_from_pretrained_refuses_pickle():
    """AutoModel*.from_pretrained loads safetensors (use_safetensors=True) or a GGUF file."""
    loose = []
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "from_pretrained"
                    and getattr(node.func.value, "id", "").startswith("AutoModel")):
                kw = {k.arg: k.value for k in node.keywords}
                safe = getattr(kw.get("use_safetensors"), "value", None) is True
                if not (safe or "gguf_file" in kw):
                    loose.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not loose


class Trap:
    """Unpickling this writes `marker` (what a hostile pytorch_model.bin could do)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (self.marker, "unpickled"))


def test_a_folder_with_only_pickle_weights_is_an_error_not_a_load(tmp_path):
    from models.target.eager import TorchTarget

    config = {"model_type": "llama", "hidden_size": 16, "intermediate_size": 32,
              "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
              "vocab_size": 32, "max_position_embeddings": 64}
    (tmp_path / "config.json").write_text(json.dumps(config))
    marker = tmp_path / "unpickled.txt"
    with open(tmp_path / "pytorch_model.bin", "wb") as f:
        pickle.dump(Trap(marker), f)
    with pytest.raises(OSError, match="model.safetensors"):
        TorchTarget(tmp_path, device="cpu", n_ctx=64, dtype="float32")
    assert not marker.exists()


SECRET = "sk-duo-secret-0123456789abcdef"


@pytest.fixture(scope="module")
def served(smol_pair):
    s = Served(smol_pair, key=SECRET)
    yield s
    s.close()


GOOD = {"model": "smol-self", "messages": [{"role": "user", "content": "Say hi."}],
        "max_tokens": 3, "temperature": 0}

_opened: list[str] | None = None  # paths opened while a test listens (an audit hook)


def _audit(event, args):
    if _opened is not None and event == "open" and isinstance(args[0], (str, bytes, Path)):
        _opened.append(str(args[0]))


sys.addaudithook(_audit)


@pytest.mark.parametrize("model", ["/etc/passwd", "../x", "../../models/pairs/pairs.json",
                                   "smol-self/../../etc/passwd", "gemma-smol"])
def test_the_model_field_never_names_a_file(served, model):
    global _opened
    _opened = []
    try:
        r = served.post("/chat/completions", {**GOOD, "model": model})
        text = served.post("/completions", {"model": model, "prompt": "Hi", "max_tokens": 2})
    finally:
        opened, _opened = _opened, None
    assert r.status_code == text.status_code == 404
    assert r.json()["error"]["code"] == "model_not_found"
    assert not [p for p in opened if "passwd" in p or p.endswith(("/x", "pairs.json"))], opened
    assert served.host.name == "smol-self"  # nothing else was loaded
    assert served.post("/chat/completions", GOOD).status_code == 200


def test_the_api_key_is_in_no_response_log_or_stream(served, caplog, capfd):
    caplog.set_level(logging.DEBUG)
    bodies = [served.post("/chat/completions", GOOD).text,
              served.post("/chat/completions", {**GOOD, "stream": True}).text,
              served.post("/completions", {"model": "smol-self", "prompt": "Hi",
                                           "max_tokens": 2}).text,
              served.post("/chat/completions", {**GOOD, "model": "nope"}).text,
              served.post("/chat/completions", {**GOOD, "temperature": "hot"}).text,
              served.post("/chat/completions", GOOD, key=SECRET + "x").text,  # a near miss
              httpx.get(served.url + "/models",
                        headers={"Authorization": f"Bearer {SECRET}"}).text]
    assert json.loads(bodies[0])["usage"]["completion_tokens"] > 0
    from app.ui import App

    app = App(served.host, "smol-self")
    page = [app.status(), app.placement(), app.meter([{"role": "user", "content": "Hi"}])]
    out = capfd.readouterr()
    for where, text in [("responses", "\n".join(bodies)), ("logs", caplog.text),
                        ("stderr", out.err), ("stdout", out.out), ("page", "\n".join(page))]:
        assert SECRET not in text, where


def test_the_key_from_the_environment_is_not_shown_in_help(monkeypatch, capsys):
    from app.main import parse

    monkeypatch.setenv("DUO_API_KEY", SECRET)
    assert parse([]).api_key == SECRET
    with pytest.raises(SystemExit):
        parse(["--help"])
    assert SECRET not in capsys.readouterr().out


def test_the_ui_takes_pair_names_not_paths():
    """A pair name from the page that is a path is an unknown pair; nothing is loaded."""
    from app.host import ModelHost
    from app.ui import App

    loads = []
    app = App(ModelHost(lambda name, say: loads.append(name)), "smol-self")
    out = list(app.switch("/etc/passwd"))
    assert out[-1][0].startswith("**error:** unknown pair '/etc/passwd'") and not loads
