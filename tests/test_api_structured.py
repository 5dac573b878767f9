"""The API's output-changing fields on a live server over smol-self: response_format
(json_object, json_schema), logit_bias, presence/frequency penalties and logprobs, through the
official `openai` client and plain HTTP; what is wrong with them is a 400 that names them."""
from __future__ import annotations

import json

import pytest

from tests.live_server import served  # noqa: F401 - the module's server (a fixture)
from tests.test_grammar import SCHEMA

ASK = [{"role": "user", "content": "Why is the sky blue? Answer in JSON."}]
RF = {"type": "json_schema", "json_schema": {"name": "answer", "strict": True, "schema": SCHEMA}}


def chat(served, method="duo", **kw):
    kw.setdefault("max_tokens", 24)
    return served.client().chat.completions.create(
        model="smol-self", messages=ASK, temperature=0, extra_body={"method": method}, **kw)


def test_json_schema_validates_and_duo_equals_vanilla(served, smol_pair):
    """vanilla under the schema is tests/test_grammar.py's, on the same prompt, kept on disk
    (tests/oracle.py): whichever file comes first decodes it (a vanilla through the API as
    well cost its 37 single steps again, about 3 CPU seconds); it ends by EOS within its 48
    tokens, so 160 give the same."""
    from tests.test_grammar import adjusted_vanilla

    want = adjusted_vanilla(smol_pair, ASK[0]["content"], {"response_format": RF})
    assert len(want) < 48  # ended before its budget: by EOS (no stop strings)
    duo = chat(served, response_format=RF, max_tokens=160)
    text = duo.choices[0].message.content
    assert text == smol_pair.decode(want)
    assert duo.choices[0].finish_reason == "stop" and duo.usage.completion_tokens == len(want)
    assert set(json.loads(text)) == {"answer", "steps"}


def test_json_object_starts_an_object(served):
    r = chat(served, response_format={"type": "json_object"}, max_tokens=8)
    assert r.choices[0].message.content.startswith("{")


def test_logit_bias_and_penalties_change_the_text_alike_for_duo_and_vanilla(served, smol_pair):
    """The plain greedy answer is the oracle's (tests/conftest.py; test_grammar.py's for this
    prompt, on disk): its first token is biased away (a plain chat for it cost 24 tokens)."""
    from tests.conftest import vanilla_ids

    plain = vanilla_ids(smol_pair, smol_pair.prompt_ids(ASK[0]["content"]), 16)
    fields = {"logit_bias": {str(plain[0]): -100}, "frequency_penalty": 1.0,
              "presence_penalty": 0.5, "max_tokens": len(plain)}
    duo = chat(served, **fields).choices[0].message.content
    vanilla = chat(served, "vanilla", **fields)
    assert duo == vanilla.choices[0].message.content != smol_pair.decode(plain)
    assert vanilla.model_extra["timings"]["method"] == "vanilla"  # the request's method ran


def test_chat_logprobs_whole_and_streamed(served):
    r = chat(served, logprobs=True, top_logprobs=2)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    assert "".join(c.token for c in content) == r.choices[0].message.content
    for c in content:
        assert c.logprob <= 0 and len(c.top_logprobs) == 2
        assert c.top_logprobs[0].token == c.token  # greedy picks the model's top token
    chunks = list(chat(served, logprobs=True, top_logprobs=2, stream=True))
    streamed = [c for ch in chunks if ch.choices and ch.choices[0].logprobs
                for c in ch.choices[0].logprobs.content]
    assert [c.token for c in streamed] == [c.token for c in content]
    assert [c.logprob for c in streamed] == pytest.approx([c.logprob for c in content], abs=1e-4)
    assert chat(served, max_tokens=1).choices[0].logprobs is None  # only when asked


def test_completions_logprobs(served):
    r = served.client().completions.create(model="smol-self", prompt="The sky is", max_tokens=6,
                                           temperature=0, logprobs=3)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 6
    assert "".join(lp.tokens) == r.choices[0].text and lp.text_offset[0] == 0
    assert all(len(top) == 3 for top in lp.top_logprobs)


BASE = {"model": "smol-self", "messages": ASK, "max_tokens": 4, "temperature": 0}
BAD = [
    ({"response_format": {"type": "xml"}}, "response_format.type"),
    ({"response_format": {"type": "json_schema"}}, "response_format.json_schema"),
    ({"response_format": {"type": "json_schema", "json_schema": {
        "strict": True, "schema": {"type": "object", "minProperties": "x"}}}}, None),
    ({"logit_bias": {"hello": 3}}, "logit_bias"),
    ({"logit_bias": {"13": 300}}, "logit_bias"),
    ({"presence_penalty": 3}, "presence_penalty"),
    ({"top_logprobs": 2}, "top_logprobs"),
    ({"logprobs": True, "top_logprobs": 50}, "top_logprobs"),
]


@pytest.mark.parametrize("fields,param", BAD)
def test_bad_fields_are_a_400_that_names_them(served, fields, param):
    r = served.post("/chat/completions", {**BASE, **fields})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert param is None or err["param"] == param
    assert next(iter(fields)) in err["message"] or err["param"] == param
