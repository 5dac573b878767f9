"""llama-server's routes beside the OpenAI ones: GET /health (200 once the pair is loaded, 503
before), POST /tokenize and POST /detokenize with the target's tokenizer; POST /completion and
POST /infill: app/llama_native.py."""
from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from app.llama_native import add_native_routes
from app.openai_io import ApiError, Strict, guarded, parse, read_body


class TokenizeRequest(Strict):
    content: str
    add_special: bool = False  # llama-server's default
    with_pieces: bool = False


class DetokenizeRequest(Strict):
    tokens: list[int]


def add_llama_routes(r: APIRouter, api) -> None:
    @r.get("/health")
    async def health():  # no key needed, as llama-server
        return await guarded(_health(api))

    @r.post("/tokenize")
    async def tokenize(request: Request):
        return await guarded(_tokenizer_call(api, request, TokenizeRequest, _tokenize))

    @r.post("/detokenize")
    async def detokenize(request: Request):
        return await guarded(_tokenizer_call(api, request, DetokenizeRequest, _detokenize))

    add_native_routes(r, api)


async def _health(api) -> JSONResponse:
    api.loaded()  # 503 while loading
    return JSONResponse({"status": "ok"})


async def _tokenizer_call(api, request: Request, model, work) -> JSONResponse:
    api.check_key(request)
    req = parse(model, await read_body(request))
    pair = api.loaded()

    def locked():
        with pair.tokenizer_lock:
            return work(pair.tokenizer, req)
    return JSONResponse(await run_in_threadpool(locked))


def _tokenize(tokenizer, req: TokenizeRequest) -> dict:
    ids = tokenizer(req.content, add_special_tokens=req.add_special)["input_ids"]
    if req.with_pieces:
        return {"tokens": [{"id": t, "piece": tokenizer.decode([t])} for t in ids]}
    return {"tokens": list(ids)}


def _detokenize(tokenizer, req: DetokenizeRequest) -> dict:
    bad = [t for t in req.tokens if not 0 <= t < len(tokenizer)]
    if bad:
        raise ApiError(400, f"tokens: {bad[0]} is not a token id of this model (0.."
                            f"{len(tokenizer) - 1})", param="tokens", code="invalid_value")
    return {"content": tokenizer.decode(req.tokens)}
