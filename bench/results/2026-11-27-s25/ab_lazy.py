"""A/B: `duo` with the long prompt's draft prefill started lazily (lookup rounds on every core
until PLAINS plain picks in a row) against `duo@eager` (today's: the draft prefills at once)."""
import os, sys, time
sys.path.insert(0, "/work/main")
import core.rounds as rounds
import scripts.benchmark as bench
from core.backends import Draft
from measure.ab import env_ab
from models.loader import Pair

ORIG = rounds.prefill_beside
PLAINS = int(os.environ.get("PLAINS", "2"))


def lazy(run, worker, budget, job=None, sent=0):
    if job is None and run.lookup is not None:
        plains = 0
        while plains < PLAINS:
            t = time.perf_counter()
            pick = run.lookup.pick(run, budget, Draft(), beside=False, solo=True)
            plains = plains + 1 if not len(pick.draft) else 0
            ev = rounds.round_alone(run, budget, t, pick)
            yield ev
            if ev.done:
                return True
    return (yield from ORIG(run, worker, budget, job, sent))


def patch(pair, arm):
    rounds.prefill_beside = ORIG if arm.endswith("@eager") else lazy


env_ab(bench, Pair, patch, "duo,duo@eager")
