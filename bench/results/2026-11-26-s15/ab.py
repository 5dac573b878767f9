"""A/B of the compiled target's forward on this CPU at one thread: VARIANT=static (a graph per
chunk size, padded), padded (dynamic chunk, padded), exact (dynamic chunk, no padding).
Interleave the variants' processes; the inductor cache is warm after the first run."""
import os, sys, time, json
sys.path.insert(0, "/work/main")
import torch
torch.set_num_threads(1)
import models.target.static as st
from core.sampling import SamplingConfig
from torch._dynamo.utils import counters
v = sys.argv[1]
class Static(st.StaticTarget):
    _dynamic_chunk = property(lambda self: False, lambda self, x: None)
    _exact = property(lambda self: False, lambda self, x: None)
class Padded(st.StaticTarget):
    _exact = property(lambda self: False, lambda self, x: None)
cls = {"static": Static, "padded": Padded, "exact": st.StaticTarget}[v]
src = "/root/.cache/duodecoding/converted/b179c9523d0e6a0f98a330c7562b6827"
t = cls(src, "cpu", 2048, "float32", compile=True)
ids = [(i * 37) % 5000 + 100 for i in range(600)]
out = {}
for fill in (150, 450):
    for n in (1, 3, 5, 8, 9, 13, 16, 20, 32):
        ts = []
        for _ in range(9):
            t.rollback(0); t.logits(ids[:fill], 1)
            c = time.perf_counter(); t.score(ids[fill:fill + n], 1, SamplingConfig()); ts.append(time.perf_counter() - c)
        ts.sort(); out[f"{fill}/{n}"] = round(ts[4] * 1e3, 1)
print(v, json.dumps(out), "graphs", counters["stats"]["unique_graphs"], flush=True)
