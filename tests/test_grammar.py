"""response_format, logit_bias, penalties and logprobs on the real smol-self pair: greedy
`sps` and `duo` equal the adjusted target alone (`vanilla`) token for token (on the compiled
static target: tests/test_target_static.py, on smol-self's target cut to 4 layers); a schema's output
validates and ends with EOS; a tool answer that starts as text is free after its start
(gemma-smol, whose draft proposes unadjusted: tests/test_cross_tokenizer.py)."""
from __future__ import annotations

import json

import pytest

from core.engine import GenConfig
from tests.conftest import UNTIMED, vanilla_ids

SCHEMA = {"type": "object", "required": ["answer", "steps"], "additionalProperties": False,
          "properties": {"answer": {"type": "string", "maxLength": 60},
                         "steps": {"type": "array", "maxItems": 2,
                                   "items": {"type": "string", "maxLength": 30}}}}
RF = {"type": "json_schema", "json_schema": {"name": "answer", "strict": True, "schema": SCHEMA}}
PROMPTS = ["Why is the sky blue? Answer in JSON.",
           "What is 17 times 23? Show the steps, in JSON."]
ADJUSTED = {"schema": {"response_format": RF},
            "bias+penalties": {"logit_bias": {13: 2.0, 30: -5.0}, "presence_penalty": 0.6,
                               "frequency_penalty": 0.8},
            "everything": {"response_format": RF, "logit_bias": {1024: 1.5},
                           "frequency_penalty": 0.5}}


def run(pair, prompt, n=48, **kw):
    ids = prompt if isinstance(prompt, list) and isinstance(prompt[0], int) else \
        pair.prompt_ids(prompt)
    events = list(pair.generate(ids, GenConfig(max_new_tokens=n, **kw)))
    tokens = [t for e in events for t in e.tokens]
    return tokens, events[-1].stats, [lp for e in events for lp in (e.logprobs or [])]


def adjusted_vanilla(pair, prompt: str, fields: dict, n: int = 48) -> list[int]:
    """Greedy `vanilla`'s n ids under `fields`, decoded once and kept on disk beside the
    oracle (tests/oracle.py); test_target_static.py's compiled case decodes its own on the
    cut target."""
    from tests import oracle

    ids = pair.prompt_ids(prompt)
    tokens, asked = oracle.load(pair, ids, fields)
    if asked != n:  # a grammar may end differently under another budget: this n only
        tokens = run(pair, ids, n=n, method="vanilla", **fields)[0]
        oracle.store(pair, ids, tokens, n, fields)
    return tokens


# duo's own gamma and a fixed one run one code path: they share the prompts out. The field sets that
# test one kind of adjustment each (a schema; biases and penalties) take one prompt each,
# `everything` (a schema, a bias and a penalty at once) both: each runs sps and duo
METHODS = ((("sps", 4), ("duo", None)), (("sps", 6), ("duo", 2)))
SHARES = {"schema": (0,), "bias+penalties": (1,), "everything": (0, 1)}
# new tokens a run: the schema's answer ends within 48 (37, asserted); the others' rejections
# show by 32 (37 vanilla steps and 16 tokens a run more at 48 for the same paths)
TOKENS = {"schema": 48, "bias+penalties": 32, "everything": 32}
# whether a draft is rejected is counted on one run of fixed inputs: sps (no lookup, no
# pre-draft, no timing chooses its drafts) at gamma 4, cold (the draft's cache empty), on the
# first prompt: 4, 5 and 4 rejected under the three field sets, every run alike (2-core
# AMD EPYC VM, 2026-12-01); the second prompt's drafts all pass under biases and penalties at any gamma
COUNTED = (0, "sps", 4)


@pytest.mark.parametrize("name", ADJUSTED)
def test_greedy_equals_vanilla_eager(smol_pair, name):
    fields, rejected = ADJUSTED[name], None
    for i in SHARES[name]:
        prompt, methods = PROMPTS[i], METHODS[i]
        want = adjusted_vanilla(smol_pair, prompt, fields, TOKENS[name])
        plain = vanilla_ids(smol_pair, smol_pair.prompt_ids(prompt), 16)
        assert want[:16] != plain  # the fields bite (by token 0, 10 under biases+penalties:
        # the plain answer's 48 tokens, 64 single steps more, said nothing more)
        for method, gamma in methods:
            got, stats = adjusted_run(smol_pair, name, i, method, gamma)
            assert got == want, f"{method} gamma={gamma} differs on {prompt!r}"
            if gamma is not None:  # duo's own gamma may leave the drafting to the target
                assert stats["drafted"] > 0, (method, gamma)  # the model's drafts, masked
            if name == "schema":  # ends within its 48 tokens (37): test_schema_output_...
                assert stats["stop_reason"] == "eos"
                assert_validates(smol_pair, got)
            if (i, method, gamma) == COUNTED:
                rejected = stats["drafted"] - stats["accepted"]
    if rejected is None:  # this field set's prompts leave the counted run out
        i, method, gamma = COUNTED
        got, stats = adjusted_run(smol_pair, name, i, method, gamma)
        assert got == adjusted_vanilla(smol_pair, PROMPTS[i], fields, TOKENS[name])
        rejected = stats["drafted"] - stats["accepted"]
    assert rejected > 0  # the adjusted target turned some drafts down


