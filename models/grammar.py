"""response_format as a grammar: llguidance compiles a JSON schema (or any JSON object) for the
target's tokenizer, or a tool-call answer (plain text or `<tool_call>` JSON calls matching the
tools' schemas); `LLGrammar` is the core.constraints.Grammar a generation advances, rolls back
and asks for packed masks."""
from __future__ import annotations

import json
import threading

import numpy as np

# JSON laid out as json.dumps does, with no free whitespace: a small model given free
# whitespace can pad forever instead of closing the object.
LAYOUT = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


class LLGrammar:
    """One llguidance matcher: the core.constraints.Grammar protocol. `text_after`: the
    Release of a tool answer's free plain text (None: the grammar is never free)."""

    def __init__(self, matcher, n_words: int, text_after: "Release | None" = None):
        self.matcher, self.n_words, self.text_after = matcher, n_words, text_after
        self.tokens: list[int] = []  # consumed, for `free`

    def advance(self, tokens: list[int]) -> int:
        n = self.matcher.validate_tokens(tokens)
        if n and not self.matcher.consume_tokens(tokens[:n]):
            raise RuntimeError(f"grammar: {self.matcher.get_error()}")
        self.tokens += tokens[:n]
        return n

    def rollback(self, n: int) -> None:
        if n and not self.matcher.rollback(n):
            raise RuntimeError(f"grammar: cannot roll back {n} tokens: "
                               f"{self.matcher.get_error()}")
        del self.tokens[len(self.tokens) - n:]

    def mask(self) -> np.ndarray:
        words = np.zeros(self.n_words, dtype=np.uint32)
        self.matcher.unsafe_compute_mask_ptr(words.ctypes.data, words.nbytes)
        return words

    def fork(self) -> "LLGrammar":
        twin = LLGrammar(self.matcher.deep_copy(), self.n_words, self.text_after)
        twin.tokens = list(self.tokens)
        return twin

    @property
    def free(self) -> bool:
        """Every token, EOS included, allowed from here to the end: the answer has committed
        to the tool grammar's plain-text branch, which after its start is free text."""
        return self.text_after is not None and self.text_after.committed(self.tokens) \
            and self.matcher.is_accepting()


class Release:
    """When a tool answer (`start: text | calls`, calls opening with OPEN, text any non-empty text
    that does not) is free: once its bytes are not a start of OPEN nor start with it, only the text
    branch is left and it takes anything (tests/test_grammar.py checks the mask there)."""

    def __init__(self, tokenizer, opening: str = "<tool_call>"):
        self.tokenizer, self.opening = tokenizer, opening.encode()

    def committed(self, tokens: list[int]) -> bool:
        head = self.tokenizer.decode_bytes(tokens[:len(self.opening) + 1])
        return bool(head) and not self.opening.startswith(head) \
            and not head.startswith(self.opening)


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
        "json_schema", ...}) or of a tool-call answer ({"type": "tool_calls", ...}: see
        tool_lark); None for text. ValueError names what is wrong with it."""
        import llguidance
        field = "tools" if (response_format or {}).get("type") == "tool_calls" else \
            "response_format"
        grammar = self._grammar(response_format)
        if grammar is None:
            return None
        tok = self.tokenizer()
        error = llguidance.LLMatcher.validate_grammar(grammar, tok)
        if error:
            first = error.strip().splitlines()[0]
            raise ValueError(f"{field}: the schema is not supported: {first}")
        matcher = llguidance.LLMatcher(tok, grammar, log_level=0)
        if matcher.is_error():
            raise ValueError(f"{field}: {matcher.get_error()}")
        free_text = (response_format or {}).get("type") == "tool_calls" and not \
            response_format.get("required") and schema_of(response_format.get("text"))[0] is None
        return LLGrammar(matcher, (self.vocab_size + 31) // 32,
                         Release(tok, OPEN) if free_text else None)

    @staticmethod
    def _grammar(response_format: dict | None) -> str | None:
        import llguidance
        if (response_format or {}).get("type") == "tool_calls":
            try:
                return llguidance.LLMatcher.grammar_from_lark(tool_lark(response_format))
            except ValueError as e:
                raise ValueError(f"tools: {e}") from None
        schema, strict = schema_of(response_format)
        if schema is None:
            return None
        options = {**LAYOUT, "lenient": not strict}
        try:
            return llguidance.LLMatcher.grammar_from_json_schema(schema, overrides=options)
        except ValueError as e:
            raise ValueError(f"response_format: {e}") from None


OPEN, CLOSE = "<tool_call>", "</tool_call>"


def tool_lark(spec: dict) -> str:
    """A lark grammar (llguidance's dialect) for a tool-call answer. spec: {"tools": [{"name",
    "parameters"}], "required": bool (no plain text), "parallel": bool (one or more calls),
    "text": a response_format for the plain-text branch or None}. A call is
    `<tool_call>{"name": N, "arguments": {...}}</tool_call>` (a newline may pad the JSON), its
    arguments matching N's JSON schema; calls are one a line; plain text never starts with
    OPEN and is free after its start (LLGrammar.free: no masks are computed there)."""
    defs: dict = {}
    calls = [{"type": "object", "additionalProperties": False, "required": ["name", "arguments"],
              "properties": {"name": {"const": t["name"]},
                             "arguments": closed(_hoist_defs(t.get("parameters"), defs))}}
             for t in spec["tools"]]
    defs = {key: {n: closed(d) for n, d in group.items()} for key, group in defs.items()}
    body = {"anyOf": calls, **defs, "x-guidance": {**LAYOUT, "lenient": True}}
    lines = ["calls: " + ("call+" if spec.get("parallel", True) else "call"),
             f'call: "{OPEN}" "\\n"? body "\\n"? "{CLOSE}"',
             "body: %json " + json.dumps(body)]
    if spec.get("required"):
        return "\n".join(["start: calls", *lines])
    schema, strict = schema_of(spec.get("text"))
    if schema is None:
        text = "answer: TEXT\nTEXT: /(.|\\n)+/ & ~/" + OPEN + "(.|\\n)*/"
    else:
        text = "answer: %json " + json.dumps({**schema, "x-guidance": {**LAYOUT,
                                                                       "lenient": not strict}})
    return "\n".join(["start: answer | calls", *lines, text])


def closed(schema):
    """`schema` with every object that lists its properties and says nothing of others closed
    to them (additionalProperties: false, as OpenAI's strict function calling asks): a small
    model given room for more keys can add keys until max_tokens."""
    if isinstance(schema, list):
        return [closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: closed(v) if k in SUBSCHEMAS else v for k, v in schema.items()}
    for key in ("properties", "$defs", "definitions", "patternProperties"):
        if isinstance(out.get(key), dict):
            out[key] = {n: closed(s) for n, s in out[key].items()}
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


SUBSCHEMAS = ("items", "anyOf", "oneOf", "allOf", "not", "prefixItems", "if", "then", "else",
              "additionalProperties")


def _hoist_defs(parameters: dict | None, defs: dict) -> dict:
    """A tool's parameters schema with its $defs moved to the grammar's root, where its
    "#/$defs/..." references point once it is nested in the call schema."""
    schema = dict(parameters or {"type": "object", "properties": {}})
    for key in ("$defs", "definitions"):
        for name, sub in (schema.pop(key, None) or {}).items():
            if defs.setdefault(key, {}).setdefault(name, sub) != sub:
                raise ValueError(f"tools: two tools define {key} '{name}' differently")
    return schema

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
