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

    @property
    def finish(self) -> str:
        return "tool_calls" if self.tool_calls else FINISH.get(self.stats.get("stop_reason"),
                                                                "stop")


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def usage(answers: list[Answer]) -> dict:
    """The prompt counted once (choices after the first reuse it), the completions summed."""
    first = answers[0].stats if answers else {}
    prompt = int(first.get("prompt_tokens", 0))
    new = sum(int(a.stats.get("new_tokens", 0)) for a in answers)
    return {"prompt_tokens": prompt, "completion_tokens": new, "total_tokens": prompt + new,
            "prompt_tokens_details": {"cached_tokens": int(first.get("cached_tokens", 0))}}


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


class Shapes:
    """Response bodies of one request: chat (`chat.completion`) or text (`text_completion`);
    every body names the seed the request used (choice i used seed + i)."""

    def __init__(self, chat: bool, model: str, seed: int):
        self.chat, self.model, self.seed = chat, model, seed
        self.id, self.created = new_id("chatcmpl" if chat else "cmpl"), int(time.time())

    def _head(self, obj: str) -> dict:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model,
                "seed": self.seed}

    @property
    def _chunk_object(self) -> str:
        return "chat.completion.chunk" if self.chat else "text_completion"

    def whole(self, answers: list[Answer]) -> dict:
        choices = []
        for i, a in enumerate(answers):
            choice = {"index": i, "finish_reason": a.finish, "logprobs": None}
            if self.chat:
                choice["message"] = {"role": "assistant",
                                     "content": a.text if a.text or not a.tool_calls else None}
                if a.tool_calls:
                    choice["message"]["tool_calls"] = a.tool_calls
            else:
                choice["text"] = a.text
            choices.append(choice)
        body = self._head("chat.completion" if self.chat else "text_completion")
        return {**body, "choices": choices, "usage": usage(answers),
                "timings": timings(answers[0].stats)}

    def chunk(self, index: int, text: str = "", first: bool = False,
              tool_calls: list[dict] | None = None, finish: str | None = None) -> dict:
        """One choice's piece: the role (first), text, tool calls, or the finish reason (no
        content then)."""
        choice = {"index": index, "finish_reason": finish, "logprobs": None}
        if self.chat:
            delta = {"role": "assistant", "content": text} if first else {}
            if text and not first:
                delta["content"] = text
            if tool_calls:
                delta["tool_calls"] = [{"index": k, **c} for k, c in enumerate(tool_calls)]
            choice["delta"] = delta
        else:
            choice["text"] = text
        return {**self._head(self._chunk_object), "choices": [choice]}

    def usage_chunk(self, answers: list[Answer]) -> dict:
        """The last chunk when stream_options.include_usage: no choices, usage and timings."""
        return {**self._head(self._chunk_object), "choices": [], "usage": usage(answers),
                "timings": timings(answers[0].stats)}


def sse(body: dict | str) -> str:
    return f"data: {body if isinstance(body, str) else json.dumps(body, ensure_ascii=False)}\n\n"
