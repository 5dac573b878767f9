"""The suite's budget profiles: fixed ones for its real pairs, kept in a cache folder of the
suite's own (the user's timed profiles are never read or overwritten)."""
from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

# Timing a profile (32 verify sizes and 4 draft steps, 4 rounds) took 26-34 CPU seconds for
# smol-self and 55-70 for gemma-smol (262144 logits a row) per thread split; a fresh run timed
# each split in each worker, again in every CLI and app process that found the machine
# quieter than when the profile was stored. No test
# reads a profile's times for a verdict: the budget's choices only pick among lossless
# rounds, and the profiler is tested on fakes (test_remeasure.py, test_loader.py) and on the
# real pair (a whole profile in test_context.py, small ones in test_target_static.py), which
# stay timed. Each pair gets one plausible 2-core profile: target forward of 1 and 32 tokens,
# draft s/token (bench/results/2026-11-24-cpu-span: 57 ms for 1 token, 80 for 8, the draft 6.4 ms/token;
# gemma-smol's head is 262144 wide).
FIXED = {"smol-self": (0.060, 0.160, 0.0065), "gemma-smol": (0.100, 0.400, 0.0065)}
# the draft's prompt prefill timed (models/draft/prefill.py): its Q8_0 copy twice as fast as the
# Q4_1 file, as on the suite's 2-core machines (docs/draft.md: 700 tokens in 1.4 s against
# 2.8), so `auto` takes the copy there, as a user's run does
PREFILL = {"own": 2.0, "copy": 1.0}
# the draft's attention kernels timed alike (models/draft/attention.py): `auto` keeps llama.cpp's
# flash attention, so the drafts the tests count are the ones every earlier run counted; the
# plain kernel has tests of its own (test_draft_attention.py)
ATTENTION = {"flash": 0.02, "plain": 0.02}
# the draft's s/token per thread count (models/fit/profiler.py pick_draft_threads): one thread
# the fastest, so the suite's drafts keep one thread (two xdist workers share the cores)
THREADS_S = 0.02
SHARED = ("converted", "quantized", "drafts", "vocab", "inductor")  # with the user's cache


def fixed_profile(pair_name: str, target_threads: int = 1) -> dict:
    """The pair's fixed profile; its target's forwards 0.6x as long on 2 threads or more."""
    from core.budget import MAX_VERIFY, Profile
    from models.fit.profiler import MAX_SEQS

    one, top, draft = FIXED[pair_name]
    scale = 1.0 if target_threads < 2 else 0.6
    verify = [scale * (one + (top - one) * n / (MAX_VERIFY - 1)) for n in range(MAX_VERIFY)]
    steps = {k: draft * (1 + 0.6 * (k - 1)) for k in range(1, MAX_SEQS + 1)}
    return Profile(draft, verify, steps, "cpu").to_dict()


def _suite_cache() -> Path:
    """<the cache>/test-suite, sharing the conversions, vocabulary maps and kernels."""
    from models.pairs.convert import cache_root

    base = cache_root()
    if os.environ.get("DUO_SUITE_CACHE") == str(base):  # an xdist worker: the controller
        base = base.parent  # pointed DUO_CACHE_DIR at the suite's folder already
    suite = base / "test-suite"
    suite.mkdir(parents=True, exist_ok=True)
    for name in SHARED:
        (base / name).mkdir(exist_ok=True)
        if not (suite / name).exists():
            try:
                (suite / name).symlink_to(base / name, target_is_directory=True)
            except FileExistsError:  # another worker linked it first
                pass
    return suite


def _store(path: Path, key: str, value: dict) -> dict:
    """The profile under `key`, stored with no load (no process measures it again)."""
    entry = {"value": value, "load": 0.0}
    known = json.loads(path.read_text()) if path.exists() else {}
    if known.get(key) != json.loads(json.dumps(entry)):  # as the file has it (its keys are
        # strings: compared with the int keys of draft_step_s, every generation's profile
        # lookup wrote the file again, about 35 CPU ms a generation)
        from models.pairs.convert import write_atomic

        known[key] = entry
        write_atomic(path, json.dumps(known, indent=1))
    return entry


def use_fixed_profiles() -> None:
    """Point DUO_CACHE_DIR at the suite's folder (the CLI, app and benchmark processes the
    tests start inherit it), answer the suite's pairs' profile
    lookups with the fixed profile, and store it for every thread split here, for them."""
    import models.fit.profiler as profiler
    from models.draft.attention import cache_key as attention_key
    from models.draft.prefill import cache_key
    from models.pairs.catalog import draft_path, get_pair

    os.environ["DUO_CACHE_DIR"] = os.environ["DUO_SUITE_CACHE"] = str(_suite_cache())
    measured = profiler.measured

    def fixed(file, key, measure, *args, **kwargs):
        if file in ("draft_prefill.json", "draft_attention.json"):
            return _store(profiler.cache_root() / file, key,
                          PREFILL if file == "draft_prefill.json" else ATTENTION)
        name = next((n for n in FIXED if f"|{n}|" in key), None)
        if file == "draft_threads.json" and name is not None:
            cap = int(key.rsplit("|cap", 1)[1])
            counts = {n for n in (1, 2, 4, 8, 16, 32) if n < cap} | {cap}
            return _store(profiler.cache_root() / file, key,
                          {str(n): THREADS_S * (1 + 0.1 * (n - 1)) for n in sorted(counts)})
        if file != "profiles.json" or name is None:
            return measured(file, key, measure, *args, **kwargs)
        threads = int(key.rsplit("|target", 1)[1])
        return _store(profiler.cache_root() / file, key, fixed_profile(name, threads))

    profiler.measured = fixed
    cores = os.cpu_count() or 1
    drafts = {d for d in (0, 1, 2, 4, 8, 16, 32, cores) if d <= cores}
    splits = {(d, t) for d in drafts for t in (1, max(1, cores - d), cores)}
    target = SimpleNamespace(device="cpu", dtype="float32", quant="none", path="eager")
    for name in FIXED:  # the product builds the keys: the CLI's and the app's defaults
        drafter = SimpleNamespace(name=draft_path(get_pair(name)).name)
        _store(profiler.cache_root() / "draft_prefill.json", cache_key(drafter.name, cores),
               PREFILL)
        _store(profiler.cache_root() / "draft_attention.json", attention_key(drafter.name),
               ATTENTION)
        for split in sorted(splits):
            profiler.load_or_measure(name, drafter, target, split)