def adjusted_run(pair, name: str, i: int, method: str, gamma: int | None):
    """`method` on PROMPTS[i] under the field set `name`; the counted run cold."""
    pair.lookup_memory.clear()  # vanilla's answer must not draft it: the model does
    cold = (i, method, gamma) == COUNTED
    untimed = UNTIMED if method == "duo" and gamma else {}  # its drafts counted
    got, stats, _ = run(pair, PROMPTS[i], n=TOKENS[name], method=method, gamma=gamma,
                        cache_prompt=not cold, **untimed, **ADJUSTED[name])
    return got, stats


def assert_validates(pair, tokens: list[int]) -> None:
    out = json.loads(pair.decode(tokens))
    assert set(out) == {"answer", "steps"} and len(out["answer"]) <= 60
    assert len(out["steps"]) <= 2 and all(len(s) <= 30 for s in out["steps"])


def test_schema_output_validates_and_stops(smol_pair):
    """The second prompt (the first one's `sps` and `duo` answers under the schema end and
    validate in test_greedy_equals_vanilla_eager[schema]; its 160-token run here repeated
    duo's: about 2 CPU seconds)."""
    tokens, stats, _ = run(smol_pair, PROMPTS[1], n=160, method="duo", response_format=RF)
    assert stats["stop_reason"] == "eos"
    assert_validates(smol_pair, tokens)


def test_json_object_gives_an_object(smol_pair):
    tokens, stats, _ = run(smol_pair, PROMPTS[0], n=24, method="duo",
                           response_format={"type": "json_object"})
    assert smol_pair.decode(tokens).startswith("{")


def test_logprobs_of_duo_equal_vanilla(smol_pair):
    """16 tokens: each token's logprobs are compared, duo's taken in rounds (asserted; 24
    before: 8 vanilla steps and 8 tokens of duo more)."""
    want, _, want_lp = run(smol_pair, PROMPTS[0], n=16, method="vanilla", logprobs=3)
    got, stats, got_lp = run(smol_pair, PROMPTS[0], n=16, method="duo", logprobs=3, gamma=4,
                             **UNTIMED)  # its drafts counted
    assert got == want and [lp.token for lp in got_lp] == want
    assert stats["drafted"] > 0  # the logprobs of verified drafts, not single steps
    for a, b in zip(got_lp, want_lp):
        assert a.top[0][0] == a.token  # greedy: the raw distribution's top token
        assert a.logprob == pytest.approx(b.logprob, abs=1e-3) and a.logprob <= 0
        assert [t for t, _ in a.top] == [t for t, _ in b.top]


def test_logprobs_are_of_the_raw_distribution_under_a_schema(smol_pair):
    """The schema forces the first tokens; their logprobs are still the model's own."""
    tokens, _, lps = run(smol_pair, PROMPTS[0], n=4, method="duo", response_format=RF,
                         logprobs=1)
    assert smol_pair.decode(tokens).startswith('{"answer": ')
    assert [lp.token for lp in lps] == tokens and lps[0].logprob < lps[0].top[0][1] + 1e-6


def test_a_bad_schema_is_refused(smol_pair):
    bad = {"type": "json_schema", "json_schema": {"strict": True,
                                                  "schema": {"type": "object", "minProperties": "x"}}}
    with pytest.raises(ValueError, match="response_format"):
        run(smol_pair, PROMPTS[0], n=4, method="duo", response_format=bad)


TOOL_AUTO = {"type": "tool_calls", "required": False, "parallel": True, "text": None,
             "tools": [{"name": "search", "parameters": {
                 "type": "object", "properties": {"query": {"type": "string"}},
                 "required": ["query"]}}]}


def test_a_text_answer_under_the_tool_grammar_is_free_after_its_start(smol_pair):
    """tool_choice auto: an answer that starts as text (here a line of Python, with `{`
    later) is neither cut nor constrained: once it leaves `<tool_call>` the grammar is
    released, so it is the unconstrained answer token for token, and greedy `duo` and `sps`
    equal `vanilla` under the grammar. (A C function asked for took 40 tokens to its close
    brace: 24 vanilla steps twice and 24 tokens of sps and duo more.)"""
    ids = smol_pair.prompt_ids("Write a JSON object with a name field.")
    plain = vanilla_ids(smol_pair, ids, 16)  # a brace at token 7, its close by token 13
    assert "{" in smol_pair.decode(plain[2:])  # a brace after the answer's start
    assert "}" in smol_pair.decode(plain)  # and its close: text past the brace, still free
    want = run(smol_pair, ids, n=16, method="vanilla", response_format=TOOL_AUTO)[0]
    assert want == plain
    for method, gamma in (("sps", 4), ("duo", None)):
        got = run(smol_pair, ids, n=16, method=method, gamma=gamma,
                  response_format=TOOL_AUTO)[0]
        assert got == want, method
