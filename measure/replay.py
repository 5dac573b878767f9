"""The benchmark's replay mode: the same requests twice in one process with the lookup memory
kept between the passes and something changed (an edited prompt, another seed), so that
remembering each prompt's answer is not enough; and what runs hand on to each other: the
memory's reset between runs, and each label's own learning (own_learning)."""
from __future__ import annotations

import copy
from contextlib import contextmanager
from dataclasses import replace

from measure.bench_summary import REPLAY

CHANGES = ("edit", "seed")
EDIT = "\n\nKeep every name, number and line of the original exactly as it is."


def forget(pair) -> None:
    """Empty the app's cross-request lookup memory (models/loader.py's Pair.lookup_memory),
    where the pair has one."""
    memory = getattr(pair, "lookup_memory", None)
    if memory is not None:
        memory.clear()


@contextmanager
def own_learning(pair, store: dict, label: str):
    """The block's generations start from what this label's earlier runs learned (from the warm-up's
    state at its first run) and hand on to its next run only. Two labels of one method (duo,
    duo-nolookup) share the pair's learning; run back to back on each prompt, the second started
    tuned to that very prompt by the first (its budget, its bands). On the 10 copy-heavy prompts
    where an A/B's two arms ran the same code: the second run 6% faster by the median with the
    learning shared, 2% with each label's own (bench/results/2026-11-25-own-learning)."""
    learned = getattr(pair, "learned", None)
    if learned is None:
        yield
        return
    shared = learned.carried()
    learned.carry(store.get(label) or copy.deepcopy(shared))
    try:
        yield
    finally:
        store[label] = learned.carried()
        learned.carry(shared)


def replay_config(cfg, change: str):
    """The second pass's settings: another seed for `seed` (a ValueError at temperature 0,
    where the seed changes nothing), the same for `edit`."""
    if change not in CHANGES:
        raise ValueError(f"--replay-change must be one of {', '.join(CHANGES)}, got '{change}'")
    if change == "edit":
        return cfg
    if cfg.sampling.greedy:
        raise ValueError("--replay-change seed needs --temperature > 0 (a greedy answer does "
                         "not depend on the seed); use --replay-change edit")
    return replace(cfg, seed=cfg.seed + 1)


def edited(prompt: str | list[dict]) -> str | list[dict]:
    """The prompt with a sentence appended to its last user turn."""
    if isinstance(prompt, str):
        return prompt + EDIT
    return prompt[:-1] + [dict(prompt[-1], content=prompt[-1]["content"] + EDIT)]


def passes(questions: list[dict], cfg, change: str) -> list[tuple[list[dict], object]]:
    """[(questions, settings)] of pass 1 and pass 2."""
    second = ([dict(q, prompt=edited(q["prompt"])) for q in questions] if change == "edit"
              else questions)
    return [(questions, cfg), (second, replay_config(cfg, change))]


def run_replay(runs: dict, questions: list[dict], raw: bool, change: str, run, log,
               save=None) -> dict[str, list]:
    """runs: label -> (pair, settings); `run(pair, ids, settings)` -> stats. Method after
    method (each would find the others' answers in the one memory): the memory emptied,
    pass 1 over every question, then pass 2. Results under "LABEL#1" and "LABEL#2";
    `save(results)` after each method."""
    results: dict[str, list] = {}
    for label, (pair, cfg) in runs.items():
        forget(pair)
        for n, (qs, c) in enumerate(passes(questions, cfg, change), 1):
            key = f"{label}{REPLAY}{n}"
            results[key] = []
            for q in qs:
                s = run(pair, pair.prompt_ids(q["prompt"], raw=raw), c)
                s["category"], s["question_id"] = q["category"], q["id"]
                results[key].append(s)
            log(f"{key}: " + ", ".join(f"{s['tokens_per_s']:.1f}" for s in results[key])
                + " tok/s")
        if save is not None:
            save(results)
    return results
