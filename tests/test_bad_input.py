"""Bad input everywhere: the command lines (generate.py, benchmark.py, app/main.py) end with one
`error: ...` line and exit code 2, the API answers 4xx in the OpenAI shape, the page's handlers
put the error in the status line and leave the chat as it was; and the next request works."""
from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest

from tests.conftest import ROOT, one_line_exit_2
from tests.live_server import served  # noqa: F401 - the module's server (a fixture)
from tests.test_chat_ui import latest as last

CONTROL = "\x00\x07\x1b"
PASTE_100K = "Lorem ipsum dolor sit amet. " * 3600  # ~100 kB
PASTE_2M = "Lorem ipsum dolor sit amet. " * 75000  # ~2 MB


# -- scripts/generate.py ---------------------------------------------------------------------
def gen_main(argv):
    from scripts.generate import main
    return lambda: main(argv)


GEN_BAD = [  # (arguments, what the error line says)
    (["--prompt", ""], "prompt is empty"),
    (["--prompt", " \n\t "], "prompt is empty"),
    (["--prompt", CONTROL], "prompt is empty"),
    (["--prompt", "x", "--temperature", "nan"], "--temperature: must be a finite number"),
    (["--prompt", "x", "--temperature", "inf"], "--temperature: must be a finite number"),
    (["--prompt", "x", "--temperature", "-1"], "temperature must be >= 0"),
    (["--prompt", "x", "--top-p", "0"], "top-p must be in (0, 1]"),
    (["--prompt", "x", "--top-p", "1.5"], "top-p must be in (0, 1]"),
    (["--prompt", "x", "--top-p", "nan"], "--top-p: must be a finite number"),
    (["--prompt", "x", "--top-k", "-1"], "top-k must be >= 0"),
    (["--prompt", "x", "--max-new-tokens", "0"], "--max-new-tokens must be > 0"),
    (["--prompt", "x", "--max-new-tokens", "-5"], "--max-new-tokens must be > 0"),
    (["--prompt", "x", "--max-new-tokens", "many"], "--max-new-tokens: invalid int value"),
    (["--prompt", "x", "--seed", "-1"], "--seed must be >= 0"),
    (["--prompt", "x", "--gamma", "0"], "gamma must be 'auto' or 1..64"),
    (["--prompt", "x", "--gamma", "abc"], "--gamma must be 'auto' or a number"),
    (["--prompt", "x", "--max-seqs", "0"], "--max-seqs must be 1..8"),
    (["--prompt", "x", "--max-seqs", "99"], "--max-seqs must be 1..8"),
    (["--prompt", "x", "--theta-scale", "0"], "--theta-scale must be > 0"),
    (["--prompt", "x", "--theta-scale", "nan"], "--theta-scale: must be a finite number"),
    (["--prompt", "x", "--static-k", "9"], "--static-k must be 1..8"),
    (["--prompt", "x", "--ctx-size", "1"], "--ctx-size must be at least 64"),
    (["--prompt", "x", "--pair", "nope"], "unknown pair 'nope'"),
    (["--prompt", "x", "--method", "magic"], "--method: invalid choice: 'magic'"),
    (["--prompt", "x", "--target-quant", "int3"], "--target-quant must be one of"),
    (["--prompt", "x", "--target-pack", "on"], "unrecognized arguments: --target-pack"),
    (["--prompt", "x", "--bogus"], "unrecognized arguments: --bogus"),
    ([], "one of the arguments --prompt --prompt-file is required"),
]


@pytest.mark.parametrize("argv,needle", GEN_BAD)
def test_generate_bad_arguments(capsys, argv, needle):
    assert needle in one_line_exit_2(capsys, gen_main(argv))


@pytest.mark.parametrize("content,needle", [
    (b"\xff\xfe\x00bad", "cannot read prompt file"),  # not UTF-8
    (b"", "prompt is empty"),
    (b" \n\x07\x1b\n", "prompt is empty"),
    (None, "cannot read prompt file"),  # a folder
])
def test_generate_bad_prompt_files(capsys, tmp_path, content, needle):
    path = tmp_path / "prompt.txt"
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    assert needle in one_line_exit_2(capsys, gen_main(["--prompt-file", str(path)]))


