"""The conversation as plain data: chatbot history cleaned, what is sent to the model, the
context meter line and the JSON / Markdown exports. No gradio, no model here."""
from __future__ import annotations

import json
import time
from pathlib import Path

NOTE = "*(no text"  # a reply that only says the model gave no text: shown, never sent back


def text_of(content) -> str:
    """Text of a chat message as gradio hands it over (a string or a list of parts); files
    and other parts are ignored, never opened."""
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        return content.get("text", "") if content.get("type", "text") == "text" else ""
    return "".join(text_of(c) for c in content) if isinstance(content, (list, tuple)) else ""


def clean_history(history) -> list[dict]:
    """The chatbot's messages as {role, content} with text content (as shown, notes included)."""
    out = []
    for m in history or []:
        role = m.get("role") if isinstance(m, dict) else None
        if role in ("user", "assistant", "system"):
            out.append({"role": role, "content": text_of(m.get("content", ""))})
    return out


def no_text_note(why) -> str:
    if why == "stopped":
        return f"{NOTE}: stopped before the first token)*"
    return f"{NOTE}: the model stopped at once — {why})*"


def model_history(history: list[dict]) -> list[dict]:
    """The turns the model sees again: a note reply is dropped with the question before it,
    so the roles still alternate."""
    out: list[dict] = []
    for m in history:
        if m["role"] == "assistant" and m["content"].startswith(NOTE):
            if out and out[-1]["role"] == "user":
                out.pop()
            continue
        out.append(m)
    return out


def with_system(system: str | None, messages: list[dict]) -> list[dict]:
    system = (system or "").strip()
    return ([{"role": "system", "content": system}] if system else []) + messages


def conversation(history: list[dict], message: str, raw: bool, system: str | None):
    """What pair.prompt_ids gets for the next answer: the typed text alone in raw mode, else
    the system prompt, the earlier turns and the new question."""
    if raw:
        return message
    return with_system(system, model_history(history) + [{"role": "user", "content": message}])


def last_question(history: list[dict]) -> tuple[str, list[dict]]:
    """(the last user turn, the turns before it), its answer dropped; ('', history) if none."""
    turns = history[:-1] if history and history[-1]["role"] == "assistant" else history
    if turns and turns[-1]["role"] == "user":
        return turns[-1]["content"], turns[:-1]
    return "", history


def context_prompt(history: list[dict], raw: bool, system: str | None):
    """What the window holds for the next answer, before the new question: in raw mode the
    last exchange (no history is sent), else the system prompt, the turns and the reply header."""
    if raw:
        return "".join(m["content"] for m in model_history(history)[-2:])
    return with_system(system, model_history(history))


def meter_line(used: int | None, window: int | None, problem: str = "") -> str:
    if problem:
        return f"context: {problem}"
    if used is None or not window:
        return "context: ?"
    return f"context: {used} of {window} tokens ({100 * used / window:.0f}%)"


def export_markdown(messages: list[dict], meta: dict) -> str:
    head = [f"# Chat with `{meta.get('pair', '?')}`", ""]
    head += [f"- {k}: `{v}`" for k, v in (meta.get("settings") or {}).items()]
    turns = [f"## {m['role']}\n\n{m['content']}" for m in messages]
    return "\n".join(head) + "\n\n" + "\n\n".join(turns) + "\n"


def write_exports(folder: Path, messages: list[dict], meta: dict,
                  now: float | None = None) -> tuple[Path, Path]:
    """chat-YYYYmmdd-HHMMSS.json and .md in `folder`; returns their paths."""
    stem = time.strftime("chat-%Y%m%d-%H%M%S", time.localtime(now))
    paths = folder / f"{stem}.json", folder / f"{stem}.md"
    paths[0].write_text(json.dumps({**meta, "messages": messages}, indent=2, ensure_ascii=False),
                        encoding="utf-8")
    paths[1].write_text(export_markdown(messages, meta), encoding="utf-8")
    return paths
