"""Measure the API as a client sees it: TTFT of each turn of a 5-turn chat with and without the
prompt cache, tokens/s through the API against the CLI (scripts/generate.py) on the same
prompts, 8 clients at once, and 16 clients asking again and again for a few minutes. Starts
`app/main.py --no-ui` itself; writes DIR/api.json.

    python scripts/api_bench.py --out bench/out/api [--pair smol-self] [--port 7870]
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

import httpx
import openai

ROOT = Path(__file__).resolve().parent.parent
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
    args = p.parse_args()
    lines = (ROOT / "bench" / "prompts.jsonl").read_text().splitlines()
    prompts = [json.loads(line)["turns"][0] for line in lines[::4]]
    server = start_server(args.pair, args.port)
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{args.port}/v1", api_key="-",
                           max_retries=0, timeout=600)
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
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "api.json").write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "ttft"}, indent=1))  # the bulky part


if __name__ == "__main__":
    main()
