"""The target's verify of 1, 10 and 32 tokens alone and with the draft decoding beside it (one
thread each), and the draft's time a token alone and beside a verify loop: how much the two
threads slow each other on this machine (smol-self, eager float32 target)."""
import statistics
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from models.fit.profiler import GREEDY, draft_once, verify_once  # noqa: E402
from models.loader import LoadOptions, Pair  # noqa: E402


def median_ms(values) -> float:
    return 1e3 * statistics.median(values)


def beside(work, measure, n: int = 8) -> list[float]:
    """`measure` n times while `work` runs in a loop on another thread."""
    stop = threading.Event()

    def loop():
        while not stop.is_set():
            work()
    thread = threading.Thread(target=loop)
    thread.start()
    time.sleep(0.2)
    try:
        return [measure() for _ in range(n)]
    finally:
        stop.set()
        thread.join()


def main() -> None:
    import torch

    pair = Pair("smol-self", LoadOptions(device="cpu", dtype="float32", target_compile="off",
                                         target_quant="none"))
    drafter, target = pair.drafter, pair.target
    drafter.set_threads(1)
    torch.set_num_threads(1)
    ctx = [int(t) for t in np.random.default_rng(0).integers(100, 1000, 64)]
    target.rollback(0)
    target.score(ctx, 1, GREEDY)
    for n in (1, 10, 32):
        alone = [verify_once(target, ctx, n) for _ in range(16)]
        near = beside(lambda: draft_once(drafter, ctx, 8), lambda: verify_once(target, ctx, n))
        print(f"verify {n}: alone {median_ms(alone):.0f} ms, beside the draft {median_ms(near):.0f} ms")
    alone = [draft_once(drafter, ctx, 16) / 16 for _ in range(6)]
    near = beside(lambda: verify_once(target, ctx, 10),
                  lambda: draft_once(drafter, ctx, 16) / 16, n=6)
    print(f"draft a token: alone {median_ms(alone):.1f} ms, beside a verify {median_ms(near):.1f} ms")


if __name__ == "__main__":
    main()
