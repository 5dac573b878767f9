"""The draft's decode time per attention kernel and tokens held (docs/draft.md's table): the
shipped SmolLM2 Q4_1 draft on one thread, 24 decodes after a prefill of N random tokens. (Not
named kernels.py: transformers imports a module of that name where it finds one, for the Hub's
kernels package, and a script's folder is on the path.)"""
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.environ.get("REPO", "/work/main"))
from models.draft.llama import LlamaDrafter  # noqa: E402
from models.pairs.catalog import draft_path, get_pair  # noqa: E402

path = draft_path(get_pair("smol-self"))
for kind in ("flash", "plain"):
    d, row = LlamaDrafter(path, n_threads=1, n_ctx=4096, attention=kind), []
    rng = np.random.default_rng(0)
    for held in (32, 512, 2000):
        d.rollback(0)
        d._sync([int(t) for t in rng.integers(100, 40000, held)])
        t0 = time.perf_counter()
        for _ in range(24):
            d._decode_batch([(int(rng.integers(100, 40000)), 0)])
        row.append(f"{held}: {(time.perf_counter() - t0) / 24 * 1e3:.1f} ms")
    d.close()
    print(kind, ", ".join(row), flush=True)
