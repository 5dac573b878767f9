"""Tools through a Hermes-style chat template (a scripted pair whose answer is a Hermes / Qwen
style call: the tools in the prompt, parsed `tool_calls` out, streamed in pieces), our own
tool prompt for templates without tool syntax, the tool grammar, and the stream parser."""
from __future__ import annotations

import json
import threading
import time

import openai
import pytest

from app.tool_prompt import as_text, plan
from app.tools import ToolStream, split_calls
from core.output import Event
from tests.live_server import Served

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
        self.formats = []
        self.tokenizer_lock = threading.RLock()

    def prompt_ids(self, prompt, raw=False, tools=None):
        text = self.tokenizer.apply_chat_template(prompt, tools=tools, tokenize=False,
                                                  add_generation_prompt=True)
        self.prompts.append(text)
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def check_room(self, ids, max_new_tokens):
        pass

    def check_format(self, response_format):
        self.formats.append(response_format)

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


def test_the_tools_reach_the_prompt_and_the_call_comes_back(tooled):
    reply = tooled.client().chat.completions.create(
        model="smol-self", messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=[WEATHER], temperature=0)
    assert '"name": "get_weather"' in tooled.host.pair.prompts[-1]
    choice = choice_of(reply)
    assert choice.finish_reason == "tool_calls" and choice.message.content == "Let me look."
    grammar = tooled.host.pair.formats[-1]
    assert grammar["type"] == "tool_calls" and not grammar["required"]
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"} and call.id


def choice_of(reply):
    assert len(reply.choices) == 1
    return reply.choices[0]


def test_a_streamed_call_arrives_in_pieces_before_the_finish(tooled):
    stream = tooled.client().chat.completions.create(
        model="smol-self", messages=[{"role": "user", "content": "Weather?"}],
        tools=[WEATHER], stream=True)
    chunks = [c for c in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    calls = [c.choices[0].delta.tool_calls for c in chunks if c.choices[0].delta.tool_calls]
    assert text == "Let me look." and "<tool" not in text
    assert calls[0][0].function.name == "get_weather" and calls[0][0].id
    assert all(c[0].index == 0 and c[0].function.name is None for c in calls[1:])
    assert json.loads("".join(c[0].function.arguments for c in calls)) == {"city": "Paris"}
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


def test_the_stream_sends_text_then_the_call_in_pieces():
    stream, pieces = ToolStream(), []
    for i in range(0, len(ANSWER), 2):
        pieces += stream.feed(ANSWER[i:i + 2])
    pieces += stream.finish()
    assert "".join(v for k, v in pieces if k == "text") == "Let me look."
    calls = [v for k, v in pieces if k == "call"]
    assert calls[0]["function"] == {"name": "get_weather", "arguments": ""} and calls[0]["id"]
    assert len(calls) > 2 and all(c["index"] == 0 for c in calls)
    assert "".join(c["function"]["arguments"] for c in calls) == '{"city": "Paris"}'
    assert stream.calls[0]["function"]["arguments"] == '{"city": "Paris"}'
    stream = ToolStream()
    assert stream.feed("a <tool") == [("text", "a")]
    assert stream.feed("s are fine") == [("text", " <tools are fine")]
    assert stream.finish() == [] and stream.calls == []


def test_the_stream_gives_the_whole_answer_s_calls_wherever_a_piece_ends():
    """Two pieces cut anywhere (a lookup round may bring the rest of a call in one event,
    its first piece ending right after `"arguments":`, before the space), and three."""
    text = 'Let me look.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n' \
           '</tool_call>'
    want = split_calls(text)[1][0]["function"]
    for cuts in [(i,) for i in range(len(text))] + [(i, i + 7) for i in range(len(text) - 7)]:
        stream, pieces, start = ToolStream(), [], 0
        for cut in cuts + (len(text),):
            pieces += stream.feed(text[start:cut])
            start = cut
        pieces += stream.finish()
        args = "".join(v["function"].get("arguments", "") for k, v in pieces if k == "call")
        assert [c["function"] for c in stream.calls] == [want] and args == want["arguments"], cuts
        assert "".join(v for k, v in pieces if k == "text") == "Let me look.", cuts


def test_the_stream_sends_a_call_in_another_layout_whole_at_the_end():
    stream = ToolStream()
    text = '<tool_call>{"arguments": {"x": 1}, "name": "f"}</tool_call>'
    assert stream.feed(text) == []
    (kind, call), = stream.finish()
    assert kind == "call" and call["function"] == {"name": "f", "arguments": '{"x": 1}'}


def test_our_prompt_describes_the_tools_and_renders_history():
    p = plan(HISTORY, [WEATHER], None, True, hermes=False, text_format=None)
    system = p.messages[0]["content"]
    assert p.messages[0]["role"] == "system" and p.template_tools is None
    schemas = system.split("<tools>\n")[1].split("\n</tools>")[0]
    assert [json.loads(line) for line in schemas.splitlines()] == [WEATHER["function"]]
    assert p.messages[2]["content"] == ('<tool_call>{"name": "get_weather", "arguments": '
                                        '{"city": "Paris"}}</tool_call>')
    assert p.messages[3] == {"role": "user", "content": '<tool_response name="get_weather">\n'
                                                        '18 C, sunny\n</tool_response>'}
    assert p.grammar == {"type": "tool_calls", "required": False, "parallel": True,
                         "text": None, "tools": [{"name": "get_weather",
                                                  "parameters": WEATHER["function"][
                                                      "parameters"]}]}
    named = plan(HISTORY, [WEATHER], {"function": {"name": "get_weather"}}, False, False, None)
    assert named.grammar["required"] and not named.grammar["parallel"]
    assert "You must call get_weather." in named.messages[0]["content"]
    none = plan(HISTORY, [WEATHER], "none", True, False, None)
    assert none.grammar is None and "get_weather" not in none.messages[0]["content"]


def test_tool_results_in_a_row_are_one_user_turn():
    two = [{"role": "tool", "tool_call_id": "a", "content": "1"},
           {"role": "tool", "tool_call_id": "b", "content": "2"}]
    (turn,) = as_text(two)
    assert turn["role"] == "user" and turn["content"].count("<tool_response") == 2


def advance(pair, spec, text) -> tuple[int, int, bool]:
    grammar = pair.grammars.compile(spec)
    ids = pair.tokenizer(text, add_special_tokens=False)["input_ids"]
    return grammar.advance(ids), len(ids), grammar.matcher.is_accepting()


ADD = {"name": "add", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}},
                                     "required": ["a"]}}
