"""The OpenAI wire format, responses: whole answers, stream chunks and the last usage chunk
(`usage` with llama-server style `timings`), for one or more choices."""
from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field

FINISH = {"eos": "stop", "stop_string": "stop", "stopped": "stop",
          "max_new_tokens": "length", "context_window": "length"}


@dataclass
class Answer:
    """One choice as it ends: its text (tool calls taken out) and the engine's stats."""
    text: str = ""
    stats: dict = field(default_factory=dict)
    tool_calls: list[dict] = field(default_factory=list)
    logprobs: list = field(default_factory=list)  # core.logprobs.TokenLogprob, when asked
    tokens: list[int] = field(default_factory=list)  # the ids generated (llama-server's)

    def add(self, ev) -> None:
        """One event of this choice: its text, ids, logprobs and (the last) the stats."""
        self.text += ev.text
        self.tokens += ev.tokens
        self.stats = ev.stats or self.stats
        self.logprobs += ev.logprobs or []

    @property
    def finish(self) -> str:
        return "tool_calls" if self.tool_calls else FINISH.get(self.stats.get("stop_reason"),
                                                                "stop")


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def usage(answers: list[Answer], per_prompt: int = 0) -> dict:
    """Each prompt counted once (its n choices, `per_prompt`, reuse it; 0: one prompt for
    all), the completions summed."""
    firsts = answers[::per_prompt] if per_prompt else answers[:1]
    prompt = sum(int(a.stats.get("prompt_tokens", 0)) for a in firsts)
    new = sum(int(a.stats.get("new_tokens", 0)) for a in answers)
    return {"prompt_tokens": prompt, "completion_tokens": new, "total_tokens": prompt + new,
            "prompt_tokens_details": {"cached_tokens": sum(int(a.stats.get("cached_tokens", 0))
                                                           for a in firsts)}}


def _per(n: int, ms: float) -> tuple[float, float]:
    """(ms per token, tokens per second)"""
    return (ms / n if n else 0.0), (n * 1e3 / ms if ms > 0 else 0.0)


def timings(stats: dict) -> dict:
    """llama-server's fields, then ours. prompt_ms is the time to the first token;
    predicted_ms the whole generation, so predicted_per_second is the page's tokens/s."""
    ttft_ms, wall_ms = float(stats.get("ttft_s", 0)) * 1e3, float(stats.get("wall_s", 0)) * 1e3
    cached = int(stats.get("cached_tokens", 0))
    prompt_n, predicted_n = int(stats.get("prompt_tokens", 0)) - cached, int(
        stats.get("new_tokens", 0))
    prompt_per_token, prompt_per_s = _per(prompt_n, ttft_ms)
    predicted_per_token = _per(predicted_n, wall_ms)[0]
    return {"prompt_n": prompt_n, "cache_n": cached, "prompt_ms": ttft_ms,
            "prompt_per_token_ms": prompt_per_token, "prompt_per_second": prompt_per_s,
            "predicted_n": predicted_n, "predicted_ms": wall_ms,
            "predicted_per_token_ms": predicted_per_token,
            "predicted_per_second": float(stats.get("tokens_per_s", 0)), "ttft_ms": ttft_ms,
            "method": stats.get("method"), "acceptance_rate": stats.get("acceptance_rate", 0.0),
            "rounds": stats.get("rounds", 0),
            "mean_accepted_per_round": stats.get("mean_accepted_per_round", 0.0),
            "stop_reason": stats.get("stop_reason")}


def chat_logprobs(items: list, token_text) -> dict:
    """Chat's logprobs: {"content": [{token, logprob, bytes, top_logprobs}]}."""
    def entry(tok: int, lp: float) -> dict:
        text = token_text(tok)
        return {"token": text, "logprob": lp, "bytes": list(text.encode("utf-8"))}
    return {"content": [{**entry(i.token, i.logprob),
                         "top_logprobs": [entry(t, v) for t, v in i.top]} for i in items],
            "refusal": None}


def text_logprobs(items: list, token_text, offset: int = 0) -> dict:
    """Completions' logprobs: tokens, token_logprobs, top_logprobs, text_offset."""
    texts = [token_text(i.token) for i in items]
    starts = [offset + sum(len(t) for t in texts[:k]) for k in range(len(texts))]
    return {"tokens": texts, "token_logprobs": [i.logprob for i in items],
            "top_logprobs": [{token_text(t): v for t, v in i.top} for i in items],
            "text_offset": starts}


class Shapes:
    """Response bodies of one request: chat (`chat.completion`) or text (`text_completion`);
    every body names the seed the request used (choice i used seed + i); `token_text`
    renders the logprobs' tokens when they were asked for."""

    def __init__(self, chat: bool, model: str, seed: int, token_text=None, per_prompt: int = 0):
        self.chat, self.model, self.seed, self.token_text = chat, model, seed, token_text
        self.per_prompt = per_prompt  # choices per prompt of a prompt list (usage)
        self.id, self.created = new_id("chatcmpl" if chat else "cmpl"), int(time.time())
        self.offsets: dict[int, int] = {}  # per choice: text sent so far (text_offset)

    def logprobs(self, index: int, items: list, text: str) -> dict | None:
        if self.token_text is None:
            return None
        if self.chat:
            return chat_logprobs(items, self.token_text)
        out = text_logprobs(items, self.token_text, self.offsets.get(index, 0))
        self.offsets[index] = self.offsets.get(index, 0) + len(text)
        return out

    def _head(self, obj: str) -> dict:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model,
                "seed": self.seed}

    @property
    def _chunk_object(self) -> str:
        return "chat.completion.chunk" if self.chat else "text_completion"

    def whole(self, answers: list[Answer]) -> dict:
        choices = []
        for i, a in enumerate(answers):
            choice = {"index": i, "finish_reason": a.finish,
                      "logprobs": self.logprobs(i, a.logprobs, a.text)}
            if self.chat:
                choice["message"] = {"role": "assistant",
                                     "content": a.text if a.text or not a.tool_calls else None}
                if a.tool_calls:
                    choice["message"]["tool_calls"] = a.tool_calls
            else:
                choice["text"] = a.text
            choices.append(choice)
        body = self._head("chat.completion" if self.chat else "text_completion")
        return {**body, "choices": choices, "usage": usage(answers, self.per_prompt),
                "timings": timings(answers[0].stats)}

    def chunk(self, index: int, text: str = "", first: bool = False,
              tool_calls: list[dict] | None = None, finish: str | None = None,
              logprobs: list | None = None) -> dict:
        """One choice's piece: the role (first), text (with its tokens' logprobs), tool calls,
        or the finish reason (no content then)."""
        lp = self.logprobs(index, logprobs, text) if logprobs else None
        choice = {"index": index, "finish_reason": finish, "logprobs": lp}
        if self.chat:
            delta = {"role": "assistant", "content": text} if first else {}
            if text and not first:
                delta["content"] = text
            if tool_calls:  # entries with their index (app/tools.py ToolStream)
                delta["tool_calls"] = tool_calls
            choice["delta"] = delta
        else:
            choice["text"] = text
        return {**self._head(self._chunk_object), "choices": [choice]}

    def usage_chunk(self, answers: list[Answer]) -> dict:
        """The last chunk when stream_options.include_usage: no choices, usage and timings."""
        return {**self._head(self._chunk_object), "choices": [],
                "usage": usage(answers, self.per_prompt),
                "timings": timings(answers[0].stats)}


def sse(body: dict | str) -> str:
    return f"data: {body if isinstance(body, str) else json.dumps(body, ensure_ascii=False)}\n\n"
