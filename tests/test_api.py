"""The OpenAI-compatible API on a live server (127.0.0.1) over the real smol-self pair: the
official `openai` client, raw HTTP for the errors, concurrent clients and disconnects."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from tests import live_server
from tests.live_server import KEY
from tests.live_server import served  # noqa: F401 - the module's server (a fixture)

HELLO = [{"role": "user", "content": "What is the capital of France?"}]


def chat(served, messages=HELLO, **kw):
    return live_server.chat(served, messages, **kw)


def test_greedy_chat_equals_the_cli_and_duo_equals_vanilla(served, smol_pair):
    """The CLI's prompt as the CLI reads it (pair.prompt_ids of the text: its process gives the
    oracle's ids, tests/test_cli.py), decoded by the oracle, the target-only decoder: a
    process of its own for it loaded smol-self again (12 CPU seconds). (`vanilla` through
    the API as well: its 24 single steps again; the API's `method: vanilla` runs vanilla:
    test_api_structured.py's bias case.)"""
    from tests.conftest import vanilla_ids

    ids = vanilla_ids(smol_pair, smol_pair.prompt_ids(HELLO[0]["content"]), 24)
    expected = smol_pair.decode(ids)
    duo = chat(served, extra_body={"method": "duo"})
    assert duo.choices[0].message.content == expected
    assert duo.usage.completion_tokens == len(ids)
    assert duo.model_extra["timings"]["method"] == "duo"
    assert duo.model_extra["timings"]["predicted_per_second"] > 0


def oracle_text(pair) -> str:
    """The greedy answer to HELLO, 24 tokens: the oracle's (the test above: the API's answer)."""
    from tests.conftest import vanilla_ids

    return pair.decode(vanilla_ids(pair, pair.prompt_ids(HELLO[0]["content"]), 24))


def test_streamed_chat_and_completions_equal_the_whole_answers(served, smol_pair):
    whole = oracle_text(smol_pair)  # the whole answer (a chat for it: 24 tokens more)
    stream = chat(served, stream=True, stream_options={"include_usage": True})
    *chunks, last = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == whole
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")
    assert last.choices == [] and last.usage.completion_tokens > 0
    assert last.model_extra["timings"]["rounds"] > 0
    client = served.client()
    text = client.completions.create(model="smol-self", prompt="The sky is", max_tokens=12,
                                     temperature=0)
    parts = client.completions.create(model="smol-self", prompt="The sky is", max_tokens=12,
                                      temperature=0, stream=True)
    assert "".join(p.choices[0].text for p in parts) == text.choices[0].text
    assert text.choices[0].finish_reason == "length" and text.usage.completion_tokens == 12


def test_models_lists_the_loaded_pair(served):
    assert [m.id for m in served.client().models.list()] == ["smol-self"]


def test_sse_ends_with_done(served):
    body = {"model": "smol-self", "messages": HELLO, "max_tokens": 4, "stream": True}
    lines = [ln for ln in served.post("/chat/completions", body).text.split("\n") if ln]
    assert lines[-1] == "data: [DONE]" and all(ln.startswith("data: ") for ln in lines)


# two tokens: the first from the prefill, the second from a round of the method's own (at 4,
# the thirty requests that show the server still serves cost about 3 CPU seconds more)
GOOD = {"model": "smol-self", "messages": HELLO, "max_tokens": 2, "temperature": 0}
BAD = [  # (body, status, param or None, code or None)
    (b"{not json", 400, None, None),
    (b"[1, 2]", 400, None, None),
    (b'{"model": "smol-self", "messages": [], "temperature": NaN}', 400, None, None),
    ({"model": "smol-self"}, 400, "messages", "missing_required_parameter"),
    ({**GOOD, "temperature": "hot"}, 400, "temperature", "invalid_value"),
    ({**GOOD, "messages": "hi"}, 400, "messages", "invalid_value"),
    ({**GOOD, "messages": [{"role": "wizard", "content": "hi"}]}, 400, "messages.0.role", None),
    ({**GOOD, "temperature": 5}, 400, "temperature", "invalid_value"),
    ({**GOOD, "max_tokens": 0}, 400, "max_tokens", "invalid_value"),
    ({**GOOD, "top_p": 0}, 400, "top_p", "invalid_value"),
    ({**GOOD, "method": "magic"}, 400, "method", "invalid_value"),
    ({**GOOD, "gamma": 1000}, 400, "gamma", "invalid_value"),
    ({**GOOD, "n": 9}, 400, "n", "invalid_value"),
    ({**GOOD, "stop": [f"s{i}" for i in range(65)]}, 400, "stop", None),
    ({**GOOD, "messages": [{"role": "user", "content": "   "}]}, 400, "messages", None),
    ({**GOOD, "model": "gpt-4"}, 404, "model", "model_not_found"),
    ({**GOOD, "max_tokens": 10**9}, 400, "messages", "context_length_exceeded"),
    ({**GOOD, "messages": [{"role": "user", "content": "word " * 9000}]}, 400, "messages",
     "context_length_exceeded"),
]


@pytest.mark.parametrize("body,status,param,code", BAD)
def test_errors_come_in_the_openai_shape_and_the_server_keeps_serving(served, body, status,
                                                                       param, code):
    r = served.post("/chat/completions", body)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    assert param is None or err["param"] == param
    assert code is None or err["code"] == code
    assert served.post("/chat/completions", GOOD).status_code == 200


def test_window_message_names_the_limit(served):
    r = served.post("/chat/completions", {**GOOD, "max_tokens": 10**9})
    assert f"context window of {served.host.pair.target.n_ctx} tokens" in r.json()["error"]["message"]


def test_a_wrong_or_missing_key_is_401(served):
    for key in (None, "wrong"):
        r = served.post("/chat/completions", GOOD, key=key)
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    assert httpx.get(served.url + "/models").status_code == 401
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=served.url, api_key="nope", max_retries=0).models.list()


