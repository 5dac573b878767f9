"""scripts/gpu_report.py keeps working on a CPU: its tiny mode runs the env, forward and
memory parts in seconds, merges them into report.json and renders report.md; a random-weight
GGUF loads in llama.cpp; a failing part is recorded and the others still run."""
from __future__ import annotations

import json
import sys

import pytest

import scripts.gpu_report as report
from measure.gguf_random import decode_s, per_layer, quantize_q8, write_random_gguf
from measure.gpu_bench import LLAMA_8B, TINY, read_bytes
from scripts.gpu_report_md import render


@pytest.fixture(scope="module")
def tiny_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu")
    report.main(["--part", "env,forward", "--tiny", "--quants", "none", "--out", str(out)])
    report.main(["--part", "memory", "--tiny", "--quants", "none", "--out", str(out)])
    return out


def test_parts_merge_into_one_report(tiny_report):
    r = json.loads((tiny_report / "report.json").read_text())
    assert {"env", "forward", "memory"} <= set(r)  # the second call kept the first's parts
    assert r["env"]["tiny"] is True and r["env"]["torch"]
    fwd = r["forward"]
    assert fwd["copy_bandwidth_gbs"] > 0
    row = fwd["models"]["tiny"]["none"]
    for path in ("eager", "static"):
        assert set(row[path]["ms"]) == {"1@16", "8@16", "1@64", "8@64"}
        assert all(v > 0 for v in row[path]["ms"].values())
    assert row["floor_ms"]["64"] > row["floor_ms"]["16"] > 0  # the filled KV adds bytes
    assert r["memory"]["precisions"]["none"]["estimate_gib"] > 0


def test_report_md_has_its_sections(tiny_report):
    md = (tiny_report / "report.md").read_text()
    for head in ("## Environment", "## Forward time", "### tiny", "## Peak memory", "## Goals"):
        assert head in md
    assert "| none | eager |" in md and "| none (float32) | floor |" in md


def test_a_failing_part_is_recorded(tmp_path, monkeypatch):
    monkeypatch.setattr(report, "part_env", lambda s, out: 1 / 0)
    report.main(["--part", "env", "--tiny", "--out", str(tmp_path)])
    r = json.loads((tmp_path / "report.json").read_text())
    assert "ZeroDivisionError" in r["env"]["error"]
    assert "Failed: `ZeroDivisionError" in (tmp_path / "report.md").read_text()


def test_unknown_part_is_refused():
    with pytest.raises(SystemExit):
        report.parse(["--part", "nope"])


def test_the_8b_floor_is_about_16_gb_in_bf16():
    gb = read_bytes(LLAMA_8B, "none", 1024) / 1e9  # 8.0B parameters less the embedding
    assert 14.5 < gb < 15.5
    assert read_bytes(LLAMA_8B, "int4", 1024) < read_bytes(LLAMA_8B, "int8", 1024) < gb * 1e9


def test_random_gguf_decodes_in_llama_cpp(tmp_path):
    f16 = write_random_gguf(tmp_path / "t.gguf", TINY, 1)
    q8 = quantize_q8(f16, tmp_path / "t-q8.gguf")
    assert q8.stat().st_size < f16.stat().st_size
    assert decode_s(f16, gpu=False, n_tokens=4, context=8, threads=1) > 0


def test_layer_projection_is_linear():
    assert per_layer({2: 3.0, 6: 7.0}, 32) == pytest.approx(33.0)


def test_projection_renders_from_measured_costs():
    fwd = {"lengths": [16, 64], "chunks": [1, 8], "copy_bandwidth_gbs": 1.0,
           "models": {"tiny": {"none": {"dtype": "float32", "floor_ms": {"16": 1, "64": 1},
                                         "compiled": {"ms": {"1@16": 10, "8@16": 12,
                                                             "1@64": 10, "8@64": 12}}}}}}
    md = render({"forward": fwd, "llamacpp": {"draft_cpu_ms": {"threads": 8, "ms": 1.0}}})
    assert "Projected `duo`" in md and "| tiny none | 0.9 |" in md
    assert "up to 12.00x its memory floor" in md


def test_the_lookup_part_runs_duo_with_and_without_lookup_drafts(tmp_path, pair_with,
                                                                 monkeypatch):
    """--part lookup, tiny: one copy-heavy prompt, duo and duo-nolookup; the line and the
    table in report.md. The command line the report gives scripts/benchmark.py runs through
    its `main` here (the benchmark's process loaded smol-self again: about 12 CPU seconds;
    the process is not what this checks), on smol-self with its target cut to 4 layers
    (tests/cut_target.py: the report's rows are the subject, not what the 30 layers say;
    about 5 CPU seconds less, most of it the 417-token prompt's prefills)."""
    import subprocess

    import models.loader
    from scripts import benchmark
    from tests.cut_target import load_cut

    cut = load_cut(pair_with)

    def load(name, options):
        assert name == "smol-self" and options.target_compile == "off"
        return cut

    def bench_here(cmd, **kwargs):
        if not (cmd[0] == sys.executable and str(cmd[1]).endswith("scripts/benchmark.py")):
            return run(cmd, **kwargs)  # any other command runs as it would
        benchmark.main(cmd[2:])  # an exit (a refused argument) fails the test, with its line
        return subprocess.CompletedProcess(cmd, 0, "", "")
    run = subprocess.run
    monkeypatch.setattr(models.loader, "Pair", load)
    monkeypatch.setattr(report.subprocess, "run", bench_here)
    monkeypatch.setenv("TRANSFORMERS_VERBOSITY", "error")  # what main's quiet_logs sets
    report.main(["--part", "lookup", "--tiny", "--out", str(tmp_path)])
    r = json.loads((tmp_path / "report.json").read_text())["lookup"]
    res = r["smol-self copy-heavy"]
    assert "error" not in res, res.get("error")
    assert set(res["methods"]) == {"duo", "duo-nolookup"}
    assert res["methods"]["duo-nolookup"]["overall"]["lookup"]["won"] == 0
    assert "duo / duo-nolookup" in res["ratios"]
    md = (tmp_path / "report.md").read_text()
    assert "## Lookup rounds" in md and "x duo-nolookup (median per prompt)" in md
    assert "| duo-nolookup |" in md


def test_a_projected_row_is_checked_against_the_known_full_depth_row():
    from measure.gpu_bench import KNOWN

    known = KNOWN["llama8b", "none", "bfloat16"]
    projected = {k: v * 1.1 for k, v in known["ms"].items()}
    fwd = {"lengths": [128, 1024, 4096], "chunks": [1, 8, 32], "copy_bandwidth_gbs": 2832.0,
           "models": {"llama8b": {"none": {
               "dtype": "bfloat16", "floor_ms": {"128": 5.3, "1024": 5.35, "4096": 5.49},
               "known": known, "compiled": {"ms": projected, "layers": 32,
                                            "depths": {"2": {}, "4": {}}}}}}}
    md = render({"forward": fwd})
    assert "| none | compiled (from 2 and 4 layers) |" in md
    assert "projected / the full-depth row measured on NVIDIA H100 80GB HBM3 (2026-11-27): " \
           "1.10-1.10x" in md
