"""llama-server's conventions on a live server over smol-self: /health (503 while loading),
the routes without /v1, /tokenize and /detokenize with the target's tokenizer, and --cors
(no browser origin is answered unless named)."""
from __future__ import annotations

import json
import threading

import httpx
import openai
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from app.api import Api, router
from app.cors import origins, use_cors
from app.host import ModelHost
from tests.live_server import KEY, Served
from tests.test_api import GOOD, served  # noqa: F401 - the shared server fixture

AUTH = {"Authorization": f"Bearer {KEY}"}
ALLOWED, OTHER = "http://localhost:3000", "https://evil.example"


def test_health_is_503_while_loading_then_200():
    release = threading.Event()
    host = ModelHost(lambda name, say: release.wait(30) and object())
    app = FastAPI()
    app.include_router(router(Api(host, api_key="k")))
    client = TestClient(app)
    host.start_loading("smol-self")
    r = client.get("/health")
    assert r.status_code == 503 and r.json()["error"]["code"] == "model_loading"
    release.set()
    while host.loading:
        threading.Event().wait(0.02)
    assert client.get("/health").json() == {"status": "ok"}  # no key needed


def test_routes_without_v1(served):
    assert httpx.get(served.base + "/models", headers=AUTH).json()["data"][0]["id"] == "smol-self"
    r = httpx.post(served.base + "/chat/completions", json=GOOD, headers=AUTH, timeout=120)
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"]
    r = httpx.post(served.base + "/completions", headers=AUTH, timeout=120,
                   json={"model": "smol-self", "prompt": "The sky is", "max_tokens": 3,
                         "temperature": 0})
    assert r.json()["usage"]["completion_tokens"] == 3
    client = openai.OpenAI(base_url=served.base, api_key=KEY, max_retries=0)
    assert client.chat.completions.create(model="smol-self", messages=GOOD["messages"],
                                          max_tokens=3, temperature=0).choices[0].message.content
    assert httpx.post(served.base + "/chat/completions", json=GOOD).status_code == 401


def test_tokenize_and_detokenize_use_the_targets_tokenizer(served):
    tokenizer = served.host.pair.tokenizer
    text = "The capital of France is Paris."
    r = httpx.post(served.base + "/tokenize", json={"content": text}, headers=AUTH)
    tokens = r.json()["tokens"]
    assert tokens == tokenizer(text, add_special_tokens=False)["input_ids"]
    back = httpx.post(served.base + "/detokenize", json={"tokens": tokens}, headers=AUTH)
    assert back.json() == {"content": text}
    special = httpx.post(served.base + "/tokenize", headers=AUTH,
                         json={"content": text, "add_special": True}).json()["tokens"]
    assert special == tokenizer(text, add_special_tokens=True)["input_ids"]
    pieces = httpx.post(served.base + "/tokenize", headers=AUTH,
                        json={"content": text, "with_pieces": True}).json()["tokens"]
    assert [p["id"] for p in pieces] == tokens and "".join(p["piece"] for p in pieces) == text


@pytest.mark.parametrize("path,body,param", [
    ("/tokenize", {}, "content"), ("/tokenize", {"content": 5}, "content"),
    ("/detokenize", {"tokens": [-1]}, "tokens"), ("/detokenize", {"tokens": [10**9]}, "tokens"),
    ("/detokenize", {"tokens": "abc"}, "tokens")])
def test_tokenizer_routes_refuse_bad_bodies(served, path, body, param):
    r = httpx.post(served.base + path, json=body, headers=AUTH)
    assert r.status_code == 400 and r.json()["error"]["param"] == param
    assert httpx.post(served.base + path, json=body).status_code == 401


def preflight(url: str, origin: str) -> httpx.Response:
    return httpx.options(url, headers={"Origin": origin, "Access-Control-Request-Method": "POST",
                                       "Access-Control-Request-Headers": "authorization"})


