"""The OpenAI wire format: request bodies checked into engine settings, and the response, chunk
and error shapes (final ones carry `usage` and llama-server style `timings`)."""
from __future__ import annotations

import json
import time
import uuid
from typing import Literal, Union

from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from core.engine import GenConfig
from core.sampling import SamplingConfig

FINISH = {"eos": "stop", "stop_string": "stop", "stopped": "stop",
          "max_new_tokens": "length", "context_window": "length"}


class ApiError(Exception):
    """An error the client gets as {"error": {message, type, param, code}} with `status`."""

    def __init__(self, status: int, message: str, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = (
            status, message, type, param, code)

    def response(self) -> JSONResponse:
        body = {"message": self.message, "type": self.type, "param": self.param,
                "code": self.code}
        return JSONResponse({"error": body}, status_code=self.status)


class TextPart(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    type: Literal["text"]
    text: str


class Message(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    role: Literal["system", "developer", "user", "assistant"]
    content: Union[str, list[TextPart], None] = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(p.text for p in self.content)
        return self.content or ""


class Knobs(BaseModel):
    """What both endpoints take: OpenAI's sampling fields plus our own (method, gamma,
    multi_seq, theta_scale, cache_prompt). Unknown fields are ignored, as OpenAI-style
    servers do."""
    model_config = ConfigDict(extra="ignore", strict=True, allow_inf_nan=False)
    model: str = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    temperature: float = Field(1.0, ge=0, le=2)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = Field(0, ge=0)
    seed: int = Field(0, ge=0, lt=2**63)
    stop: Union[str, list[str], None] = None
    stream: bool = False
    n: int = Field(1, ge=1, le=1)
    method: Literal["vanilla", "sps", "duo"] = "duo"
    gamma: int | None = Field(None, ge=1, le=64)
    multi_seq: bool = True
    theta_scale: float = Field(1.0, gt=0, le=100)
    cache_prompt: bool = True  # as llama-server: keep what the caches hold of this prompt

    def wanted_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    def stops(self) -> tuple[str, ...]:
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        if len(stops) > 4 or any(not s for s in stops):
            raise ApiError(400, "stop: at most 4 non-empty strings", param="stop")
        return tuple(stops)

    def gen_config(self, max_new_tokens: int) -> GenConfig:
        sampling = SamplingConfig(self.temperature, self.top_k, self.top_p)
        return GenConfig(method=self.method, max_new_tokens=max_new_tokens, sampling=sampling,
                         seed=self.seed, gamma=self.gamma, stop_strings=self.stops(),
                         multi_seq=self.multi_seq, theta_scale=self.theta_scale,
                         cache_prompt=self.cache_prompt)


class ChatRequest(Knobs):
    messages: list[Message] = Field(min_length=1)

    def conversation(self) -> list[dict]:
        return [{"role": "system" if m.role == "developer" else m.role, "content": m.text()}
                for m in self.messages]


class CompletionRequest(Knobs):
    prompt: Union[str, list[str]]

    def text(self) -> str:
        if isinstance(self.prompt, list):
            if len(self.prompt) != 1:
                raise ApiError(400, "prompt: one prompt per request", param="prompt")
            return self.prompt[0]
        return self.prompt


def parse(model: type[BaseModel], body: bytes) -> BaseModel:
    """The request body as `model`, or a 400 ApiError naming the first bad field."""
    try:
        data = json.loads(body, parse_constant=_no_constant)
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
        raise ApiError(400, f"the body is not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise ApiError(400, "the body must be a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        param = _param(err["loc"], data, err["type"] == "missing")
        code = "missing_required_parameter" if err["type"] == "missing" else "invalid_value"
        raise ApiError(400, f"{param}: {err['msg']}", param=param, code=code) from None


def _param(loc: tuple, data, missing: bool) -> str | None:
    """The field's path in the body ("messages.0.content"): pydantic's steps that index the
    body, without the union branches it tried ("str", "list[str]"); a missing field ends it."""
    path, at = [], data
    for i, step in enumerate(loc):
        if isinstance(at, dict) and step in at or (
                isinstance(at, list) and isinstance(step, int) and 0 <= step < len(at)):
            path.append(str(step))
            at = at[step]
        else:
            if missing and i == len(loc) - 1:
                path.append(str(step))
            break
    return ".".join(path) or None


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number JSON allows")


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def usage(stats: dict) -> dict:
    prompt, new = int(stats.get("prompt_tokens", 0)), int(stats.get("new_tokens", 0))
    return {"prompt_tokens": prompt, "completion_tokens": new, "total_tokens": prompt + new,
            "prompt_tokens_details": {"cached_tokens": int(stats.get("cached_tokens", 0))}}


def timings(stats: dict) -> dict:
    """llama-server's names where they exist, then ours."""
    ttft, wall = float(stats.get("ttft_s", 0)), float(stats.get("wall_s", 0))
    return {"prompt_n": int(stats.get("prompt_tokens", 0)) - int(stats.get("cached_tokens", 0)),
            "cache_n": int(stats.get("cached_tokens", 0)), "prompt_ms": ttft * 1e3,
            "predicted_n": int(stats.get("new_tokens", 0)), "predicted_ms": wall * 1e3,
            "predicted_per_second": float(stats.get("tokens_per_s", 0)), "ttft_ms": ttft * 1e3,
            "method": stats.get("method"), "acceptance_rate": stats.get("acceptance_rate", 0.0),
            "rounds": stats.get("rounds", 0),
            "mean_accepted_per_round": stats.get("mean_accepted_per_round", 0.0),
            "stop_reason": stats.get("stop_reason")}


class Shapes:
    """Response bodies of one request: chat (`chat.completion`) or text (`text_completion`)."""

    def __init__(self, chat: bool, model: str):
        self.chat, self.model = chat, model
        self.id, self.created = new_id("chatcmpl" if chat else "cmpl"), int(time.time())

    def _head(self, obj: str) -> dict:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    def whole(self, text: str, stats: dict) -> dict:
        choice = {"index": 0, "finish_reason": FINISH.get(stats.get("stop_reason"), "stop"),
                  "logprobs": None}
        if self.chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        body = self._head("chat.completion" if self.chat else "text_completion")
        return {**body, "choices": [choice], "usage": usage(stats), "timings": timings(stats)}

    def chunk(self, text: str, stats: dict | None = None, first: bool = False) -> dict:
        finish = None if stats is None else FINISH.get(stats.get("stop_reason"), "stop")
        choice = {"index": 0, "finish_reason": finish, "logprobs": None}
        if self.chat:
            delta = {"role": "assistant", "content": text} if first else {"content": text}
            choice["delta"] = delta if text or first else {}
        else:
            choice["text"] = text
        body = {**self._head("chat.completion.chunk" if self.chat else "text_completion"),
                "choices": [choice]}
        if stats is not None:
            body.update(usage=usage(stats), timings=timings(stats))
        return body


def sse(body: dict | str) -> str:
    return f"data: {body if isinstance(body, str) else json.dumps(body, ensure_ascii=False)}\n\n"
