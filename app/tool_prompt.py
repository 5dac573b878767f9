"""Tools on every model: a request's tools, tool_choice and history checked into a ToolPlan (the
turns for the template, the tools it renders, the grammar the answer follows). A template
without Hermes-style tool syntax gets our own system part describing the tools, and history
calls and results rendered as text (llama-server's "generic" format, in `<tool_call>` tags)."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

from app.openai_io import ApiError
from app.tools import CLOSE, OPEN, template_style

NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # OpenAI's rule for function names
SYSTEM = ("Functions you can call (JSON schemas):\n<tools>\n{tools}\n</tools>\n"
          "To call one, answer only " + OPEN + '{{"name": <name>, "arguments": <object>}}' +
          CLOSE + "{more}. {choice}")  # short: every request's prompt carries it (prefill)
CHOICE = {"auto": "Otherwise answer in plain text.",
          "required": "You must call at least one function."}


@dataclass
class ToolPlan:
    messages: list[dict]  # the turns for the chat template
    template_tools: list[dict] | None  # tools the template renders itself (its own syntax)
    grammar: dict | None  # models/grammar.py's {"type": "tool_calls", ...}; None: no tools


def tool_plan(pair, req) -> ToolPlan:
    """A chat request's plan on `pair` (its tokenizer lock held by the caller)."""
    messages = req.conversation()
    if not (req.tools or req.tool_choice or any(
            m.get("tool_calls") or m["role"] == "tool" for m in messages)):
        return ToolPlan(messages, None, None)
    style = template_style(pair.tokenizer) if pair.spec.chat else "none"
    text_format = req.response_format.spec() if req.response_format else None
    return plan(messages, req.tool_list(), req.choice(), req.parallel_tool_calls,
                style == "hermes", text_format)


def bad(message: str, param: str) -> ApiError:
    return ApiError(400, message, param=param, code="invalid_value")


def functions(tools: list[dict]) -> list[dict]:
    """The tools' function definitions; 400 naming a bad or repeated name."""
    out, seen = [], set()
    for i, tool in enumerate(tools):
        fn = tool["function"]
        if not NAME.match(fn["name"]) or fn["name"] in seen:
            why = "is used twice" if fn["name"] in seen else "must be 1-64 of a-z A-Z 0-9 _ -"
            raise bad(f"tools.{i}.function.name: '{fn['name']}' {why}",
                      f"tools.{i}.function.name")
        seen.add(fn["name"])
        out.append(fn)
    return out


def choice_of(tool_choice, names: list[str]) -> str:
    """"none", "auto", "required" or the one function's name; 400 for an unknown name or a
    choice that needs tools when none are given."""
    if isinstance(tool_choice, dict):
        name = tool_choice["function"]["name"]
        if name not in names:
            raise bad(f"tool_choice: no tool is named '{name}' (tools: "
                      f"{', '.join(names) or 'none'})", "tool_choice")
        return name
    if tool_choice == "required" and not names:
        raise bad("tool_choice: \"required\" needs tools", "tool_choice")
    return (tool_choice or "auto") if names else "none"


def check_history(messages: list[dict], names: list[str] | None) -> None:
    """400 for a call naming a tool not offered (when tools are given) or a tool result that
    answers no earlier call."""
    ids: set = set()
    for i, m in enumerate(messages):
        for k, call in enumerate(m.get("tool_calls") or []):
            name = call["function"]["name"]
            if names is not None and name not in names:
                raise bad(f"messages.{i}.tool_calls.{k}.function.name: no tool is named "
                          f"'{name}' (tools: {', '.join(names)})",
                          f"messages.{i}.tool_calls.{k}.function.name")
            ids.add(call.get("id"))
        if m["role"] == "tool" and m.get("tool_call_id") is not None \
                and m["tool_call_id"] not in ids:
            raise bad(f"messages.{i}.tool_call_id: '{m['tool_call_id']}' answers no earlier "
                      "tool call", f"messages.{i}.tool_call_id")


def plan(messages: list[dict], tools: list[dict] | None, tool_choice, parallel: bool,
         hermes: bool, text_format: dict | None) -> ToolPlan:
    """The ToolPlan of a chat request: `messages` as transformers' templates take them,
    `tools` OpenAI's list, `hermes` whether the template renders tools with `<tool_call>`
    answers, `text_format` the response_format of a plain-text answer."""
    fns = functions(tools or [])
    names = [f["name"] for f in fns]
    choice = choice_of(tool_choice, names)
    check_history(messages, names if tools else None)
    has_history = any(m.get("tool_calls") or m["role"] == "tool" for m in messages)
    if choice == "none":
        return ToolPlan(messages if hermes or not has_history else as_text(messages), None, None)
    offered = fns if choice in ("auto", "required") else [f for f in fns if f["name"] == choice]
    grammar = {"type": "tool_calls", "required": choice != "auto", "parallel": parallel,
               "text": text_format, "tools": [{"name": f["name"], "parameters": f.get(
                   "parameters")} for f in offered]}
    if hermes:
        return ToolPlan(messages, [{"type": "function", "function": f} for f in offered], grammar)
    schemas = "\n".join(json.dumps(f, ensure_ascii=False, separators=(",", ":"))
                        for f in offered)  # whole schemas, compact: 15% fewer prompt tokens
    system = SYSTEM.format(tools=schemas, more=", one per call" if parallel else "",
                           choice=CHOICE.get(choice, f"You must call {choice}."))
    return ToolPlan(with_system(as_text(messages), system), None, grammar)


def with_system(messages: list[dict], text: str) -> list[dict]:
    if messages and messages[0]["role"] == "system":
        first = messages[0]["content"]
        return [{"role": "system", "content": f"{first}\n\n{text}" if first else text},
                *messages[1:]]
    return [{"role": "system", "content": text}, *messages]


def call_text(call: dict) -> str:
    fn, args = call["function"], call["function"]["arguments"]
    if isinstance(args, str):  # OpenAI's JSON text (app/openai_io.py passes it parsed)
        try:
            args = json.loads(args)
        except ValueError:
            pass
    return OPEN + json.dumps({"name": fn["name"], "arguments": args}, ensure_ascii=False) + CLOSE


def as_text(messages: list[dict]) -> list[dict]:
    """History turns as plain text: an assistant's calls in `<tool_call>` tags after its
    text, a tool result a user turn in `<tool_response>` tags; turns of one role in a row are
    joined (templates that want roles to alternate take them)."""
    names = {c.get("id"): c["function"]["name"] for m in messages
             for c in m.get("tool_calls") or []}
    out: list[dict] = []
    for m in messages:
        role, text = m["role"], m.get("content") or ""
        if m.get("tool_calls"):
            text = "\n".join([text] * bool(text) + [call_text(c) for c in m["tool_calls"]])
        elif role == "tool":
            name = m.get("name") or names.get(m.get("tool_call_id"), "")
            role, text = "user", f"<tool_response name=\"{name}\">\n{text}\n</tool_response>"
        if out and out[-1]["role"] == role == "user":
            out[-1] = {"role": role, "content": out[-1]["content"] + "\n" + text}
        else:
            out.append({"role": role, "content": text})
    return out
