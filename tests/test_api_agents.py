"""Agents as clients of the default pair (smol-self, whose chat template has no tool syntax):
the openai SDK's two-step tool loop (call, result, final answer) whole and streamed, forced
and named tool calls that always parse, greedy duo equal to vanilla under the tool grammar,
/v1/completions prompt lists, and bad tool input refused in the OpenAI error shape."""
from __future__ import annotations

import json

import pytest

from tests import live_server
from tests.live_server import served  # noqa: F401 - the module's server (a fixture)

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
ADD = {"type": "function", "function": {
    "name": "add", "description": "Add two integers",
    "parameters": {"type": "object", "properties": {"a": {"type": "integer"},
                                                    "b": {"type": "integer"}},
                   "required": ["a", "b"]}}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def chat(served, messages=ASK, max_tokens=40, **kw):
    return live_server.chat(served, messages, max_tokens, **kw)


def check_call(call, tools) -> dict:
    """The call names one of `tools` and its arguments hold that tool's required keys with
    values of their types."""
    fn = {t["function"]["name"]: t["function"] for t in tools}[call.function.name]
    args = json.loads(call.function.arguments)
    types = {"string": str, "integer": int}
    props = fn["parameters"]["properties"]
    assert set(args) <= set(props) and set(fn["parameters"]["required"]) <= set(args)
    assert all(isinstance(v, types[props[k]["type"]]) for k, v in args.items())
    assert call.id and call.type == "function"
    return args


def streamed(stream) -> tuple[str, list[dict], str]:
    """(content, tool calls, finish reason) put together from the chunks as SDK users do."""
    text, calls, finish = "", {}, None
    for chunk in stream:
        delta = chunk.choices[0].delta
        text += delta.content or ""
        for piece in delta.tool_calls or []:
            call = calls.setdefault(piece.index, {"id": None, "name": "", "arguments": ""})
            call["id"] = piece.id or call["id"]
            call["name"] += piece.function.name or ""
            call["arguments"] += piece.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    return text, [calls[k] for k in sorted(calls)], finish


def test_the_sdk_tool_loop_whole_and_streamed(served):
    """The loop whole, then streamed: the same call and the same final answer, put together
    from the chunks (the final prompt renders no call id: the streamed loop's is the whole
    one's, so its answer is the whole final answer; before, a case of its own asked for it
    whole again, a generation of 40 tokens)."""
    first = chat(served, tools=[WEATHER], tool_choice="required").choices[0]
    assert first.finish_reason == "tool_calls" and first.message.content is None
    (call,) = first.message.tool_calls
    assert check_call(call, [WEATHER]) == {"city": "Paris"}
    history = ASK + [first.message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id, "content": "18 C, sunny"}]
    final = chat(served, history, tools=[WEATHER]).choices[0]
    assert final.finish_reason == "stop" and final.message.tool_calls is None
    assert final.message.content

    text, calls, finish = streamed(chat(served, tools=[WEATHER], tool_choice="required",
                                        stream=True))
    assert finish == "tool_calls" and text == "" and len(calls) == 1
    assert calls[0]["name"] == "get_weather" and json.loads(calls[0]["arguments"]) == {
        "city": "Paris"}
    assert calls[0]["arguments"] == call.function.arguments  # the whole call, in pieces
    history = ASK + [{"role": "assistant", "tool_calls": [{
        "id": calls[0]["id"], "type": "function", "function": {
            "name": calls[0]["name"], "arguments": calls[0]["arguments"]}}]},
        {"role": "tool", "tool_call_id": calls[0]["id"], "content": "18 C, sunny"}]
    text, calls, finish = streamed(chat(served, history, tools=[WEATHER], stream=True))
    assert finish == "stop" and calls == [] and text == final.message.content


@pytest.mark.parametrize("ask", ["Hello!", "What is 2 plus 3?", "Tell me a story."])
def test_required_always_yields_a_valid_call(served, ask):
    choice = chat(served, [{"role": "user", "content": ask}], tools=[WEATHER, ADD],
                  tool_choice="required", parallel_tool_calls=False).choices[0]
    assert choice.finish_reason == "tool_calls" and len(choice.message.tool_calls) == 1
    check_call(choice.message.tool_calls[0], [WEATHER, ADD])


