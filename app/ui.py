"""The Gradio page: chat with streaming, controls, speed panel, pictures and the method
comparison. Reads the engine's events and stats through ModelHost; never touches a model."""
from __future__ import annotations

import time
from contextlib import closing
from dataclasses import replace

import gradio as gr

from app import charts
from app.host import ModelHost, pair_choices
from app.view import (SOURCE_COLORS, Settings, Trace, compare_table, final_panel, jsonable,
                      live_panel, placement_line, sizes_line)
from core.engine import METHODS
from models.catalog import PairError, get_pair

ENGINE = "engine"  # one concurrency slot: one generation (or pair load) at a time, others queue
STREAM_EVERY_S = 0.08  # at most this often a streaming update goes to the page
COMPARE = ("vanilla", "sps", "duo")
SPEED_HINT = "*speed statistics appear here while generating*"
CSS = """
#speed table { font-size: 0.9em; }
#status { min-height: 1.5em; }
"""


def text_of(content) -> str:
    """Text of a chat message as gradio hands it over (a string or a list of parts); files
    and other parts are ignored, never opened."""
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        return content.get("text", "") if content.get("type", "text") == "text" else ""
    if isinstance(content, (list, tuple)):
        return "".join(text_of(c) for c in content)
    return ""


def clean_history(history) -> list[dict]:
    out = []
    for m in history or []:
        role = m.get("role") if isinstance(m, dict) else None
        if role in ("user", "assistant", "system"):
            out.append({"role": role, "content": text_of(m.get("content", ""))})
    return out


class Stops:
    """Stop requests per browser session: a running generation of that session ends at its next
    event and the request completes normally (so the page never misses the next click)."""

    def __init__(self):
        self._at: dict[str, float] = {}

    def request(self, session: str) -> None:
        self._at[session] = time.monotonic()

    def since(self, session: str, t0: float) -> bool:
        return self._at.get(session, float("-inf")) >= t0


def _session(request) -> str:
    return getattr(request, "session_hash", None) or "local"


def _compare_prompt(message, history) -> tuple[str, list[dict]]:
    """The typed prompt, or else the last question of the chat (with the turns before it)."""
    message = (message or "").strip()
    if not message and history and history[-1]["role"] == "assistant":
        history = history[:-1]
    if not message and history and history[-1]["role"] == "user":
        message, history = history[-1]["content"], history[:-1]
    return message, history


