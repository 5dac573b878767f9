"""Draft decode ms/token on 1 thread: alone, beside a torch fp32 matvec loop (another thread), pinned or not."""
import os, sys, threading, time, statistics
sys.path.insert(0, "/work/main")
import torch
from models.draft.llama import LlamaDrafter
from models.pairs.catalog import draft_path, get_pair

d = LlamaDrafter(draft_path(get_pair("smol-self")), n_threads=1)
torch.set_num_threads(1)
W = torch.randn(576 * 4, 49152 // 4)  # ~45M floats = 180 MB, memory-bound matvec like the target
x = torch.randn(49152 // 4)
stop = threading.Event()
iters = 0

def hog(pin):
    if pin is not None:
        os.sched_setaffinity(0, {pin})
    global iters
    while not stop.is_set():
        W @ x; iters += 1

def draft_ms(n=48):
    ids = list(range(100, 116))
    d._sync(ids, None)
    t = []
    for i in range(n):
        ids.append(200 + i)
        t0 = time.perf_counter(); d._sync(ids, None); t.append(time.perf_counter() - t0)
    d.tokens.clear() if hasattr(d, "tokens") else None
    return statistics.median(t) * 1e3

def reset():
    import llama_cpp as C
    C.llama_memory_clear(C.llama_get_memory(d.ctx.ctx), True); d.tokens = []

def main():
  global iters
  mode = sys.argv[1]
  if mode == 'hog':
      iters=0; th=threading.Thread(target=hog,args=(None,)); th.start(); time.sleep(3); stop.set(); th.join(); print('hog alone/s', iters/3); sys.exit()
  for rep in range(3):
      reset()
      if mode == "alone":
          print("alone", round(draft_ms(), 2))
      else:
          pin = mode == "pinned"
          if pin: os.sched_setaffinity(0, {0})
          stop.clear(); th = threading.Thread(target=hog, args=(1 if pin else None,)); th.start()
          time.sleep(0.2)
          # hog rate

          iters = 0; t0 = time.perf_counter(); ms = draft_ms(); rate = iters / (time.perf_counter() - t0)
          print(mode, round(ms, 2), "hog/s", round(rate, 1))
          stop.set(); th.join()
          os.sched_setaffinity(0, {0, 1})

main()