def test_a_named_choice_calls_that_function(served):
    named = {"type": "function", "function": {"name": "add"}}
    choice = chat(served, tools=[WEATHER, ADD], tool_choice=named).choices[0]
    assert {c.function.name for c in choice.message.tool_calls} == {"add"}
    for call in choice.message.tool_calls:
        check_call(call, [ADD])


# required: 24 tokens reach the call's arguments; auto: the answer starts as text here ("The
# weather in Paris is"), so the grammar is released at its start and the rest is free text:
# 8 tokens show it (at 24, 32 tokens more; duo equal to vanilla on such an answer, 16 tokens:
# tests/test_grammar.py's tool case)
@pytest.mark.parametrize("tool_choice,tokens", [("required", 24), ("auto", 8)])
def test_greedy_duo_equals_vanilla_under_the_tool_grammar(served, tool_choice, tokens):
    def run(method):
        r = chat(served, tools=[WEATHER, ADD], tool_choice=tool_choice, max_tokens=tokens,
                 extra_body={"method": method})
        m = r.choices[0].message
        return (m.content, [(c.function.name, c.function.arguments)
                            for c in m.tool_calls or []], r.usage.completion_tokens)
    assert run("duo") == run("vanilla")


def test_prompt_lists_answer_one_choice_each_in_order(served):
    client, prompts = served.client(), ["The sky is", "Paris is", "One, two,"]
    one = [client.completions.create(model="smol-self", prompt=p, max_tokens=4,
                                     temperature=0).choices[0].text for p in prompts]
    r = client.completions.create(model="smol-self", prompt=prompts, max_tokens=4,
                                  temperature=0, n=2)
    assert [c.index for c in r.choices] == list(range(6))
    assert [c.text for c in r.choices] == [t for t in one for _ in range(2)]
    assert r.usage.completion_tokens == 24


BAD = [  # (body fields, status, param)
    ({"tools": [{"type": "function", "function": {
        "name": "f", "parameters": {"type": "objekt"}}}], "tool_choice": "required"},
     400, "tools"),
    ({"tools": [{"type": "function", "function": {"name": "two words"}}]}, 400,
     "tools.0.function.name"),
    ({"tools": [WEATHER, WEATHER]}, 400, "tools.1.function.name"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
     400, "tool_choice"),
    ({"tool_choice": "required"}, 400, "tool_choice"),
    ({"tool_choice": "sometimes"}, 400, "tool_choice"),
    ({"parallel_tool_calls": "yes"}, 400, "parallel_tool_calls"),
    ({"tools": [WEATHER], "messages": [
        {"role": "user", "content": "Hi"}, {"role": "assistant", "tool_calls": [{
            "id": "c1", "type": "function", "function": {"name": "nope", "arguments": "{}"}}]}]},
     400, "messages.1.tool_calls.0.function.name"),
    ({"messages": [{"role": "user", "content": "Hi"},
                   {"role": "tool", "tool_call_id": "c9", "content": "18 C"}]}, 400,
     "messages.1.tool_call_id"),
]


@pytest.mark.parametrize("fields,status,param", BAD)
def test_bad_tool_input_is_refused_and_the_server_keeps_serving(served, fields, status, param):
    r = served.post("/chat/completions", {"model": "smol-self", "messages": ASK,
                                          "max_tokens": 2, **fields})
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["param"] == param and err["type"] == "invalid_request_error" and err["message"]
    ok = served.post("/chat/completions", {"model": "smol-self", "messages": ASK,
                                           "max_tokens": 2})
    assert ok.status_code == 200


@pytest.mark.parametrize("prompt", [[], ["a"] * 65])
def test_empty_and_over_long_prompt_lists_are_400(served, prompt):
    r = served.post("/completions", {"model": "smol-self", "prompt": prompt, "max_tokens": 2})
    assert r.status_code == 400 and r.json()["error"]["param"] == "prompt"
