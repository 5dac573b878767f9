"""response_format as a grammar: llguidance compiles a JSON schema (or any JSON object) for the
target's tokenizer, and `LLGrammar` is the core.constraints.Grammar a generation advances,
rolls back and asks for packed masks."""
from __future__ import annotations

import threading

import numpy as np

# JSON laid out as json.dumps does, with no free whitespace: a small model given free
# whitespace can pad forever instead of closing the object.
LAYOUT = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


class LLGrammar:
    """One llguidance matcher: the core.constraints.Grammar protocol."""

    def __init__(self, matcher, n_words: int):
        self.matcher, self.n_words = matcher, n_words

    def advance(self, tokens: list[int]) -> int:
        n = self.matcher.validate_tokens(tokens)
        if n and not self.matcher.consume_tokens(tokens[:n]):
            raise RuntimeError(f"grammar: {self.matcher.get_error()}")
        return n

    def rollback(self, n: int) -> None:
        if n and not self.matcher.rollback(n):
            raise RuntimeError(f"grammar: cannot roll back {n} tokens: "
                               f"{self.matcher.get_error()}")

    def mask(self) -> np.ndarray:
        words = np.zeros(self.n_words, dtype=np.uint32)
        self.matcher.unsafe_compute_mask_ptr(words.ctypes.data, words.nbytes)
        return words

    def fork(self) -> "LLGrammar":
        return LLGrammar(self.matcher.deep_copy(), self.n_words)

    @property
    def accepting(self) -> bool:
        return self.matcher.is_accepting()


class Grammars:
    """A pair's grammar compiler: the llguidance tokenizer is built once, on first use (about
    0.5 s for a 49k vocabulary, 5.5 s for Gemma 3's 262k), then each request compiles its
    schema (milliseconds)."""

    def __init__(self, hf_tokenizer, vocab_size: int, eos_ids: set[int]):
        self.hf_tokenizer, self.vocab_size, self.eos_ids = hf_tokenizer, vocab_size, eos_ids
        self._tokenizer = None
        self._lock = threading.Lock()

    def tokenizer(self):
        with self._lock:
            if self._tokenizer is None:
                import llguidance.hf
                self._tokenizer = llguidance.hf.from_tokenizer(
                    self.hf_tokenizer, n_vocab=self.vocab_size,
                    eos_token=sorted(self.eos_ids) or None)
            return self._tokenizer

    def compile(self, response_format: dict | None) -> LLGrammar | None:
        """The grammar of an OpenAI response_format ({"type": "text" | "json_object" |
        "json_schema", ...}); None for text. ValueError names what is wrong with it."""
        schema, strict = schema_of(response_format)
        if schema is None:
            return None
        import llguidance
        options = {**LAYOUT, "lenient": not strict}
        try:
            grammar = llguidance.LLMatcher.grammar_from_json_schema(schema, overrides=options)
        except ValueError as e:
            raise ValueError(f"response_format: {e}") from None
        tok = self.tokenizer()
        error = llguidance.LLMatcher.validate_grammar(grammar, tok)
        if error:
            raise ValueError(f"response_format: the schema is not supported: {error}")
        matcher = llguidance.LLMatcher(tok, grammar, log_level=0)
        if matcher.is_error():
            raise ValueError(f"response_format: {matcher.get_error()}")
        return LLGrammar(matcher, (self.vocab_size + 31) // 32)


def schema_of(response_format: dict | None) -> tuple[dict | None, bool]:
    """(JSON schema, strict) of a response_format; (None, False) for plain text."""
    kind = (response_format or {}).get("type", "text")
    if kind == "text":
        return None, False
    if kind == "json_object":
        return {"type": "object"}, True
    if kind == "json_schema":
        spec = response_format.get("json_schema") or {}
        schema = spec.get("schema")
        if not isinstance(schema, dict):
            raise ValueError("response_format.json_schema.schema must be a JSON schema object")
        return schema, bool(spec.get("strict", False))
    raise ValueError(f"response_format.type must be text, json_object or json_schema, "
                     f"got {kind!r}")
