"""A suite pair's target cut to its first few layers (its real weights, tokenizer and config
otherwise), built once into the suite's cache: for tests whose subject (a path equal to the
eager one on the same weights, a window's or a thread's bookkeeping) no layer count changes."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

# smol-self: 4 of its 30 (Llama layers, all alike); gemma-smol's sliding-window case loads
# its first layers in place (tests/test_target_static.py: no folder written)
LAYERS = {"smol-self": 4}


def source(name: str) -> Path:
    """The pair's converted target folder (the suite's controller converted it)."""
    from models.pairs.catalog import get_pair, target_source
    from models.pairs.convert import converted_dir

    return converted_dir(target_source(get_pair(name))[1])


def cut_target(name: str = "smol-self") -> Path:
    """<the suite's cache>/cut/<the converted folder>-<layers>l: config.json with the first
    LAYERS[name] layers (`num_hidden_layers`, `layer_types`), the weights of the embeddings,
    the final norm and those layers, and the tokenizer's files. Written to a folder of this
    process's own, then renamed into place (two workers may build it at once)."""
    from safetensors.torch import load_file, save_file

    from models.pairs.convert import cache_root

    layers, full = LAYERS[name], source(name)
    folder = Path(os.environ.get("DUO_SUITE_CACHE") or cache_root()) / "cut" / \
        f"{full.name}-{layers}l"
    if (folder / "model.safetensors").exists():
        return folder
    tmp = folder.with_name(f"{folder.name}.{os.getpid()}.tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    for f in full.iterdir():
        if f.name not in ("model.safetensors", "config.json"):
            shutil.copy(f, tmp / f.name)
    config = json.loads((full / "config.json").read_text())
    config["num_hidden_layers"] = layers
    if "layer_types" in config:
        config["layer_types"] = config["layer_types"][:layers]
    (tmp / "config.json").write_text(json.dumps(config, indent=2))
    save_file({k: v for k, v in load_file(full / "model.safetensors").items()
               if not k.startswith("model.layers.") or int(k.split(".")[2]) < layers},
              tmp / "model.safetensors", metadata={"format": "pt"})
    try:
        tmp.rename(folder)
    except OSError:  # another worker's copy landed first
        shutil.rmtree(tmp)
    return folder


def use_cut(monkeypatch) -> Path:
    """smol-self's loads through `monkeypatch` (until it undoes) get its cut target's folder."""
    import models.loader as loader

    folder = cut_target("smol-self")
    monkeypatch.setattr(loader, "converted_dir", lambda *a, **k: folder)
    return folder


def load_cut(pair_with, **options):
    """tests/conftest.py's `pair_with` load of smol-self with its target cut (the pair's
    draft, tokenizer and budget profile as they are)."""
    import pytest

    with pytest.MonkeyPatch.context() as mp:
        folder = use_cut(mp)
        pair = pair_with(**options)
    assert pair.target_dir == folder
    return pair
