"""1-, 8- and 16-token steps of the compiled smol-self target (packed) at 2 and 1 threads under
this process's OpenMP wait settings (set in the environment before start; spin_run.sh runs
each idle and beside one busy loop). It ran at commit 07b5eda (StaticTarget's more_threads,
reverted after); here the target is compiled for 2 threads, then for 1."""
import os, sys, time, statistics
sys.path.insert(0, "/work/main")
import models  # sets the policy default first, as the app does
import torch
from models.target.static import StaticTarget
from measure.gpu_bench import smol_dir
torch.set_num_threads(2)
tg = StaticTarget(smol_dir("float32"), "cpu", 1024, "float32", compile=True)
ids = [(i * 37) % 5000 + 100 for i in range(400)]
out = {}
for n in (2, 1):
    if n == 1:  # compiled again for 1 thread (its graphs are guarded on the count)
        torch.set_num_threads(1)
        tg.fixed_threads = 1
        tg.warm_up()
    ts = []
    for rep in range(3):
        tg.rollback(0); tg.logits(ids[:200], 1)
        for k in range(20):
            t = time.perf_counter(); tg.logits([ids[200 + k]], 1); ts.append(time.perf_counter() - t)
    for k in (8, 16):
        t8 = []
        for rep in range(5):
            tg.rollback(220); t = time.perf_counter(); tg.logits(ids[220:220 + k], 1); t8.append(time.perf_counter() - t)
        out[f"{n}t-{k}tok"] = round(statistics.median(t8) * 1000, 1)
    out[f"{n}t-1tok"] = round(statistics.median(ts) * 1000, 1)
print(os.environ.get("OMP_WAIT_POLICY"), os.environ.get("GOMP_SPINCOUNT"), os.environ.get("BUSY"), out, flush=True)
