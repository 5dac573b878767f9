"""What the tool grammar's cost rests on, without a model: our tool prompt is a stable prefix
of every request that sends the same tools (so an agent loop's prompt cache keeps it), and
api_bench --tools sends each arm as named (cold arms prefill whole, agent arms reuse the cache)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from app.tool_prompt import plan
from scripts.api_bench import ARMS, PRIME, TOOLS, arm_request, summary

STEP_2 = [{"role": "user", "content": "Weather in Paris?"},
          {"role": "assistant", "content": None, "tool_calls": [{
              "id": "call_1", "type": "function",
              "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
          {"role": "tool", "tool_call_id": "call_1", "content": "18 C, sunny"}]


@pytest.mark.parametrize("system", [[], [{"role": "system", "content": "Be brief."}]])
def test_every_step_of_a_tool_loop_starts_with_the_same_system_part(system):
    first = plan(system + STEP_2[:1], TOOLS, "auto", True, hermes=False, text_format=None)
    second = plan(system + STEP_2, TOOLS, "auto", True, hermes=False, text_format=None)
    other = plan(system + [{"role": "user", "content": "Hi"}], TOOLS, "auto", True,
                 hermes=False, text_format=None)
    assert first.messages[0] == second.messages[0] == other.messages[0]
    assert first.messages[0]["role"] == "system" and "get_weather" in first.messages[0]["content"]
    assert first.messages[1:] == second.messages[1:2]  # the earlier turns come back as they were


class Client:
    """Records the bodies of chat.completions.create and answers with empty timings."""

    def __init__(self):
        self.sent = []
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self.create))

    def create(self, **kw):
        self.sent.append(kw)
        return "answer"


def arm(label):
    return next(a for a in ARMS if a[0] == label)


def test_cold_arms_prefill_the_whole_prompt():
    client = Client()
    for label in ("plain", "tools", "tools_nolookup", "prompt_only_nolookup", "plain_nolookup"):
        assert arm_request(client, "p", "Why?", arm(label), 128) == "answer"
    plain, tools, nolookup, prompt_only, plain_off = client.sent
    assert all(s["extra_body"]["cache_prompt"] is False for s in client.sent)
    assert "tools" not in plain and tools["tools"] == nolookup["tools"] == TOOLS
    assert "lookup" not in tools["extra_body"] and nolookup["extra_body"]["lookup"] == "off"
    assert plain_off["messages"] == plain["messages"] and "tools" not in plain_off
    assert plain_off["extra_body"]["lookup"] == "off"
    assert "tools" not in prompt_only and prompt_only["extra_body"]["lookup"] == "off"
    ours = plan([{"role": "user", "content": "Why?"}], TOOLS, "auto", True, hermes=False,
                text_format=None).messages
    assert prompt_only["messages"] == ours and ours[0]["role"] == "system"


@pytest.mark.parametrize("label", ["agent_plain_nolookup", "agent_tools_nolookup"])
def test_agent_arms_send_a_turn_before_with_the_same_system_part(label):
    client = Client()
    assert arm_request(client, "p", "Why?", arm(label), 128) == "answer"
    prime, measured = client.sent
    assert prime["messages"] == [{"role": "user", "content": PRIME}] and prime["max_tokens"] == 2
    assert measured["messages"] == [{"role": "user", "content": "Why?"}]
    assert measured["max_tokens"] == 128
    assert prime["extra_body"] == measured["extra_body"] == {
        "method": "duo", "cache_prompt": True, "lookup": "off"}
    assert prime.get("tools") == measured.get("tools") == (
        TOOLS if label.startswith("agent_tools") else None)


def test_the_summary_divides_the_arms_as_named():
    def rows(n, ms, ttft, rounds):
        return [{"n": n, "ms": ms, "ttft_ms": ttft, "prompt": 50, "cache_n": 0,
                 "rounds": rounds}]
    out = summary({"plain": rows(101, 2100, 100, 20), "tools": rows(101, 2600, 600, 20),
                   "tools_nolookup": rows(50, 1000, 0, 10),
                   "prompt_only_nolookup": rows(50, 800, 0, 10),
                   "plain_nolookup": rows(50, 500, 0, 10),
                   "agent_plain_nolookup": rows(11, 1000, 0, 5),
                   "agent_tools_nolookup": rows(11, 1100, 100, 5)})
    assert out["plain"]["decode_tokens_per_s"] == pytest.approx(50.0)
    assert out["ratio"] == pytest.approx(2100 / 2600)
    assert out["decode_ratio"] == pytest.approx(1.0)
    assert out["grammar_ratio"] == pytest.approx(0.8)
    assert out["nolookup_ratio"] == pytest.approx(0.5)
    assert out["agent_ratio"] == pytest.approx(1 / 1.1)
    assert out["agent_decode_ratio"] == pytest.approx(1.0)
    assert out["tools"]["tokens_per_round"] == pytest.approx(101 / 20)
