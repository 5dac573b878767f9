"""Measure the API as a client sees it: TTFT of each turn of a 5-turn chat with and without the
prompt cache, tokens/s through the API against the CLI (scripts/generate.py) on the same
prompts, 8 clients at once, and 16 clients asking again and again for a few minutes. Starts `app/main.py --no-ui` itself; writes DIR/api.json.
With --tools, only the tool grammar's cost instead: duo with and without `tools` on every
project prompt, with the tools' prompt alone, and as an agent loop's next request (the prompt
cache holding the system part), interleaved, writing DIR/api_tools.json (docs/agents.md).

    python scripts/api_bench.py --out bench/out/api [--pair smol-self] [--port 7870]
    python scripts/api_bench.py --tools --out bench/out/api [--runs 1] [--limit N]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

import httpx
import openai

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from app.tool_prompt import plan  # noqa: E402 - the tool prompt of `prompt_only`
TURNS = ["Tell me about the history of Paris in a few sentences.",
         "What are three famous museums there?", "Which one should I visit first, and why?",
         "How do I get there from the Eiffel Tower?", "Summarise our conversation."]


def start_server(pair: str, port: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, str(ROOT / "app" / "main.py"), "--no-ui",
                             "--pair", pair, "--port", str(port)],
                            stderr=subprocess.DEVNULL, env=os.environ.copy())
    url = f"http://127.0.0.1:{port}/v1/models"
    for _ in range(1200):
        try:
            if httpx.get(url, timeout=1).json()["data"]:
                return proc
        except (httpx.HTTPError, ValueError, KeyError):
            pass
        time.sleep(0.5)
    proc.kill()
    raise SystemExit("the server did not come up")


def stream_chat(client, pair, messages, **kw) -> tuple[str, float, dict]:
    """(text, client-side time to the first text, server timings)"""
    t0, first, text, timings = time.perf_counter(), None, [], {}
    for c in client.chat.completions.create(model=pair, messages=messages, stream=True,
                                            stream_options={"include_usage": True},
                                            temperature=0, **kw):
        delta = c.choices[0].delta.content if c.choices else None
        if delta and first is None:
            first = time.perf_counter() - t0
        text.append(delta or "")
        timings = (c.model_extra or {}).get("timings") or timings  # the last, usage chunk
    return "".join(text), first or 0.0, timings


def chat_ttft(client, pair, cache: bool, max_tokens: int) -> list[dict]:
    messages, out = [], []
    for turn in TURNS:
        messages.append({"role": "user", "content": turn})
        text, ttft, t = stream_chat(client, pair, messages, max_tokens=max_tokens,
                                    extra_body={"method": "duo", "cache_prompt": cache})
        messages.append({"role": "assistant", "content": text})
        out.append({"client_ttft_s": ttft, "server_ttft_ms": t.get("ttft_ms"),
                    "prompt_n": t.get("prompt_n"), "cache_n": t.get("cache_n")})
    return out


def api_vs_cli(client, pair, prompts, method: str, max_tokens: int) -> list[dict]:
    rows = []
    for p in prompts:
        t0 = time.perf_counter()
        r = client.chat.completions.create(model=pair, messages=[{"role": "user", "content": p}],
                                           temperature=0, max_tokens=max_tokens,
                                           extra_body={"method": method, "cache_prompt": False})
        wall = time.perf_counter() - t0
        cli = subprocess.run([sys.executable, str(ROOT / "scripts" / "generate.py"), "--pair",
                              pair, "--method", method, "--prompt", p, "--max-new-tokens",
                              str(max_tokens), "--json"], capture_output=True, text=True)
        stats = json.loads(cli.stdout)["stats"]
        rows.append({"api_tokens_per_s": r.model_extra["timings"]["predicted_per_second"],
                     "api_client_tokens_per_s": r.usage.completion_tokens / wall,
                     "cli_tokens_per_s": stats["tokens_per_s"],
                     "same_text": r.choices[0].message.content == json.loads(cli.stdout)["text"]})
    return rows


def concurrent(client, pair, prompts, n: int, max_tokens: int) -> dict:
    def ask(p):
        t0 = time.perf_counter()
        r = client.chat.completions.create(model=pair, messages=[{"role": "user", "content": p}],
                                           temperature=0, max_tokens=max_tokens)
        return r.choices[0].message.content, time.perf_counter() - t0
    alone = [ask(p)[0] for p in prompts[:n]]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(n) as pool:
        results = list(pool.map(ask, prompts[:n]))
    lat = sorted(s for _, s in results)
    return {"clients": n, "completed": len(results), "wall_s": time.perf_counter() - t0,
            "latency_min_s": lat[0], "latency_median_s": statistics.median(lat),
            "latency_max_s": lat[-1], "same_as_alone": sum(a == t for a, (t, _) in
                                                             zip(alone, results))}


TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                    "unit": {"enum": ["C", "F"]}},
                   "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search", "description": "Search the web",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}},
                       "required": ["query"]}}}]


PRIME = "Hello."  # the agent arms' turn before: the same system part, another question


class Arm(NamedTuple):
    label: str
    tools: bool  # `tools` sent (the grammar)
    prompt_only: bool  # our tool prompt's system part as a system message, no `tools`
    lookup: str  # "auto" or "off"
    agent: bool  # an agent loop's next request (prompt cache on, primed), else cold


ARMS = (Arm("plain", False, False, "auto", False), Arm("tools", True, False, "auto", False),
        Arm("tools_nolookup", True, False, "off", False),
        Arm("prompt_only_nolookup", False, True, "off", False),
        Arm("plain_nolookup", False, False, "off", False),
        Arm("agent_plain_nolookup", False, False, "off", True),
        Arm("agent_tools_nolookup", True, False, "off", True))


def ask(client, pair, messages, tools: bool, max_tokens: int, body: dict):
    return client.chat.completions.create(
        model=pair, messages=messages, temperature=0, max_tokens=max_tokens,
        extra_body={"method": "duo", **body}, **({"tools": TOOLS} if tools else {}))


def arm_request(client, pair, prompt: str, arm: Arm, max_tokens: int):
    """One measured answer of `arm`. An agent arm is an agent loop's next request: the turn
    before (PRIME, 2 tokens, unmeasured) had the same system part, and the prompt cache keeps
    it in the target's and the draft's KV, as a client sending the same tools each step
    sees; every other arm prefills its whole prompt (cache_prompt off). `_nolookup` arms
    turn the lookup off (it remembers the earlier arms' answers to the same prompt)."""
    def messages(turn):
        if not arm.prompt_only:
            return turn
        return plan(turn, TOOLS, "auto", True, hermes=False, text_format=None).messages
    body = {"cache_prompt": arm.agent, **({"lookup": "off"} if arm.lookup == "off" else {})}
    if arm.agent:
        ask(client, pair, messages([{"role": "user", "content": PRIME}]), arm.tools, 2, body)
    return ask(client, pair, messages([{"role": "user", "content": prompt}]), arm.tools,
               max_tokens, body)


def tool_cost(client, pair, prompts, max_tokens: int, runs: int) -> dict:
    """duo with `tools` (tool_choice auto: the grammar allows text or calls) against duo
    without, each prompt in turn, interleaved; tokens/s over all answers, whole (prompt
    included: the tools make the prompt longer) and decoding only (after the first token).
    To tell the grammar's cost from the longer prompt's, two more arms send the tools' prompt
    with tools and without (`prompt_only`: our tool prompt's system part as a system
    message, no grammar; a pair whose template has no tool syntax, as the default's), both
    with the lookup off (`_nolookup`: the server's lookup remembers earlier answers, so the
    second of two identical answers would be drafted whole): `grammar_ratio` is the one
    against the other, and `same_text` counts the answers both wrote alike (greedy: every
    text answer, the grammar being released after its start). `plain` and `tools` prefill
    every prompt whole (a cold request); `agent_*` are an agent loop's next request, whose
    system part the prompt cache kept (`agent_ratio`; lookup off, as their answers repeat
    the cold arms': the cold ratio alike is `nolookup_ratio`)."""
    rows: dict = {arm.label: [] for arm in ARMS}
    same = 0
    for _ in range(runs):
        for p in prompts:
            texts = {}
            for arm in ARMS:
                r = arm_request(client, pair, p, arm, max_tokens)
                t, message = r.model_extra["timings"], r.choices[0].message
                texts[arm.label] = message.content
                rows[arm.label].append({
                    "n": t["predicted_n"], "ms": t["predicted_ms"], "ttft_ms": t["ttft_ms"],
                    "prompt": r.usage.prompt_tokens, "cache_n": t["cache_n"],
                    "rounds": t["rounds"], "calls": len(message.tool_calls or [])})
            same += texts["tools_nolookup"] == texts["prompt_only_nolookup"]
    return {**summary(rows), "same_text": same,
            "answers_with_calls": sum(r["calls"] > 0 for r in rows["tools"]),
            "answers": rows, "goal": "ratio >= 0.85"}


def summary(rows: dict) -> dict:
    """Each arm's tokens/s (whole and after the first token), mean prompt and cached tokens,
    time to the first token and tokens per round (the rounds count the two prefills); the
    ratios of the arms."""
    def speed(label, decode):
        rs = rows[label]
        n = sum(r["n"] - decode for r in rs)
        return n * 1e3 / sum(r["ms"] - (r["ttft_ms"] if decode else 0) for r in rs)
    out = {k: {"tokens_per_s": speed(k, 0), "decode_tokens_per_s": speed(k, 1),
               "prompt_tokens": statistics.mean(r["prompt"] for r in v),
               "cached_tokens": statistics.mean(r["cache_n"] for r in v),
               "ttft_ms": statistics.mean(r["ttft_ms"] for r in v),
               "tokens_per_round": sum(r["n"] for r in v) / max(1, sum(r["rounds"] for r in v))}
           for k, v in rows.items()}

    def ratio(a, b, key="tokens_per_s"):
        return out[a][key] / out[b][key]
    return {**out, "ratio": ratio("tools", "plain"),
            "decode_ratio": ratio("tools", "plain", "decode_tokens_per_s"),
            "grammar_ratio": ratio("tools_nolookup", "prompt_only_nolookup"),
            "nolookup_ratio": ratio("tools_nolookup", "plain_nolookup"),
            "agent_ratio": ratio("agent_tools_nolookup", "agent_plain_nolookup"),
            "agent_decode_ratio": ratio("agent_tools_nolookup", "agent_plain_nolookup",
                                        "decode_tokens_per_s")}


def load(port: int, pair: str, clients: int, minutes: float) -> dict:
    """`clients` threads ask their own question again and again for `minutes`: every answer
    must be 200 with the text that question got alone, or a 429."""
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    qs = [f"What is {i} times {i + 1}?" for i in range(clients)]

    def ask(q):
        body = {"model": pair, "max_tokens": 16, "temperature": 0,
                "messages": [{"role": "user", "content": q}]}
        r = httpx.post(url, json=body, timeout=600)
        return r.status_code, r.json()
    alone = {q: ask(q)[1]["choices"][0]["message"]["content"] for q in qs}
    end = time.monotonic() + minutes * 60

    def client(q):
        counts = {"ok": 0, "refused": 0, "other": 0, "mixed_up": 0}
        while time.monotonic() < end:
            code, body = ask(q)
            if code == 200:
                counts["ok"] += 1
                counts["mixed_up"] += body["choices"][0]["message"]["content"] != alone[q]
            elif code == 429:
                counts["refused"] += 1
                time.sleep(0.5)
            else:
                counts["other"] += 1
        return counts
    with ThreadPoolExecutor(clients) as pool:
        per = list(pool.map(client, qs))
    return {"clients": clients, "minutes": minutes,
            **{k: sum(c[k] for c in per) for k in per[0]}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--pair", default="smol-self")
    p.add_argument("--port", type=int, default=7870)
    p.add_argument("--out", required=True)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--load-minutes", type=float, default=3.0)
    p.add_argument("--tools", action="store_true",
                   help="only the tool grammar's cost (duo with tools vs without)")
    p.add_argument("--runs", type=int, default=1, help="--tools: passes over the prompts")
    p.add_argument("--limit", type=int, default=0, help="--tools: the first N prompts only")
    args = p.parse_args()
    lines = (ROOT / "bench" / "prompts.jsonl").read_text().splitlines()
    prompts = [json.loads(line)["turns"][0] for line in lines[::1 if args.tools else 4]]
    server = start_server(args.pair, args.port)
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{args.port}/v1", api_key="-",
                           max_retries=0, timeout=600)
    if args.tools:
        try:
            result = tool_cost(client, args.pair, prompts[:args.limit or None], 128, args.runs)
        finally:
            server.terminate()
        return write(args.out, "api_tools.json", result, "answers")
    try:
        ttft = {"cache": [], "no_cache": []}
        for _ in range(args.reps):  # interleaved
            for label, cache in (("cache", True), ("no_cache", False)):
                ttft[label].append(chat_ttft(client, args.pair, cache, 48))
        result = {"ttft": ttft, "turn2_client_ttft_median_s": {
            k: statistics.median(run[1]["client_ttft_s"] for run in v) for k, v in ttft.items()}}
        result["api_vs_cli"] = {m: api_vs_cli(client, args.pair, prompts, m, 128)
                                for m in ("vanilla", "duo")}
        result["concurrent"] = concurrent(client, args.pair, prompts + TURNS, 8, 64)
        result["load"] = load(args.port, args.pair, 16, args.load_minutes)
    finally:
        server.terminate()
    write(args.out, "api.json", result, "ttft")


def write(folder: str, name: str, result: dict, bulky: str) -> None:
    """The result as JSON in `folder`, and printed without its `bulky` part."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    (out / name).write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != bulky}, indent=1))


if __name__ == "__main__":
    main()
