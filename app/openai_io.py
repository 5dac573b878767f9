"""The OpenAI wire format, requests: bodies checked into engine settings (null is the default,
fields we cannot honour yet are refused by name) and the error shape."""
from __future__ import annotations

import json
import secrets
from typing import Literal, Union

from fastapi import Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.openai_messages import Message, NamedToolChoice, Strict, Tool  # noqa: F401 - Strict
from core.engine import GenConfig
from core.sampling import SamplingConfig

MAX_STOPS = 64  # stop strings per request
MAX_N = 8  # choices per request (generated one after another)
MAX_PROMPTS = 64  # prompts in one /v1/completions list (answered one after another)
SEED_LIMIT = 2**63
MAX_BODY = 8 << 20  # bytes of request body read at most (a 2 MB paste is refused later, by length)

# Fields that change the output and are not honoured yet: a value other than null or the
# default here is refused with a 400 naming the field. Lift a line when its field is honoured.
NOT_YET = {
    "echo": lambda v: v is False,
    "best_of": lambda v: v == 1,
    # llama-server's own sampling fields
    "grammar": lambda v: v == "",
    "json_schema": lambda v: v == {},
    "n_probs": lambda v: v == 0,
    "min_p": lambda v: v == 0,
    "repeat_penalty": lambda v: v == 1,
    "typical_p": lambda v: v == 1,
    "mirostat": lambda v: v == 0,
    "ignore_eos": lambda v: v is False,
}
# Our own fields that no longer mean anything: refused with a 400 naming the field and why.
REMOVED = {
    "schedule": "duo overlaps where the target runs on a GPU and runs sps's loop where it "
                "shares the draft's cores; there is nothing to choose",
}


class ApiError(Exception):
    """An error the client gets as {"error": {message, type, param, code}} with `status`."""

    def __init__(self, status: int, message: str, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = (
            status, message, type, param, code)

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.code}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status)


async def guarded(call) -> Response:
    """Await an endpoint; an ApiError goes out in the OpenAI shape."""
    try:
        return await call
    except ApiError as e:
        return e.response()


async def read_body(request: Request) -> bytes:
    """The body, or 413 past MAX_BODY (told by its length header, else while reading)."""
    too_big = ApiError(413, f"the request body is over {MAX_BODY} bytes", code="request_too_large")
    if int(request.headers.get("content-length") or 0) > MAX_BODY:
        raise too_big
    body = bytearray()
    async for part in request.stream():
        body += part
        if len(body) > MAX_BODY:
            raise too_big
    return bytes(body)


class StreamOptions(Strict):
    include_usage: bool = False


class JsonSchemaFormat(Strict):
    model_config = ConfigDict(extra="ignore", strict=True, populate_by_name=True)
    name: str | None = None
    description: str | None = None
    schema_: dict = Field(alias="schema")
    strict: bool | None = False


class ResponseFormat(Strict):
    """OpenAI's response_format: text, json_object or json_schema (models/grammar.py)."""
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    def spec(self) -> dict | None:
        if self.type == "text":
            return None
        if self.type == "json_object":
            return {"type": "json_object"}
        if self.json_schema is None:
            raise ApiError(400, "response_format.json_schema is required for type json_schema",
                           param="response_format.json_schema", code="invalid_value")
        return {"type": "json_schema", "json_schema": {"schema": self.json_schema.schema_,
                                                       "strict": bool(self.json_schema.strict)}}


