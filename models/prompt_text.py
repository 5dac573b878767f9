"""What a prompt must be before it is tokenized: some visible text, and not so long that the
window could never hold it (a multi-megabyte paste is refused by its length, not tokenized)."""
from __future__ import annotations

CHARS_PER_TOKEN = 16  # no tokenizer here packs more text into one token on average


class ContextOverflow(ValueError):
    """The prompt, or the prompt plus the tokens asked for, does not fit the window."""


def has_text(text: str) -> bool:
    """True if `text` holds anything but whitespace and control characters."""
    return any(c.isprintable() and not c.isspace() for c in text)


def check_prompt(messages: list[dict], n_ctx: int | None = None) -> None:
    """Raise ValueError for a prompt with no visible text, or (given the window) one longer
    than CHARS_PER_TOKEN characters per token of the window."""
    if not any(has_text(m.get("content") or "") for m in messages):
        raise ValueError("the prompt is empty (no text but spaces or control characters)")
    chars = sum(len(m.get("content") or "") for m in messages)
    if n_ctx is not None and chars > CHARS_PER_TOKEN * n_ctx:
        raise ContextOverflow(f"the prompt is {chars} characters; the context window ({n_ctx} "
                         f"tokens) allows at most {CHARS_PER_TOKEN * n_ctx} characters")
