"""The API's `lookup` field (auto, on, off; docs/lookup.md): it reaches the engine's settings,
and a bad value, or one its method cannot honour, is a 400 naming `lookup` in the OpenAI error
shape. A live server over a recording fake pair: no model loads."""
from __future__ import annotations

import json
import threading
import time
from types import SimpleNamespace

import pytest

from app.openai_io import ChatRequest, parse
from core.output import Event
from models.pairs.catalog import get_pair
from tests.live_server import Served

HELLO = [{"role": "user", "content": "Copy this: a, b, c."}]
GOOD = {"model": "smol-self", "messages": HELLO, "max_tokens": 4, "temperature": 0}


class RecordingPair:
    """What the API uses of a pair; every answer is "ok", and the settings it was asked for
    are kept."""

    def __init__(self):
        self.spec, self.target = get_pair("smol-self"), SimpleNamespace(n_ctx=512)
        self.tokenizer_lock, self.configs = threading.RLock(), []

    def prompt_ids(self, prompt, raw=False, tools=None):
        return [1, 2, 3]

    def check_room(self, ids, max_new_tokens):
        pass

    def generate(self, ids, cfg, stop=None):
        self.configs.append(cfg)
        yield Event(tokens=[7], sources=["lookup"], text="ok", done=True, stats={
            "method": cfg.method, "new_tokens": 1, "prompt_tokens": len(ids),
            "stop_reason": "eos", "wall_s": 0.01, "ttft_s": 0.001, "tokens_per_s": 100.0})

    def close(self):
        pass


@pytest.fixture(scope="module")
def served():
    s = Served(RecordingPair())
    yield s
    s.close()


def config(body: dict):
    return parse(ChatRequest, json.dumps({**GOOD, **body}).encode()).gen_config(4, 0)


def test_the_field_reaches_the_settings_and_defaults_to_auto():
    assert config({}).lookup == "auto"
    for value in ("auto", "on", "off"):
        assert config({"lookup": value, "method": "duo"}).lookup == value
    assert config({"lookup": None}).lookup == "auto"  # null is the default
    cfg = config({"method": "lookup", "lookup": "on"})
    assert (cfg.method, cfg.lookup) == ("lookup", "on")


@pytest.mark.parametrize("body", [{"lookup": "sometimes"}, {"lookup": True}, {"lookup": 1},
                                  {"method": "vanilla", "lookup": "on"},
                                  {"method": "sps", "lookup": "on"},
                                  {"method": "lookup", "lookup": "off"}])
def test_what_cannot_be_honoured_is_refused_by_name(served, body):
    r = served.post("/chat/completions", {**GOOD, **body})
    err = r.json()["error"]
    assert r.status_code == 400 and err["param"] == "lookup", r.text
    assert err["code"] == "invalid_value" and "lookup" in err["message"]


def test_over_http_a_bad_value_is_a_400_and_a_good_one_is_honoured(served):
    r = served.post("/chat/completions", {**GOOD, "lookup": "maybe"})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["param"] == "lookup" and err["type"] == "invalid_request_error"
    r = served.post("/chat/completions", {**GOOD, "method": "vanilla", "lookup": "on"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "lookup"
    pair = served.host.pair
    before = len(pair.configs)
    for value in ("off", "on"):
        r = served.post("/completions", {"model": "smol-self", "prompt": "a, b, c, a, b,",
                                         "max_tokens": 4, "lookup": value})
        assert r.status_code == 200, r.text
    r = served.post("/chat/completions", {**GOOD, "method": "lookup"})
    assert r.status_code == 200, r.text
    deadline = time.monotonic() + 5
    while len(pair.configs) < before + 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [(c.method, c.lookup) for c in pair.configs[before:]] == [
        ("duo", "off"), ("duo", "on"), ("lookup", "auto")]
