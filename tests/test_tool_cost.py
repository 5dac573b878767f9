"""What an agent loop's speed rests on, without a model: our tool prompt is a stable prefix of
every request that sends the same tools, so the prompt cache keeps it."""
from __future__ import annotations

import pytest

from app.tool_prompt import plan

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                    "unit": {"enum": ["C", "F"]}},
                   "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search", "description": "Search the web",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}},
                       "required": ["query"]}}}]

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
