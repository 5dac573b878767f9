"""Tools through the model's chat template: whether the template renders them, and the calls
an answer makes in the Hermes / Qwen form `<tool_call>{"name": ..., "arguments": ...}</tool_call>`
taken out of its text (whole, or held back while streaming)."""
from __future__ import annotations

import json
import re

from app.openai_shapes import new_id

OPEN, CLOSE = "<tool_call>", "</tool_call>"
CALL = re.compile(re.escape(OPEN) + r"\s*(.*?)\s*" + re.escape(CLOSE), re.S)
PROBE = {"type": "function", "function": {"name": "probe_tool_7f3a", "description": "",
                                          "parameters": {"type": "object", "properties": {}}}}


def template_takes_tools(tokenizer) -> bool:
    """True if the chat template puts a tool's definition into the prompt."""
    if not getattr(tokenizer, "chat_template", None):
        return False
    try:
        text = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tools=[PROBE],
                                             add_generation_prompt=True, tokenize=False)
    except Exception:  # noqa: BLE001 - a template that fails on tools does not take them
        return False
    return PROBE["function"]["name"] in text


def _call(body: str) -> dict | None:
    try:
        obj = json.loads(body)
    except ValueError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    return {"id": new_id("call"), "type": "function", "function": {
        "name": obj["name"], "arguments": args if isinstance(args, str) else json.dumps(args)}}


def split_calls(text: str) -> tuple[str, list[dict]]:
    """(the text without its well-formed calls, the calls); a call that does not parse stays
    in the text."""
    calls: list[dict] = []

    def take(m: re.Match) -> str:
        call = _call(m.group(1))
        if call is None:
            return m.group(0)
        calls.append(call)
        return ""
    return CALL.sub(take, text), calls


class HeldText:
    """One streamed answer: text is passed on until a call may begin, the rest is held and
    parsed at the end (trailing spaces too, as the whole answer drops them before a call)."""

    def __init__(self):
        self.text, self.sent = "", 0

    def feed(self, piece: str) -> str:
        self.text += piece
        cut = self.text.find(OPEN, self.sent)
        if cut < 0:
            cut = len(self.text) - _partial_open(self.text)
        cut = len(self.text[:cut].rstrip())
        out = self.text[self.sent:cut] if cut > self.sent else ""
        self.sent += len(out)
        return out

    def finish(self) -> tuple[str, list[dict]]:
        """(the text not sent yet, the calls)"""
        text, calls = split_calls(self.text)
        rest = text[self.sent:]
        return (rest.rstrip() if calls else rest), calls


def _partial_open(text: str) -> int:
    """Length of the longest end of `text` that begins OPEN."""
    for n in range(min(len(OPEN) - 1, len(text)), 0, -1):
        if OPEN.startswith(text[-n:]):
            return n
    return 0
