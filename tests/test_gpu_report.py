"""scripts/gpu_report.py keeps working on a CPU: its tiny mode runs the env and forward
parts in seconds, merges them into report.json and renders report.md; a failing part
is recorded and the others still run."""
from __future__ import annotations

import json

import pytest

import scripts.gpu_report as report
from measure.gpu_bench import LLAMA_8B, TINY, per_layer, read_bytes
from scripts.gpu_report_md import render


@pytest.fixture(scope="module")
def tiny_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu")
    report.main(["--part", "env", "--tiny", "--quants", "none", "--out", str(out)])
    report.main(["--part", "forward", "--tiny", "--quants", "none", "--out", str(out)])
    return out


def test_parts_merge_into_one_report(tiny_report):
    r = json.loads((tiny_report / "report.json").read_text())
    assert {"env", "forward"} <= set(r)  # the second call kept the first's parts
    assert r["env"]["tiny"] is True and r["env"]["torch"]
    fwd = r["forward"]
    assert fwd["copy_bandwidth_gbs"] > 0
    row = fwd["models"]["tiny"]["none"]
    for path in ("eager", "static"):
        assert set(row[path]["ms"]) == {"1@16", "8@16", "1@64", "8@64"}
        assert all(v > 0 for v in row[path]["ms"].values())
    assert row["floor_ms"]["64"] > row["floor_ms"]["16"] > 0  # the filled KV adds bytes


def test_report_md_has_its_sections(tiny_report):
    md = (tiny_report / "report.md").read_text()
    for head in ("## Environment", "## Forward time", "### tiny"):
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


def test_layer_projection_is_linear():
    assert per_layer({2: 3.0, 6: 7.0}, 32) == pytest.approx(33.0)


def test_the_floor_line_says_how_far_the_compiled_forward_is_from_it():
    fwd = {"lengths": [16, 64], "chunks": [1, 8], "copy_bandwidth_gbs": 1.0,
           "models": {"tiny": {"none": {"dtype": "float32", "floor_ms": {"16": 1, "64": 1},
                                         "compiled": {"ms": {"1@16": 10, "8@16": 12,
                                                             "1@64": 10, "8@64": 12}}}}}}
    assert "up to 12.00x its memory floor" in render({"forward": fwd})


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