class Knobs(Strict):
    """What both endpoints take: OpenAI's sampling fields plus our own (method, gamma, multi_seq,
    theta_scale, predraft, cache_prompt) and llama-server's n_predict. Unknown fields are ignored,
    as OpenAI-style servers do (those that change the output: see NOT_YET)."""
    model: str = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    n_predict: int | None = Field(None, ge=-1)  # llama-server: -1 is "no limit"
    temperature: float = Field(1.0, ge=0, le=2)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = Field(0, ge=0)
    seed: int | None = Field(None, ge=-1, lt=SEED_LIMIT)  # None or -1: a fresh random seed
    stop: Union[str, list[str], None] = None
    stream: bool = False
    stream_options: StreamOptions = Field(default_factory=StreamOptions)
    n: int = Field(1, ge=1, le=MAX_N)
    method: Literal["vanilla", "sps", "duo", "lookup"] = "duo"
    gamma: int | None = Field(None, ge=1, le=64)
    multi_seq: bool = True
    theta_scale: float = Field(1.0, gt=0, le=100)
    predraft: bool = True  # duo: pre-draft likely rejection outcomes (the cost model decides)
    lookup: Literal["auto", "on", "off"] = "auto"  # duo, lookup: suffix-index drafts
    cache_prompt: bool = True  # as llama-server: keep what the caches hold of this prompt
    response_format: ResponseFormat | None = None
    logit_bias: dict[str, float] | None = None  # token id (as a string) -> -100..100
    presence_penalty: float = Field(0.0, ge=-2, le=2)
    frequency_penalty: float = Field(0.0, ge=-2, le=2)

    def logprob_count(self) -> int | None:
        """Alternatives per token to report; None: no logprobs (each endpoint says)."""
        return None

    def token_bias(self) -> dict[int, float]:
        out = {}
        for key, value in (self.logit_bias or {}).items():
            if not key.isdigit() or not -100 <= value <= 100:
                raise ApiError(400, f"logit_bias: keys are token ids, values in [-100, 100]; "
                                    f"got {key!r}: {value}", param="logit_bias",
                               code="invalid_value")
            out[int(key)] = float(value)
        return out

    def wanted_tokens(self) -> int | None:
        if self.n_predict == 0:
            raise ApiError(400, "n_predict: must be -1 (no limit) or >= 1", param="n_predict",
                           code="invalid_value")
        predict = self.n_predict if self.n_predict and self.n_predict > 0 else None
        return self.max_completion_tokens or self.max_tokens or predict

    def stops(self) -> tuple[str, ...]:
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        if len(stops) > MAX_STOPS or any(not s for s in stops):
            raise ApiError(400, f"stop: at most {MAX_STOPS} non-empty strings", param="stop",
                           code="invalid_value")
        return tuple(stops)

    def base_seed(self) -> int:
        """The seed asked for, or a fresh random one (returned to the client)."""
        return secrets.randbelow(2**32) if self.seed is None or self.seed == -1 else self.seed

    def gen_config(self, max_new_tokens: int, seed: int) -> GenConfig:
        sampling = SamplingConfig(self.temperature, self.top_k, self.top_p)
        return GenConfig(method=self.method, max_new_tokens=max_new_tokens, sampling=sampling,
                         seed=seed % SEED_LIMIT, gamma=self.gamma, stop_strings=self.stops(),
                         multi_seq=self.multi_seq, theta_scale=self.theta_scale,
                         predraft=self.predraft, cache_prompt=self.cache_prompt, lookup=self.lookup,
                         response_format=self.response_format and self.response_format.spec(),
                         logit_bias=self.token_bias(), presence_penalty=self.presence_penalty,
                         frequency_penalty=self.frequency_penalty, logprobs=self.logprob_count())


class ChatRequest(Knobs):
    messages: list[Message] = Field(min_length=1)
    tools: list[Tool] | None = None
    tool_choice: Union[Literal["none", "auto", "required"], NamedToolChoice, None] = None
    parallel_tool_calls: bool = True  # False: at most one call (the grammar)
    logprobs: bool = False
    top_logprobs: int = Field(0, ge=0, le=20)

    def logprob_count(self) -> int | None:
        if self.top_logprobs and not self.logprobs:
            raise ApiError(400, "top_logprobs needs logprobs: true", param="top_logprobs",
                           code="invalid_value")
        return self.top_logprobs if self.logprobs else None

    def conversation(self) -> list[dict]:
        return [m.for_template() for m in self.messages]

    def tool_list(self) -> list[dict] | None:
        """The tools as given (app/tool_prompt.py plans what reaches the prompt)."""
        return [t.model_dump(exclude_none=True) for t in self.tools] if self.tools else None

    def choice(self):
        """tool_choice as app/tool_prompt.py takes it: a string, a {"function": {"name"}}
        dict or None."""
        c = self.tool_choice
        return c.model_dump() if isinstance(c, NamedToolChoice) else c


class CompletionRequest(Knobs):
    prompt: Union[str, list[str]]
    suffix: str | None = None  # fill-in-the-middle (app/infill.py): the text after the gap
    logprobs: int | None = Field(None, ge=0, le=5)

    def logprob_count(self) -> int | None:
        return self.logprobs

    def texts(self) -> list[str]:
        """The prompts, in order: one choice each (n choices each with n > 1)."""
        prompts = self.prompt if isinstance(self.prompt, list) else [self.prompt]
        if not 1 <= len(prompts) <= MAX_PROMPTS:
            raise ApiError(400, f"prompt: a list of 1 to {MAX_PROMPTS} prompts, got "
                                f"{len(prompts)}", param="prompt", code="invalid_value")
        return prompts

    def tool_list(self) -> None:
        return None


def parse(model: type[BaseModel], body: bytes) -> BaseModel:
    """The request body as `model`, or a 400 ApiError naming the first bad field. A null
    field is an absent one (a required one then reads as missing)."""
    data = load_json(body)
    data = {k: v for k, v in data.items() if v is not None}
    refuse_not_yet(data)
    try:
        return model.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        param = _param(err["loc"], data, err["type"] == "missing")
        code = "missing_required_parameter" if err["type"] == "missing" else "invalid_value"
        raise ApiError(400, f"{param}: {err['msg']}", param=param, code=code) from None


def load_json(body: bytes) -> dict:
    """The body as a JSON object, or a 400 ApiError."""
    try:
        data = json.loads(body, parse_constant=_no_constant)
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
        raise ApiError(400, f"the body is not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise ApiError(400, "the body must be a JSON object")
    return data


def refuse_not_yet(data: dict) -> None:
    for name, why in REMOVED.items():
        if name in data:
            raise ApiError(400, f"{name}: no longer taken ({why}); leave it out",
                           param=name, code="unsupported_parameter")
    for name, is_default in NOT_YET.items():
        if name in data and not is_default(data[name]):
            raise ApiError(400, f"{name}: not supported yet (the server would ignore it and "
                                f"answer differently); leave it out or null",
                           param=name, code="unsupported_parameter")


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