def test_no_origin_is_answered_by_default(served):
    r = preflight(served.url + "/chat/completions", ALLOWED)
    assert "access-control-allow-origin" not in r.headers
    r = httpx.post(served.url + "/chat/completions", json=GOOD,
                   headers={**AUTH, "Origin": ALLOWED}, timeout=120)
    assert "access-control-allow-origin" not in r.headers


def test_cors_answers_the_named_origins_only(smol_pair):
    s = Served(smol_pair, cors=origins([ALLOWED + ",http://127.0.0.1:8080"]))
    try:
        for path in ("/v1/chat/completions", "/chat/completions", "/tokenize"):
            ok = preflight(s.base + path, ALLOWED)
            assert ok.status_code == 200
            assert ok.headers["access-control-allow-origin"] == ALLOWED
            assert "access-control-allow-origin" not in preflight(s.base + path, OTHER).headers
        r = httpx.post(s.url + "/chat/completions", json=GOOD,
                       headers={**AUTH, "Origin": ALLOWED}, timeout=120)
        assert r.headers["access-control-allow-origin"] == ALLOWED
    finally:
        s.close()


def test_cors_replaces_gradios_rule():
    """gradio lets any page on localhost in; with --cors none, nothing is let in."""
    from gradio.route_utils import CustomCORSMiddleware

    app = FastAPI()
    app.add_api_route("/x", lambda: {"ok": True}, methods=["POST"])
    app.add_middleware(CustomCORSMiddleware)
    client = TestClient(app, base_url="http://127.0.0.1:7860")
    assert preflight_of(client).headers.get("access-control-allow-origin") == ALLOWED
    use_cors(app, [])
    assert "access-control-allow-origin" not in preflight_of(client).headers
    use_cors(app, [OTHER])
    assert "access-control-allow-origin" not in preflight_of(client).headers


def preflight_of(client: TestClient):
    return client.options("/x", headers={"Origin": ALLOWED,
                                         "Access-Control-Request-Method": "POST"})


# -- llama-server's /completion and /infill ---------------------------------------------------
TIMINGS = {"prompt_n", "prompt_ms", "prompt_per_second", "predicted_n", "predicted_ms",
           "predicted_per_second"}


def native(served, path, body, stream=False) -> httpx.Response:
    return httpx.post(served.base + path, json={**body, "stream": stream}, headers=AUTH,
                      timeout=300)


def sse_data(response: httpx.Response) -> list[dict]:
    return [json.loads(ln[len("data: "):]) for ln in response.text.split("\n")
            if ln.startswith("data: ")]


def test_native_completion_whole_and_streamed(served):
    body = {"prompt": "The sky is", "n_predict": 6, "temperature": 0, "return_tokens": True}
    whole = native(served, "/completion", body).json()
    text = served.client().completions.create(model="smol-self", prompt="The sky is",
                                              max_tokens=6, temperature=0).choices[0].text
    assert whole["content"] == text and whole["stop"] is True and whole["stop_type"] == "limit"
    assert whole["tokens_predicted"] == 6 == len(whole["tokens"])
    assert whole["tokens_evaluated"] == len(served.host.pair.prompt_ids("The sky is", raw=True))
    assert TIMINGS <= set(whole["timings"]) and whole["timings"]["predicted_n"] == 6
    chunks = sse_data(native(served, "/completion", body, stream=True))
    assert all(not c["stop"] for c in chunks[:-1]) and chunks[-1]["stop"] is True
    assert "".join(c["content"] for c in chunks) == text
    assert [t for c in chunks[:-1] for t in c["tokens"]] == whole["tokens"]
    assert chunks[-1]["tokens_predicted"] == 6 and TIMINGS <= set(chunks[-1]["timings"])
    by_ids = native(served, "/completion", {**body, "prompt": served.host.pair.prompt_ids(
        "The sky is", raw=True)}).json()
    assert by_ids["content"] == text
    two = native(served, "/completion", {**body, "prompt": ["The sky is", "Paris is"]}).json()
    assert [a["index"] for a in two] == [0, 1] and two[0]["content"] == text