ADD_CALL = '<tool_call>{"name": "add", "arguments": {"a": 3}}</tool_call>'


def test_the_tool_grammar(smol_pair):
    auto = {"type": "tool_calls", "tools": [WEATHER["function"], ADD], "required": False,
            "parallel": True, "text": None}
    n, total, done = advance(smol_pair, auto, "Hello there.")
    assert n == total and done
    assert advance(smol_pair, auto, ADD_CALL + ADD_CALL)[2]
    n, total, done = advance(smol_pair, auto, "text " + ADD_CALL)  # text is free after its start
    assert n == total and done
    n, total, _ = advance(smol_pair, auto, ADD_CALL.replace('{"a": 3}', '{"a": 3, "b": 4}'))
    assert n < total  # the arguments' object is closed to other keys
    assert advance(smol_pair, {**auto, "required": True}, "Hello")[0] == 0
    one = {**auto, "parallel": False}
    n, total, done = advance(smol_pair, one, ADD_CALL + ADD_CALL)
    assert n < total
    only_add = {**auto, "required": True, "tools": [ADD]}
    n, total, _ = advance(smol_pair, only_add, CALL.replace("\n", ""))
    assert n < total
    json_text = {**auto, "text": {"type": "json_object"}}
    assert advance(smol_pair, json_text, '{"a": 1}')[2]
    assert advance(smol_pair, json_text, "Hello")[0] == 0


def test_a_text_answer_frees_the_grammar_and_a_call_never_does(smol_pair):
    """tool_choice auto: once the answer's bytes leave `<tool_call>`, the grammar is free: EOS
    and every token whose bytes can be text are allowed (the same mask as free text), so no
    more masks are needed; a call, or a start of one, keeps it; required never frees it."""
    auto = {"type": "tool_calls", "tools": [WEATHER["function"], ADD], "required": False,
            "parallel": True, "text": None}
    import llguidance

    from models.grammar import LLGrammar
    any_text = llguidance.LLMatcher.grammar_from_lark("start: /(.|\\n)*/")
    free_text = LLGrammar(llguidance.LLMatcher(smol_pair.grammars.tokenizer(), any_text),
                          len(smol_pair.grammars.compile(auto).mask()))
    for text, free in (("Sure, {here}", True), ("<", False), ("<tool", False),
                       ("<tool_call>", False), ('<tool_call>{"name": "add"', False),
                       ("<b>", True), (" <tool_call>", True)):
        grammar = smol_pair.grammars.compile(auto)
        ids = smol_pair.tokenizer(text, add_special_tokens=False)["input_ids"]
        assert grammar.advance(ids) == len(ids)
        assert grammar.free == free, text
        if free:
            assert (grammar.mask() == free_text.mask()).all(), text
            eos = sorted(smol_pair.target.eos_ids)[0]
            assert (int(grammar.mask()[eos >> 5]) >> (eos & 31)) & 1
    for spec in ({**auto, "required": True}, {**auto, "text": {"type": "json_object"}}):
        grammar = smol_pair.grammars.compile(spec)
        grammar.advance(smol_pair.tokenizer("{", add_special_tokens=False)["input_ids"])
        assert not grammar.free
