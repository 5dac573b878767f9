"""The compiled smol-self target (packed, float32) compiled for 1 and 2 threads, asked for 2:
one-token forwards after a 200-token context, under this process's OpenMP settings (set in the
environment before start) and, with NOPACE=1, without the pace (every forward on 2 threads).
pace_busy.sh runs each idle and beside one busy loop. Prints the median ms and how many
forwards ran on each count."""
import os
import statistics
import sys
import time
from collections import Counter

sys.path.insert(0, os.environ.get("REPO", "/work/main"))
import models  # noqa: E402,F401 - the app's OpenMP defaults first
import torch  # noqa: E402

from measure.gpu_bench import smol_dir  # noqa: E402
from models.target.static import StaticTarget  # noqa: E402

torch.set_num_threads(1)
tg = StaticTarget(smol_dir("float32"), "cpu", 1024, "float32", compile=True, more_threads=2)
if os.environ.get("NOPACE"):
    tg.pace = None
ran: Counter = Counter()
if tg.pace is not None:
    observe = tg.pace.observe
    tg.pace.observe = lambda n, s, size=1: (ran.update([n]), observe(n, s, size))
torch.set_num_threads(2)
ids = [(i * 37) % 5000 + 100 for i in range(400)]
times = []
for rep in range(3):
    tg.rollback(0)
    tg.logits(ids[:200], 1)
    for k in range(40):
        t = time.perf_counter()
        tg.logits([ids[200 + k]], 1)
        times.append(time.perf_counter() - t)
print(os.environ.get("GOMP_SPINCOUNT"), "nopace" if os.environ.get("NOPACE") else "pace",
      "busy" if os.environ.get("BUSY") == "1" else "idle",
      f"{statistics.median(times) * 1000:.1f} ms", dict(ran), flush=True)