def test_a_full_queue_is_429(served):
    gate = served.api.gate
    gate.n = gate.limit
    try:
        r = served.post("/chat/completions", GOOD)
        assert r.status_code == 429 and r.json()["error"]["code"] == "queue_full"
    finally:
        gate.n = 0
    assert served.post("/chat/completions", GOOD).status_code == 200


QUESTIONS = ["What is 2+2?", "Name a fruit.", "Say hello.", "What colour is grass?",
             "Count to three.", "Name a planet.", "What is water made of?", "Name a bird."]


def test_concurrent_clients_get_the_answers_they_get_alone_or_a_429(served):
    """Eight clients at once through the SDK, with places for six: each is answered with
    its answer alone or refused with 429 `queue_full` (two at once was a case too: its
    questions and its overlap are the first two of these; sixteen clients with places for
    ten, in tests/test_soak.py, were the same check over raw HTTP at 6 tokens: 32
    generations more)."""
    def ask(q):
        return chat(served, [{"role": "user", "content": q}], max_tokens=8,
                    extra_body={"method": "duo"}).choices[0].message.content

    def ask_or_refused(q):
        try:
            return ask(q)
        except openai.RateLimitError as e:
            return e.body
    alone = [ask(q) for q in QUESTIONS]
    assert len(set(alone)) == len(alone)  # a mix-up would show (8 tokens: 12 before)
    served.api.gate.limit = 6  # fewer places than clients
    try:
        with ThreadPoolExecutor(len(QUESTIONS)) as pool:
            together = list(pool.map(ask_or_refused, QUESTIONS))
    finally:
        served.api.gate.limit = 16
    answered = [i for i, got in enumerate(together) if isinstance(got, str)]
    print(f"{len(answered)} of {len(QUESTIONS)} answered")  # pytest -s
    assert len(answered) >= 6, together
    for i, got in enumerate(together):
        if i in answered:
            assert got == alone[i], QUESTIONS[i]
        else:
            assert got["code"] == "queue_full", got
    assert served.idle(within_s=10) and served.api.gate.n == 0


def finished(monkeypatch, pair) -> list[dict]:
    """The final stats of each generation `pair` runs from here on."""
    from contextlib import closing

    ends, generate = [], pair.generate

    def recorded(*args, **kwargs):
        with closing(generate(*args, **kwargs)) as events:
            for ev in events:
                if ev.done:
                    ends.append(ev.stats)
                yield ev
    monkeypatch.setattr(pair, "generate", recorded)
    return ends


def assert_cancelled(served, ends: list[dict]) -> None:
    """The generation ended by its stop, long before its 2000 tokens (its stats, not a
    clock: a slow host takes longer to stop it)."""
    assert served.idle(within_s=120)
    assert len(ends) == 1 and ends[0]["stop_reason"] == "stopped", ends
    assert ends[0]["new_tokens"] < 2000


def test_a_client_that_leaves_mid_stream_cancels_its_generation(served, smol_pair,
                                                                monkeypatch):
    from tests.conftest import vanilla_ids

    # the greedy chat's answer is the oracle's (the first test), kept in memory: no chat for it
    fresh = smol_pair.decode(vanilla_ids(smol_pair, smol_pair.prompt_ids(HELLO[0]["content"]),
                                         24))
    body = {**GOOD, "max_tokens": 2000, "stream": True, "temperature": 0.8,
            "messages": [{"role": "user", "content": "Write a very long story."}]}
    ends = finished(monkeypatch, smol_pair)
    with httpx.stream("POST", served.url + "/chat/completions", json=body,
                      headers={"Authorization": f"Bearer {KEY}"}, timeout=60) as r:
        lines = r.iter_lines()
        for _ in range(6):
            next(lines)
    assert_cancelled(served, ends)
    assert chat(served).choices[0].message.content == fresh


def test_a_client_that_times_out_cancels_its_generation(served, smol_pair, monkeypatch):
    body = {**GOOD, "max_tokens": 2000, "temperature": 0.8,
            "messages": [{"role": "user", "content": "Write a very long story."}]}
    ends = finished(monkeypatch, smol_pair)
    with pytest.raises(httpx.TimeoutException):
        served.post("/chat/completions", body, timeout=1.5)
    assert_cancelled(served, ends)
    assert served.post("/chat/completions", GOOD).status_code == 200


def test_a_body_over_the_limit_is_413(served):
    from app.api import MAX_BODY

    r = served.post("/chat/completions", b"x" * (MAX_BODY + 1))
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"
    assert served.post("/chat/completions", GOOD).status_code == 200


def test_api_bench_reads_the_timings_of_a_stream(served):
    from scripts.api_bench import stream_chat

    text, ttft, timings = stream_chat(served.client(), "smol-self", HELLO, max_tokens=4)
    assert text and ttft > 0 and timings["predicted_n"] == 4 and "cache_n" in timings
