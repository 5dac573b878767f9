"""Tools through the chat template: a 400 naming `tools` on smol-self (its template has no tool
syntax); tool history turns accepted; and, on a pair with a small tool-capable template whose
answer is a Hermes / Qwen style call, the tools in the prompt and parsed `tool_calls` out."""
from __future__ import annotations

import json
import threading
import time

import openai
import pytest

from app.tools import HeldText, split_calls
from core.output import Event
from tests.live_server import Served
from tests.test_api import GOOD, served  # noqa: F401 - the shared server fixture

TEMPLATE = (
    "{%- if tools %}<|im_start|>system\nYou may call these tools:\n<tools>\n"
    "{%- for tool in tools %}\n{{ tool | tojson }}{%- endfor %}\n</tools>\n"
    "Call one as <tool_call>{\"name\": ..., \"arguments\": ...}</tool_call><|im_end|>\n"
    "{%- endif %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'assistant' and m.tool_calls %}<|im_start|>assistant"
    "{%- for c in m.tool_calls %}\n<tool_call>{\"name\": \"{{ c.function.name }}\", "
    "\"arguments\": {{ c.function.arguments | tojson }}}</tool_call>{%- endfor %}<|im_end|>\n"
    "{%- elif m.role == 'tool' %}<|im_start|>user\n<tool_response>{{ m.content }}"
    "</tool_response><|im_end|>\n"
    "{%- else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{%- endif %}"
    "{%- endfor %}{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}")
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
ANSWER = "Let me look. " + CALL
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
HISTORY = [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [{
        "id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "18 C, sunny"}]


class ScriptedPair:
    """smol-self's tokenizer with TEMPLATE; every answer is `answer`, a few characters an
    event; the prompts it got are kept as text."""

    def __init__(self, real, answer: str):
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(str(real.target_dir))
        self.tokenizer.chat_template = TEMPLATE
        self.spec, self.target, self.answer, self.prompts = real.spec, real.target, answer, []
        self.tokenizer_lock = threading.RLock()

    def prompt_ids(self, prompt, raw=False, tools=None):
        text = self.tokenizer.apply_chat_template(prompt, tools=tools, tokenize=False,
                                                  add_generation_prompt=True)
        self.prompts.append(text)
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def check_room(self, ids, max_new_tokens):
        pass

    def generate(self, ids, cfg, stop=None):
        t0, pieces = time.perf_counter(), [self.answer[i:i + 3]
                                           for i in range(0, len(self.answer), 3)]
        for piece in pieces[:-1]:
            yield Event(text=piece)
        yield Event(text=pieces[-1], done=True, stats={
            "method": cfg.method, "new_tokens": len(pieces), "prompt_tokens": len(ids),
            "stop_reason": "eos", "wall_s": time.perf_counter() - t0, "ttft_s": 0.001,
            "tokens_per_s": 1.0})


@pytest.fixture(scope="module")
def tooled(smol_pair):
    s = Served(ScriptedPair(smol_pair, ANSWER))
    yield s
    s.close()


def test_tools_on_a_template_without_them_are_400(served):
    r = served.post("/chat/completions", {**GOOD, "tools": [WEATHER]})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "tools" and "no tool syntax" in err["message"]
    with pytest.raises(openai.BadRequestError) as e:
        served.client().chat.completions.create(model="smol-self", messages=GOOD["messages"],
                                                tools=[WEATHER], max_tokens=2)
    assert e.value.param == "tools"
    none = served.post("/chat/completions", {**GOOD, "tools": [WEATHER], "tool_choice": "none"})
    assert none.status_code == 200  # the tools are not offered then


def test_tool_history_turns_are_accepted(served):
    r = served.post("/chat/completions", {**GOOD, "messages": HISTORY})
    assert r.status_code == 200, r.text


def test_the_tools_reach_the_prompt_and_the_call_comes_back(tooled):
    reply = tooled.client().chat.completions.create(
        model="smol-self", messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=[WEATHER], temperature=0)
    assert '"name": "get_weather"' in tooled.host.pair.prompts[-1]
    choice = choice_of(reply)
    assert choice.finish_reason == "tool_calls" and choice.message.content == "Let me look."
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"} and call.id


def choice_of(reply):
    assert len(reply.choices) == 1
    return reply.choices[0]


def test_a_streamed_call_arrives_whole_before_the_finish(tooled):
    stream = tooled.client().chat.completions.create(
        model="smol-self", messages=[{"role": "user", "content": "Weather?"}],
        tools=[WEATHER], stream=True)
    chunks = [c for c in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    calls = [c.choices[0].delta.tool_calls for c in chunks if c.choices[0].delta.tool_calls]
    assert text == "Let me look." and "<tool" not in text
    assert len(calls) == 1 and calls[0][0].function.name == "get_weather"
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_history_with_calls_and_results_is_rendered(tooled):
    r = tooled.post("/chat/completions", {"model": "smol-self", "messages": HISTORY,
                                          "tools": [WEATHER]})
    assert r.status_code == 200, r.text
    prompt = tooled.host.pair.prompts[-1]
    assert '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}' in prompt
    assert "<tool_response>18 C, sunny</tool_response>" in prompt


def test_tool_choice_none_offers_no_tools(tooled):
    r = tooled.post("/chat/completions", {"model": "smol-self", "tool_choice": "none",
                                          "messages": [{"role": "user", "content": "Hi"}],
                                          "tools": [WEATHER]})
    assert "get_weather" not in tooled.host.pair.prompts[-1]
    assert r.json()["choices"][0]["finish_reason"] == "stop"  # the text is left as it is


@pytest.mark.parametrize("text,content,names", [
    (ANSWER, "Let me look. ", ["get_weather"]),
    (CALL + CALL, "", ["get_weather", "get_weather"]),
    ("<tool_call>not json</tool_call>", "<tool_call>not json</tool_call>", []),
    ("no call <tool_call>{\"name\": \"f\"", "no call <tool_call>{\"name\": \"f\"", []),
])
def test_split_calls(text, content, names):
    rest, calls = split_calls(text)
    assert rest == content and [c["function"]["name"] for c in calls] == names


def test_held_text_passes_text_and_holds_what_may_be_a_call():
    held = HeldText()
    sent = [held.feed(ANSWER[i:i + 2]) for i in range(0, len(ANSWER), 2)]
    assert "".join(sent) == "Let me look."
    assert held.finish()[1][0]["function"]["name"] == "get_weather"
    held = HeldText()
    assert held.feed("a <tool") == "a" and held.feed("s are fine") == " <tools are fine"
    assert held.finish() == ("", [])