class App:
    def __init__(self, host: ModelHost, default_pair: str):
        self.host, self.default_pair = host, default_pair
        self.stops = Stops()

    # -- status ------------------------------------------------------------------------
    def status(self) -> str:
        h = self.host
        if h.loading:
            return f"**Loading `{h.loading}`** (the page works; requests wait): {h.progress()}"
        if h.state == "ready":
            err = h.errors and f" · last problem: {list(h.errors.values())[-1]}" or ""
            return f"**Ready** · `{h.name}` loaded in {h.load_s:.1f} s{err}"
        if h.state == "error":
            return f"**No pair loaded**: {h.progress()}"
        return "…"

    def placement(self) -> str:
        h = self.host
        if h.pair is None:
            return "**placement**: (loading)"
        return placement_line(h.pair.describe(), h.name)

    def tick(self):
        busy = self.host.loading is not None or self.host.state == "idle"
        return self.status(), self.placement(), gr.Timer(active=busy)

    # -- chat -----------------------------------------------------------------------------
    def chat(self, request: gr.Request, message, history, pair_name, raw, *settings):
        t0, session = time.monotonic(), _session(request)
        message, history = (message or "").strip(), clean_history(history)
        if not message:
            yield gr.skip(), history, *[gr.skip()] * 6, "Type a prompt first."
            return
        shown = history + [{"role": "user", "content": message},
                           {"role": "assistant", "content": ""}]
        keep = [gr.skip()] * 6
        yield "", shown, *keep, self.status()
        try:
            cfg = Settings(*settings).gen_config()
            for line in self._wait(pair_name):
                yield gr.skip(), gr.skip(), *keep, f"waiting for the model: {line}"
            prompt = message if raw else history + [{"role": "user", "content": message}]
            yield from self._stream(prompt, raw, cfg, pair_name, shown,
                                    lambda: self.stops.since(session, t0))
        except (PairError, ValueError, RuntimeError) as e:
            yield gr.skip(), shown[:-1], *keep, f"**error:** {e}"

    def _wait(self, pair_name):
        yield from self.host.prepare(pair_name)
        yield from self.host.wait_turn()

    def _stream(self, prompt, raw, cfg, pair_name, shown, stopped):
        skip4, last = [gr.skip()] * 4, 0.0
        with self.host.running(pair_name) as pair:
            trace = Trace(pair.decode)
            ids = pair.prompt_ids(prompt, raw=raw)
            with closing(pair.generate(ids, cfg, stop=stopped)) as events:
                for ev in events:  # a stop request ends it with one last event and the stats
                    trace.add(ev)
                    shown[-1]["content"] = trace.text
                    if ev.done or time.perf_counter() - last < STREAM_EVERY_S:
                        continue
                    last = time.perf_counter()
                    yield (gr.skip(), shown, trace.segments(), live_panel(trace, cfg.method),
                           *skip4, f"generating with `{cfg.method}` …")
        yield self._final(trace, cfg.method, shown)

    def _final(self, trace, method, shown):
        stats = trace.stats
        why = stats.get("stop_reason")
        if why == "stopped":
            note = f"stopped after {stats.get('new_tokens', 0)} tokens"
        else:
            note = (f"done: {stats.get('new_tokens', 0)} tokens with `{method}` at "
                    f"{float(stats.get('tokens_per_s', 0)):.1f} tokens/s")
        if not trace.text and why != "stopped":
            shown[-1]["content"] = f"*(no text: the model stopped at once — {why})*"
        return (gr.skip(), shown, trace.segments(), final_panel(stats), jsonable(stats),
                charts.timeline(stats), charts.accept_histogram(stats),
                charts.rate_over_time(trace.points, method), note)

    def stop(self, request: gr.Request):
        self.stops.request(_session(request))
        return "stopping …"

    # -- compare --------------------------------------------------------------------------
    def compare(self, request: gr.Request, message, history, pair_name, raw, *settings):
        t0, session = time.monotonic(), _session(request)
        message, history = _compare_prompt(message, clean_history(history))
        results = {m: {} for m in COMPARE}
        if not message:
            yield "Type a prompt (or chat first) to compare.", "", "", ""
            return
        try:
            cfg = Settings(*settings).gen_config()
            for line in self._wait(pair_name):
                yield f"waiting for the model: {line}", "", "", ""
            prompt = message if raw else history + [{"role": "user", "content": message}]
            yield from self._compare(prompt, raw, cfg, pair_name, results,
                                     lambda: self.stops.since(session, t0))
        except (PairError, ValueError, RuntimeError) as e:
            yield f"**error:** {e}", "", "", ""

    def _compare(self, prompt, raw, base, pair_name, results, stopped):
        greedy, last = base.sampling.greedy, 0.0
        with self.host.running(pair_name) as pair:
            ids = pair.prompt_ids(prompt, raw=raw)
            for method in COMPARE:
                trace = Trace(pair.decode)
                with closing(pair.generate(ids, replace(base, method=method))) as events:
                    for ev in events:
                        trace.add(ev)
                        if stopped():
                            results[method] = {"text": trace.text}
                            yield self._compare_view(results, greedy, "**stopped**")
                            return
                        if time.perf_counter() - last >= STREAM_EVERY_S and not ev.done:
                            last = time.perf_counter()
                            results[method] = {"text": trace.text}
                            yield self._compare_view(results, greedy, f"running `{method}` …")
                results[method] = {"text": trace.text, "ids": trace.ids, "stats": trace.stats}
        yield self._compare_view(results, greedy, "")

    @staticmethod
    def _compare_view(results, greedy, note):
        table = compare_table(results, greedy)
        return ((note + "\n\n" if note else "") + table,
                *(results[m].get("text", "") for m in COMPARE))

    # -- pair switch ----------------------------------------------------------------------
    def switch(self, name):
        raw = gr.skip()
        try:
            raw = not get_pair(name).chat
            for line in self.host.prepare(name):
                yield f"loading `{name}`: {line}", gr.skip(), gr.skip(), raw
            yield self.status(), self.placement(), gr.skip(), raw
        except PairError as e:
            yield f"**error:** {e}", self.placement(), gr.update(value=self.host.name), gr.skip()

    def clear(self, request: gr.Request):
        self.stops.request(_session(request))
        return [], None, SPEED_HINT, None, None, None, None, "cleared"


