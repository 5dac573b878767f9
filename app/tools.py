"""Tool calls in an answer, in the Hermes / Qwen form `<tool_call>{"name": ..., "arguments":
...}</tool_call>` (our own prompt asks for it too): whether a chat template renders tools that
way, the calls taken out of a whole answer, and a streamed answer cut into text and call
pieces as the openai SDK expects them (name first, then the arguments bit by bit)."""
from __future__ import annotations

import json
import re

from app.openai_shapes import new_id

OPEN, CLOSE = "<tool_call>", "</tool_call>"
CALL = re.compile(re.escape(OPEN) + r"\s*(.*?)\s*" + re.escape(CLOSE), re.S)
HEAD = re.compile(re.escape(OPEN) + r'\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*'
                  r'"arguments"\s*:\s*')
TAIL = re.compile(r"\s*\}\s*" + re.escape(CLOSE))
HOLD = len("}\n" + CLOSE) + 2  # characters of arguments held back until the call closes
PROBE = {"type": "function", "function": {"name": "probe_tool_7f3a", "description": "",
                                          "parameters": {"type": "object", "properties": {}}}}


def template_style(tokenizer) -> str:
    """"hermes" if the chat template renders tools and asks for `<tool_call>` answers, "own" if it
    has no tool syntax (or another one: our prompt is used then), "none" without a template."""
    if not getattr(tokenizer, "chat_template", None):
        return "none"
    try:
        text = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tools=[PROBE],
                                             add_generation_prompt=True, tokenize=False)
    except Exception:  # noqa: BLE001 - a template that fails on tools does not take them
        return "own"
    return "hermes" if PROBE["function"]["name"] in text and OPEN in text else "own"


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


class ToolStream:
    """One streamed answer. `feed` and `finish` return pieces: ("text", str) or ("call", a
    delta.tool_calls entry). Text is passed on until a call may begin (trailing spaces held,
    as the whole answer drops them before a call); a call's id and name go out once its head
    is read, its arguments as they come (the last HOLD characters wait for the close); what
    never parses as a call goes out as text at the end. `calls`: the closed calls."""

    def __init__(self):
        self.text, self.sent, self.calls = "", 0, []
        self.open: dict | None = None  # the call being streamed: its entry and arguments' start

    def feed(self, piece: str) -> list[tuple]:
        self.text += piece
        out: list[tuple] = []
        while self._step(out):
            pass
        return out

    def _step(self, out: list) -> bool:
        """Move on as far as the text allows; True when another step may move further."""
        if self.open is not None:
            return self._arguments(out)
        pos = self.text.find(OPEN, self.sent)
        cut = len(self.text) - _partial_open(self.text) if pos < 0 else pos
        cut = self.sent + len(self.text[self.sent:cut].rstrip())
        if cut > self.sent:
            out.append(("text", self.text[self.sent:cut]))
            self.sent = cut
        head = HEAD.match(self.text, pos) if pos >= 0 else None
        if head is None:
            return False
        name = json.loads(f'"{head.group(1)}"')
        entry = {"index": len(self.calls), "id": new_id("call"), "type": "function",
                 "function": {"name": name, "arguments": ""}}
        out.append(("call", {**entry, "function": dict(entry["function"])}))
        self.open, self.sent = {"entry": entry, "at": head.end()}, head.end()
        return True

    def _arguments(self, out: list) -> bool:
        entry, at = self.open["entry"], self.open["at"]
        if self.sent == at:  # the space before the arguments' value: a piece may end at `:`
            at = len(self.text) - len(self.text[at:].lstrip())
            self.open["at"] = self.sent = at
        try:
            end = json.JSONDecoder().raw_decode(self.text, at)[1]
        except ValueError:
            end = None
        tail = TAIL.match(self.text, end) if end is not None else None
        upto = end if tail else min(len(self.text) - HOLD, end or len(self.text))
        self._send_arguments(out, upto)
        if tail is None:
            return False
        self.calls.append(entry)
        self.open, self.sent = None, tail.end()
        return True

    def _send_arguments(self, out: list, upto: int) -> None:
        if upto > self.sent:
            piece = self.text[self.sent:upto]
            self.open["entry"]["function"]["arguments"] += piece
            out.append(("call", {"index": self.open["entry"]["index"],
                                 "function": {"arguments": piece}}))
            self.sent = upto

    def finish(self) -> list[tuple]:
        """The rest: a call cut short (max_tokens) sends the arguments it has; calls that
        did not stream (another layout) go out whole; the text left, stripped after calls."""
        out: list[tuple] = []
        if self.open is not None:
            self._send_arguments(out, len(self.text))
            return out
        text, calls = split_calls(self.text[self.sent:])
        text = text.strip() if calls or self.calls else text
        if text:
            out.append(("text", text))
        for call in calls:
            call = {"index": len(self.calls), **call}
            self.calls.append(call)
            out.append(("call", call))
        return out


def _partial_open(text: str) -> int:
    """Length of the longest end of `text` that begins OPEN."""
    for n in range(min(len(OPEN) - 1, len(text)), 0, -1):
        if OPEN.startswith(text[-n:]):
            return n
    return 0
