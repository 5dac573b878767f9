"""The Gradio page's layout and wiring: which component sits where and which event calls
which handler of app.ui.App (passed in, never imported)."""
from __future__ import annotations

import gradio as gr

from app.host import pair_choices
from app.view import SOURCE_COLORS, sizes_line
from core.config import LOOKUP_CHOICES
from core.engine import METHODS
from models.pairs.catalog import PairError, get_pair

ENGINE = "engine"  # one concurrency slot: one generation (or pair load) at a time, others queue
COMPARE = ("vanilla", "sps", "duo")
SPEED_HINT = "*speed statistics appear here while generating*"
OUTPUTS = ("prompt", "chatbot", "sources", "speed", "stats_json", "timeline", "hist", "rate",
           "status", "meter")  # what a chat answer updates, in this order
CSS = """
#speed table { font-size: 0.9em; }
#status { min-height: 1.5em; }
#context { font-size: 0.85em; opacity: 0.8; }
"""


def build(app) -> gr.Blocks:
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
                    ui["regen_btn"] = gr.Button("Regenerate", elem_id="regenerate")
                    ui["clear_btn"] = gr.Button("Clear", elem_id="clear")
                    ui["cmp_btn"] = gr.Button("Compare vanilla / sps / duo", elem_id="compare")
                with gr.Row():
                    ui["meter"] = gr.Markdown(app.meter([]), elem_id="context")
                    ui["export_json"] = gr.DownloadButton("Export JSON", size="sm",
                                                          elem_id="export-json")
                    ui["export_md"] = gr.DownloadButton("Export Markdown", size="sm",
                                                        elem_id="export-md")
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


def _controls(app) -> dict:
    c = {}
    with gr.Accordion("controls", open=True):
        choices = pair_choices()
        c["pair"] = gr.Dropdown(choices, value=app.default_pair, label="pair", elem_id="pair")
        c["sizes"] = gr.Markdown(sizes_line(app.default_pair), elem_id="pair-sizes")
        c["method"] = gr.Radio(list(METHODS), value="duo", label="method", elem_id="method")
        c["raw"] = gr.Checkbox(value=not _chat_pair(app.default_pair),
                               label="raw completion (no chat template, no history)")
        c["system"] = gr.Textbox(label="system prompt (sent first; not in raw mode)", lines=2,
                                 placeholder="e.g. You are a concise assistant.", elem_id="system")
        c["max_new"] = gr.Slider(1, 1024, value=128, step=1, label="max new tokens",
                                 elem_id="max-new")
        c["temperature"] = gr.Slider(0, 2, value=0, step=0.05, label="temperature (0 = greedy)",
                                  elem_id="temperature")
        c["top_p"] = gr.Slider(0.05, 1, value=1, step=0.05, label="top-p")
        c["top_k"] = gr.Slider(0, 200, value=0, step=1, label="top-k (0 = off)")
        c["seed"] = gr.Number(value=-1, precision=0, label="seed (-1 = random)", elem_id="seed")
        with gr.Row():
            c["gamma_mode"] = gr.Radio(["auto", "fixed"], value="auto", label="gamma")
            c["gamma"] = gr.Slider(1, 32, value=5, step=1, label="fixed gamma")
        c["multi_seq"] = gr.Checkbox(value=True, label="multi-sequence drafting (duo)")
        c["max_seqs"] = gr.Slider(1, 8, value=4, step=1, label="max sequences")
        c["theta_scale"] = gr.Slider(0.1, 4, value=1.0, step=0.1, label="threshold scale")
        c["predraft"] = gr.Checkbox(value=True, label="pre-draft rejection outcomes (duo)")
        c["lookup"] = gr.Radio(list(LOOKUP_CHOICES), value="auto", elem_id="lookup",
                               label="lookup drafts: text copied from the prompt and earlier "
                                     "answers (duo, lookup; auto: the budget picks)")
        c["remeasure"] = gr.Button("Measure this machine again", size="sm", elem_id="remeasure")
    return c


def _chat_pair(name: str) -> bool:
    try:
        return get_pair(name).chat
    except PairError:
        return True


def _wire(app, demo: gr.Blocks, ui: dict) -> None:
    c = ui["controls"]
    settings = [c[k] for k in ("method", "max_new", "temperature", "top_p", "top_k", "seed",
                               "gamma_mode", "gamma", "multi_seq", "max_seqs", "theta_scale",
                               "predraft", "lookup")]
    model = [c["pair"], c["raw"], c["system"], *settings]
    inputs, outputs = [ui["prompt"], ui["chatbot"], *model], [ui[k] for k in OUTPUTS]
    engine = dict(concurrency_limit=1, concurrency_id=ENGINE, show_progress="minimal")
    quiet = dict(queue=False, show_progress="hidden", api_visibility="private")
    export = dict(fn=app.export, inputs=[ui["chatbot"], *model],
                  outputs=[ui["export_json"], ui["export_md"]], **quiet)
    meter = dict(fn=app.meter, inputs=[ui["chatbot"], c["raw"], c["system"]],
                 outputs=ui["meter"], **quiet)
    gr.on([ui["prompt"].submit, ui["gen_btn"].click], app.chat, inputs, outputs, api_name="chat",
          trigger_mode="always_last", **engine).then(**export)
    ui["regen_btn"].click(app.regenerate, inputs[1:], outputs, api_name="regenerate",
                          trigger_mode="always_last", **engine).then(**export)
    ui["cmp_btn"].click(app.compare, inputs, [ui["cmp_md"], *ui["cmp_texts"]], api_name="compare",
                        **engine)
    c["pair"].change(app.switch, [c["pair"]], [ui["status"], ui["placement"], c["pair"], c["raw"]],
                     api_name="switch_pair", concurrency_limit=1,
                     concurrency_id=ENGINE).then(**meter)
    c["pair"].change(sizes_line, [c["pair"]], c["sizes"], queue=False, api_visibility="private")
    gr.on([c["system"].blur, c["system"].submit, c["raw"].input], **meter).then(**export)
    ui["stop_btn"].click(app.stop, None, ui["status"], queue=False, api_name="stop")
    c["remeasure"].click(app.remeasure, [c["pair"]], [ui["status"], ui["placement"]],
                         api_name="remeasure", concurrency_limit=1, concurrency_id=ENGINE)
    ui["clear_btn"].click(app.clear, [c["raw"], c["system"]], outputs[1:], queue=False,
                          api_name="clear").then(**export)
    timer = gr.Timer(0.5)
    timer.tick(app.tick, None, [ui["status"], ui["placement"], timer], show_progress="hidden",
               api_name="status", concurrency_limit=None)
    timer.tick(app.meter_when_loaded, meter["inputs"], ui["meter"], **quiet)
    demo.load(app.tick, None, [ui["status"], ui["placement"], timer], show_progress="hidden",
              api_visibility="private")