def build(app: App) -> gr.Blocks:
    ui: dict = {}
    with gr.Blocks(title="DuoDecoding") as demo:
        gr.Markdown("## DuoDecoding — speculative decoding with a CPU draft model")
        ui["status"] = gr.Markdown(app.status(), elem_id="status")
        ui["placement"] = gr.Markdown(app.placement(), elem_id="placement")
        with gr.Row():
            with gr.Column(scale=3):
                ui["chatbot"] = gr.Chatbot(elem_id="chat", height=380, label="chat",
                                           buttons=["copy"], feedback_options=None)
                ui["prompt"] = gr.Textbox(placeholder="Ask something, then Enter or Generate",
                                          show_label=False, elem_id="prompt", lines=2)
                with gr.Row():
                    ui["gen_btn"] = gr.Button("Generate", variant="primary", elem_id="generate")
                    ui["stop_btn"] = gr.Button("Stop", variant="stop", elem_id="stop")
                    ui["clear_btn"] = gr.Button("Clear", elem_id="clear")
                    ui["cmp_btn"] = gr.Button("Compare vanilla / sps / duo", elem_id="compare")
                ui["sources"] = gr.HighlightedText(
                    label="last answer by token source", elem_id="sources",
                    color_map=SOURCE_COLORS, show_legend=True, show_inline_category=False)
            with gr.Column(scale=2):
                ui["speed"] = gr.Markdown(SPEED_HINT, elem_id="speed")
                ui["controls"] = _controls(app)
        with gr.Tabs():
            with gr.Tab("Timeline"):
                ui["timeline"] = gr.Plot(label="draft vs target per round", elem_id="timeline")
            with gr.Tab("Acceptance"):
                ui["hist"] = gr.Plot(label="acceptance length", elem_id="hist")
            with gr.Tab("Tokens/s"):
                ui["rate"] = gr.Plot(label="tokens/s over the generation", elem_id="rate")
        gr.Markdown("### Comparison (same prompt and settings)")
        ui["cmp_md"] = gr.Markdown("*press Compare*", elem_id="compare-table")
        with gr.Row():
            ui["cmp_texts"] = [gr.Textbox(label=m, lines=6, interactive=False,
                                          elem_id=f"cmp-{m}") for m in COMPARE]
        with gr.Accordion("raw stats of the last answer", open=False):
            ui["stats_json"] = gr.JSON(elem_id="stats")
        _wire(app, demo, ui)
    return demo


def _controls(app: App) -> dict:
    c = {}
    with gr.Accordion("controls", open=True):
        choices = pair_choices()
        c["pair"] = gr.Dropdown(choices, value=app.default_pair, label="pair", elem_id="pair")
        c["sizes"] = gr.Markdown(sizes_line(app.default_pair), elem_id="pair-sizes")
        c["method"] = gr.Radio(list(METHODS), value="duo", label="method", elem_id="method")
        c["raw"] = gr.Checkbox(value=not _chat_pair(app.default_pair),
                               label="raw completion (no chat template, no history)")
        c["max_new"] = gr.Slider(1, 1024, value=128, step=1, label="max new tokens",
                                 elem_id="max-new")
        c["temperature"] = gr.Slider(0, 2, value=0, step=0.05, label="temperature (0 = greedy)")
        c["top_p"] = gr.Slider(0.05, 1, value=1, step=0.05, label="top-p")
        c["top_k"] = gr.Slider(0, 200, value=0, step=1, label="top-k (0 = off)")
        c["seed"] = gr.Number(value=0, precision=0, label="seed")
        with gr.Row():
            c["gamma_mode"] = gr.Radio(["auto", "fixed"], value="auto", label="gamma")
            c["gamma"] = gr.Slider(1, 32, value=5, step=1, label="fixed gamma")
        c["multi_seq"] = gr.Checkbox(value=True, label="multi-sequence drafting (duo)")
        c["max_seqs"] = gr.Slider(1, 8, value=4, step=1, label="max sequences")
        c["theta_scale"] = gr.Slider(0.1, 4, value=1.0, step=0.1, label="threshold scale")
    return c


def _chat_pair(name: str) -> bool:
    try:
        return get_pair(name).chat
    except PairError:
        return True


def _wire(app: App, demo: gr.Blocks, ui: dict) -> None:
    c = ui["controls"]
    settings = [c[k] for k in ("method", "max_new", "temperature", "top_p", "top_k", "seed",
                               "gamma_mode", "gamma", "multi_seq", "max_seqs", "theta_scale")]
    inputs = [ui["prompt"], ui["chatbot"], c["pair"], c["raw"], *settings]
    outputs = [ui["prompt"], ui["chatbot"], ui["sources"], ui["speed"], ui["stats_json"],
               ui["timeline"], ui["hist"], ui["rate"], ui["status"]]
    gr.on([ui["prompt"].submit, ui["gen_btn"].click], app.chat, inputs, outputs, api_name="chat",
          concurrency_limit=1, concurrency_id=ENGINE, trigger_mode="always_last",
          show_progress="minimal")
    ui["cmp_btn"].click(app.compare, inputs, [ui["cmp_md"], *ui["cmp_texts"]], api_name="compare",
                        concurrency_limit=1, concurrency_id=ENGINE, show_progress="minimal")
    c["pair"].change(app.switch, [c["pair"]], [ui["status"], ui["placement"], c["pair"], c["raw"]],
                     api_name="switch_pair", concurrency_limit=1, concurrency_id=ENGINE)
    c["pair"].change(sizes_line, [c["pair"]], c["sizes"], queue=False, api_visibility="private")
    ui["stop_btn"].click(app.stop, None, ui["status"], queue=False, api_name="stop")
    ui["clear_btn"].click(app.clear, None, outputs[1:], queue=False, api_name="clear")
    timer = gr.Timer(0.5)
    timer.tick(app.tick, None, [ui["status"], ui["placement"], timer], show_progress="hidden",
               api_name="status", concurrency_limit=None)
    demo.load(app.tick, None, [ui["status"], ui["placement"], timer], show_progress="hidden",
              api_visibility="private")
