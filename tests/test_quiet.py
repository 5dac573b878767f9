"""A quiet start: loading the real smol-self pair and generating print nothing of the
libraries' own on stderr (llama.cpp's log lines, transformers' progress bars); those lines go
to logging at debug level, and the draft's window stays within its trained window. The
target is cut to 4 of its 30 layers (tests/cut_target.py: the same loading code and
libraries; the 30 layers' load and forwards cost about 1.5 CPU s more)."""
from __future__ import annotations

import logging

from core.engine import GenConfig

NOISE = ("llama_", "n_ctx", "Loading weights", "ggml", "%|")


def test_a_quiet_start_within_the_draft_s_trained_window(pair_with, capfd, caplog):
    caplog.set_level(logging.DEBUG, logger="duo.llama")
    from tests.cut_target import load_cut

    pair = load_cut(pair_with)
    ids = pair.prompt_ids("Hello")
    for method in ("vanilla", "duo"):
        list(pair.generate(ids, GenConfig(method=method, max_new_tokens=4, gamma=2)))
    err = capfd.readouterr().err
    assert not [n for n in NOISE if n in err], err
    assert any(r.name == "duo.llama" for r in caplog.records)  # routed, not lost
    trained = pair.drafter.model.n_ctx_train()
    assert pair.target.n_ctx == trained  # smol-self: both trained at 8192
    assert pair.drafter.n_ctx == trained  # asked for the target's window + 64


def test_torchao_s_import_notes_are_dropped_and_nothing_else(caplog):
    """torchao's optional kernels that cannot load, its missing Triton and torch's pytree
    deprecation (models/quiet.py, QUIET) say nothing the user can act on; any other record
    of those loggers, a warning or an error, still goes out."""
    from models.quiet import QUIET, quiet_imports

    quiet_imports()
    caplog.set_level(logging.WARNING)
    for name, texts in QUIET.items():
        for text in texts:
            logging.getLogger(name).warning("%s /x/_C_mxfp8.so: Could not load", text)
        logging.getLogger(name).warning("a warning of %s the user must see", name)
    said = [r.getMessage() for r in caplog.records]
    assert said == [f"a warning of {name} the user must see" for name in QUIET], said


def test_the_gguf_conversion_draws_no_bar_of_its_own():
    """transformers' GGUF conversion loops through tqdm; while we convert it is a plain loop
    (our progress line says the same), and transformers' own tqdm is back after."""
    import transformers.modeling_gguf_pytorch_utils as gguf_utils

    from models.pairs.convert import _no_bar

    bar, items = gguf_utils.tqdm, [1, 2, 3]
    with _no_bar():
        assert gguf_utils.tqdm(items, desc="Converting") is items
    assert gguf_utils.tqdm is bar