NATIVE_BAD = [({"prompt": "Hi", "foo": 1}, "foo"), ({"prompt": "Hi", "min_p": 0.1}, "min_p"),
              ({"prompt": "Hi", "n_probs": 3}, "n_probs"), ({"prompt": [1, "a"]}, "prompt"),
              ({"prompt": [10**9]}, "prompt"), ({"prompt": "Hi", "n_predict": "x"}, "n_predict"),
              ({"prompt": "Hi", "logit_bias": "x"}, "logit_bias"),
              ({"prompt": "Hi", "input_prefix": "a"}, "input_prefix")]


@pytest.mark.parametrize("body,param", NATIVE_BAD)
def test_native_bad_bodies_are_400_by_name(served, body, param):
    r = native(served, "/completion", body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param
    assert native(served, "/completion", {"prompt": "Hi", "n_predict": 1}).status_code == 200


@pytest.mark.parametrize("body,param", [
    ({"input_prefix": 5}, "input_prefix"), ({"input_suffix": ["a"]}, "input_suffix"),
    ({"input_extra": [{"filename": "a.py", "text": "x = 1"}]}, "input_extra"),
    ({"input_prefix": "a", "bar": 1}, "bar"), ({"input_prefix": "a", "mirostat": 2}, "mirostat")])
def test_infill_bad_bodies_are_400_by_name(served, body, param):
    r = native(served, "/infill", body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param
    assert native(served, "/completion", {"prompt": "Hi", "n_predict": 1}).status_code == 200


def test_infill_on_a_model_without_fim_tokens_is_400_by_name(served):
    from app.infill import fim_tokens
    from models.pairs.catalog import load_catalog

    infill = {name: spec.extra.get("infill", False) for name, spec in load_catalog().items()}
    assert fim_tokens(served.host.pair.tokenizer) is None and not infill["smol-self"]
    assert infill["qwen2.5-7b-0.5b"] and not infill["gemma-smol"]
    r = native(served, "/infill", {"input_prefix": "def f(", "input_suffix": "):", "n_predict": 2})
    assert r.status_code == 400 and r.json()["error"]["param"] == "input_prefix"
    assert "FIM" in r.json()["error"]["message"]
    r = served.post("/completions", {"model": "smol-self", "prompt": "def f(", "suffix": "):",
                                     "max_tokens": 2})
    assert r.status_code == 400 and r.json()["error"]["param"] == "suffix"


def test_infill_with_fim_tokens_is_lossless(served, monkeypatch):
    """A fake FIM vocabulary: three of SmolLM2's special tokens play prefix, suffix, middle."""
    import app.infill
    from tests.conftest import vanilla_ids

    monkeypatch.setattr(app.infill, "FIM_NAMES", [("<repo_name>", "<file_sep>", "<filename>")])
    pair = served.host.pair
    body = {"input_prefix": "def add(a, b):\n    return ", "input_suffix": "\n\nprint(add(1, 2))",
            "n_predict": 12, "temperature": 0, "return_tokens": True}
    duo = native(served, "/infill", {**body, "method": "duo"}).json()
    ids = (pair.tokenizer("")["input_ids"] + [3] + pair.tokenizer(body["input_prefix"])[
        "input_ids"] + [5] + pair.tokenizer(body["input_suffix"])["input_ids"] + [6])
    # vanilla on these ids (the oracle): the prompt is laid out so, and duo is lossless on
    # it (a `vanilla` through /infill as well decoded the same 12 single steps again)
    assert duo["tokens"] == vanilla_ids(pair, ids, 12)
    assert duo["tokens_evaluated"] == len(ids)
    text = served.client().completions.create(
        model="smol-self", prompt=body["input_prefix"], suffix=body["input_suffix"],
        max_tokens=12, temperature=0)
    assert text.choices[0].text == duo["content"]
