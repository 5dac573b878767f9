"""The OpenAI wire format, chat turns: messages (text parts, assistant tool calls, tool
results), tool definitions and a named tool_choice, as pydantic models (app/openai_io.py)."""
from __future__ import annotations

import json
from typing import Literal, Union

from pydantic import BaseModel, ConfigDict, Field


class Strict(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True, allow_inf_nan=False)


class TextPart(Strict):
    type: Literal["text"]
    text: str


class CalledFunction(Strict):
    name: str
    arguments: str  # JSON text, as OpenAI sends it


class ToolCall(Strict):
    id: str | None = None
    type: Literal["function"] = "function"
    function: CalledFunction


class Message(Strict):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Union[str, list[TextPart], None] = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(p.text for p in self.content)
        return self.content or ""

    def for_template(self) -> dict:
        """The turn as transformers' chat templates take it (call arguments as a dict)."""
        out = {"role": "system" if self.role == "developer" else self.role,
               "content": self.text()}
        if self.tool_calls:
            out["tool_calls"] = [{"id": c.id, "type": "function", "function": {
                "name": c.function.name, "arguments": _arguments(c.function.arguments)}}
                for c in self.tool_calls]
        for key in ("name", "tool_call_id"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out


def _arguments(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return text


class Function(Strict):
    name: str = Field(min_length=1)
    description: str | None = None
    parameters: dict | None = None


class Tool(Strict):
    type: Literal["function"]
    function: Function


class NamedFunction(Strict):
    name: str = Field(min_length=1)


class NamedToolChoice(Strict):
    type: Literal["function"]
    function: NamedFunction