@pytest.fixture
def cli_on_smol(smol_pair, monkeypatch):
    """generate.py's Pair is the suite's smol-self (no second load)."""
    import models.loader
    monkeypatch.setattr(models.loader, "Pair", lambda name, options: smol_pair)
    return smol_pair


@pytest.mark.parametrize("text,args,needle", [
    (PASTE_100K, [], "tokens; the context window (8192 tokens) allows 8191"),
    (PASTE_2M, [], "characters; the context window (8192 tokens) allows at most"),
    ("Say hi.", ["--max-new-tokens", "1000000000"], "exceed the context window of 8192"),
])
def test_generate_too_long_for_the_window(capsys, tmp_path, cli_on_smol, text, args, needle,
                                         monkeypatch):
    path = tmp_path / "paste.txt"
    path.write_text(text, encoding="utf-8")
    monkeypatch.setattr(cli_on_smol, "generate", lambda *a, **k: pytest.fail("it generated"))
    assert needle in one_line_exit_2(capsys, gen_main(["--prompt-file", str(path)] + args))


def test_generate_as_a_process_fails_fast_on_one_line():
    r = subprocess.run([sys.executable, "scripts/generate.py", "--prompt", "x", "--top-p", "nan",
                        "--json"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip() == "error: argument --top-p: must be a finite number, got 'nan'"


# -- scripts/benchmark.py --------------------------------------------------------------------
@pytest.mark.parametrize("extra,needle", [
    (["--methods", "magic"], "unknown method 'magic'"),
    (["--methods", " , "], "--methods names no method"),
    (["--temperature", "nan"], "--temperature: must be a finite number"),
    (["--figure1-lengths", "a,b"], "--figure1-lengths must be positive numbers"),
    (["--questions", "/does/not/exist.jsonl"], "cannot read questions file"),
    (["--questions", "BAD_UTF8"], "can't decode byte 0xff"),
    (["--max-new-tokens", "0"], "--max-new-tokens must be > 0"),
])
def test_benchmark_bad_arguments(capsys, tmp_path, extra, needle):
    from scripts.benchmark import main
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"\xff\xfe\x00bad")
    argv = ["--questions", str(ROOT / "bench" / "prompts.jsonl"), "--out", str(tmp_path / "o"),
            "--figure1-lengths", ""] + [str(bad) if a == "BAD_UTF8" else a for a in extra]
    assert needle in one_line_exit_2(capsys, lambda: main(argv))
    assert not (tmp_path / "o").exists()


def test_benchmark_missing_out(capsys):
    from scripts.benchmark import main
    err = one_line_exit_2(capsys, lambda: main(["--questions", "q.jsonl"]))
    assert "--out" in err


# -- app/main.py -------------------------------------------------------------------------------
@pytest.mark.parametrize("argv,needle", [
    (["--port", "70000"], "--port must be 1..65535"),
    (["--port", "0"], "--port must be 1..65535"),
    (["--port", "http"], "--port: invalid int value"),
    (["--max-queue", "0"], "--max-queue must be >= 1"),
    (["--ctx-size", "1"], "--ctx-size must be at least 64"),
    (["--pair", "../etc/passwd"], "unknown pair '../etc/passwd'"),
    (["--target-dtype", "int3"], "--target-dtype must be one of"),
])
def test_app_bad_arguments_fail_before_serving(capsys, monkeypatch, argv, needle):
    import app.host
    from app.main import main
    monkeypatch.setattr(app.host, "ModelHost", None)  # nothing may get as far as loading
    assert needle in one_line_exit_2(capsys, lambda: main(argv))


def test_app_as_a_process_fails_fast_on_one_line():
    r = subprocess.run([sys.executable, "app/main.py", "--port", "70000"], capture_output=True,
                       text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 2 and r.stderr.strip() == "error: --port must be 1..65535, got 70000"


# -- the API -----------------------------------------------------------------------------------
HELLO = [{"role": "user", "content": "Name a fruit."}]
GOOD = {"model": "smol-self", "messages": HELLO, "max_tokens": 2, "temperature": 0}
GOOD_TEXT = {"model": "smol-self", "prompt": "The sky is", "max_tokens": 2, "temperature": 0}


def said(content: str) -> dict:
    return {**GOOD, "messages": [{"role": "user", "content": content}]}


API_BAD = [  # (path, body, status, param or None, code or None)
    ("/chat/completions", b"\xff\xfe\x00bad", 400, None, None),  # not UTF-8
    ("/chat/completions", b'{"model": "smol-self", "messages": [{"role": "user", '
                          b'"content": "caf\xe9"}]}', 400, None, None),  # Latin-1 inside JSON
    ("/chat/completions", b"", 400, None, None),
    ("/chat/completions", b'"hello"', 400, None, None),
    ("/chat/completions", said(""), 400, "messages", "invalid_value"),
    ("/chat/completions", said(" \n\t"), 400, "messages", "invalid_value"),
    ("/chat/completions", said(CONTROL), 400, "messages", "invalid_value"),
    ("/chat/completions", said(PASTE_100K), 400, "messages", "context_length_exceeded"),
    ("/chat/completions", said(PASTE_2M), 400, "messages", "context_length_exceeded"),
    ("/chat/completions", {**GOOD, "messages": [{"role": "user"}]}, 400, "messages", None),
    ("/chat/completions", {**GOOD, "messages": [{"role": "user", "content": 7}]}, 400,
     None, "invalid_value"),
    ("/chat/completions", b'{"model": "smol-self", "messages": [{"role": "user", "content": '
                          b'"hi"}], "temperature": 1e999}', 400, "temperature", None),  # inf
    ("/chat/completions", {**GOOD, "temperature": "0"}, 400, "temperature", "invalid_value"),
    ("/chat/completions", {**GOOD, "top_p": 1.5}, 400, "top_p", "invalid_value"),
    ("/chat/completions", {**GOOD, "top_k": -1}, 400, "top_k", "invalid_value"),
    ("/chat/completions", {**GOOD, "seed": -2}, 400, "seed", "invalid_value"),
    ("/chat/completions", {**GOOD, "max_tokens": -5}, 400, "max_tokens", "invalid_value"),
    ("/chat/completions", {**GOOD, "max_tokens": 1.5}, 400, "max_tokens", "invalid_value"),
    ("/chat/completions", {**GOOD, "max_tokens": "10"}, 400, "max_tokens", "invalid_value"),
    ("/chat/completions", {**GOOD, "max_tokens": 10**30}, 400, "messages",
     "context_length_exceeded"),
    ("/chat/completions", {**GOOD, "gamma": 0}, 400, "gamma", "invalid_value"),
    ("/chat/completions", {**GOOD, "theta_scale": 0}, 400, "theta_scale", "invalid_value"),
    ("/chat/completions", {**GOOD, "stream": "yes"}, 400, "stream", "invalid_value"),
    ("/chat/completions", {**GOOD, "stop": [""]}, 400, "stop", None),
    ("/chat/completions", {**GOOD, "model": 123}, 400, "model", "invalid_value"),
    ("/chat/completions", {**GOOD, "model": ""}, 400, "model", "invalid_value"),
    ("/chat/completions", {**GOOD, "model": "/etc/passwd"}, 404, "model", "model_not_found"),
    ("/chat/completions", {**GOOD, "model": "../x"}, 404, "model", "model_not_found"),
    ("/completions", {**GOOD_TEXT, "prompt": []}, 400, "prompt", None),
    ("/completions", {**GOOD_TEXT, "prompt": ["a"] * 65}, 400, "prompt", "invalid_value"),
    ("/completions", {**GOOD_TEXT, "prompt": 5}, 400, "prompt", "invalid_value"),
    ("/completions", {**GOOD_TEXT, "prompt": CONTROL}, 400, "prompt", "invalid_value"),
    ("/completions", {**GOOD_TEXT, "prompt": PASTE_2M, "stream": True}, 400, "prompt",
     "context_length_exceeded"),
]


@pytest.mark.parametrize("path,body,status,param,code", API_BAD)
def test_api_bad_input_is_4xx_and_the_next_request_works(served, path, body, status, param,
                                                         code):
    r = served.post(path, body, timeout=60)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    assert "Traceback" not in err["message"]
    assert param is None or err["param"] == param, err
    assert code is None or err["code"] == code, err
    good = GOOD_TEXT if path == "/completions" else GOOD
    assert served.post(path, good).status_code == 200


# -- the page's handlers -----------------------------------------------------------------------
REQUEST = SimpleNamespace(session_hash="bad-input")
FINE = dict(method="vanilla", max_new_tokens=2, temperature=0.0, top_p=1.0, top_k=0, seed=0,
            gamma_mode="auto", gamma=5, multi_seq=True, max_seqs=4, theta_scale=1.0)


def knobs(**over) -> tuple:
    return tuple({**FINE, **over}.values())


@pytest.fixture(scope="module")
def page(smol_pair):
    from app.host import ModelHost
    from app.ui import App

    host = ModelHost(lambda name, say: smol_pair)
    list(host.prepare("smol-self", poll_s=0.01))
    app = App(host, "smol-self")
    history = last(app.chat(REQUEST, "Name a color.", [], "smol-self", False, "", *knobs()))
    assert history["status"].startswith("done:"), history["status"]
    return SimpleNamespace(app=app, history=history["chatbot"])


UI_BAD = [  # (message, pair, settings, what the status says)
    ("", "smol-self", {}, "Type a prompt first."),
    (" \n\t", "smol-self", {}, "Type a prompt first."),
    (CONTROL, "smol-self", {}, "Type a prompt first."),
    (PASTE_100K, "smol-self", {}, "tokens; the context window"),
    (PASTE_2M, "smol-self", {}, "characters; the context window"),
    ("Hi", "smol-self", {"temperature": float("nan")}, "temperature must be a finite number"),
    ("Hi", "smol-self", {"theta_scale": float("inf")}, "theta scale must be a finite number"),
    ("Hi", "smol-self", {"top_p": 0.0}, "top-p must be in (0, 1]"),
    ("Hi", "smol-self", {"top_k": -1}, "top-k must be >= 0"),
    ("Hi", "smol-self", {"max_new_tokens": 0}, "max-new-tokens must be > 0"),
    ("Hi", "smol-self", {"max_new_tokens": "many"}, "invalid literal"),
    ("Hi", "smol-self", {"seed": -1000, "temperature": 0.7}, "seed must be -1 (random) or >= 0"),
    ("Hi", "smol-self", {"gamma_mode": "fixed", "gamma": 0}, "gamma must be 'auto' or 1..64"),
    ("Hi", "smol-self", {"max_seqs": 99}, "max-seqs must be 1..8"),
    ("Hi", "smol-self", {"method": "magic"}, "unknown method 'magic'"),
    ("Hi", "nope", {}, "unknown pair 'nope'"),
    ("Hi", "/etc/passwd", {}, "unknown pair '/etc/passwd'"),
]


@pytest.mark.parametrize("message,pair,over,needle", UI_BAD)
def test_chat_bad_input_leaves_the_chat_and_the_next_one_works(page, message, pair, over,
                                                               needle):
    out = last(page.app.chat(REQUEST, message, page.history, pair, False, "", *knobs(**over)))
    assert needle in out["status"], out["status"]
    assert out.get("chatbot", page.history) == page.history
    if not needle.startswith("Type"):
        assert out["prompt"] == message.strip()  # the typed text is back in the box
    regen = last(page.app.regenerate(REQUEST, page.history, pair, False, "", *knobs(**over)))
    if message == "Hi":  # regenerate fails on the same settings; the old answer stays
        assert needle in regen["status"] and regen["chatbot"] == page.history
    ok = last(page.app.chat(REQUEST, "Name a fruit.", page.history, "smol-self", False, "",
                            *knobs()))
    assert ok["status"].startswith("done:") and len(ok["chatbot"]) == len(page.history) + 2


@pytest.mark.parametrize("message,over,needle", [
    ("", {}, "Type a prompt (or chat first) to compare."),
    (CONTROL, {}, "Type a prompt (or chat first) to compare."),
    (PASTE_2M, {}, "characters; the context window"),
    ("Hi", {"temperature": float("nan")}, "temperature must be a finite number"),
    ("Hi", {"top_p": 1.5}, "top-p must be in (0, 1]"),
])
def test_compare_bad_input_is_an_error_line(page, message, over, needle):
    *_, (note, *texts) = page.app.compare(REQUEST, message, [], "smol-self", False, "",
                                          *knobs(**over))
    assert needle in note and texts == ["", "", ""]
    assert note.startswith("**error:**") or note.startswith("Type")
    *_, (note, *texts) = page.app.compare(REQUEST, "Hi", [], "smol-self", False, "", *knobs())
    assert "all texts are identical" in note and texts[0]
