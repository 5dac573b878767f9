"""llama-server's conventions on a live server over smol-self: /health (503 while loading),
the routes without /v1, /tokenize and /detokenize with the target's tokenizer, and --cors
(no browser origin is answered unless named)."""
from __future__ import annotations

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
                   json={"model": "smol-self", "prompt": "The sky is", "max_tokens": 3})
    assert r.json()["usage"]["completion_tokens"] == 3
    client = openai.OpenAI(base_url=served.base, api_key=KEY, max_retries=0)
    assert client.chat.completions.create(model="smol-self", messages=GOOD["messages"],
                                          max_tokens=3).choices[0].message.content
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
