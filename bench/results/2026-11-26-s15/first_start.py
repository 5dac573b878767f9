"""The app's first start on a cold cache (conversions linked in): CPU seconds and wall."""
import os, sys, time, resource, tempfile
root = sys.argv[1]
cold = tempfile.mkdtemp(prefix="first")
for name in ("converted", "drafts", "vocab"):
    os.symlink(f"/root/.cache/duodecoding/{name}", f"{cold}/{name}")
os.environ["DUO_CACHE_DIR"] = cold
sys.path.insert(0, root); os.chdir(root)
def cpu():
    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime
c0, w0 = cpu(), time.time()
from app.host import real_pair
from models.loader import LoadOptions
pair = real_pair(LoadOptions())("smol-self", lambda m: print(f"  {time.time()-w0:6.1f} s  {m}", flush=True))
print(f"{root}: first start cpu {cpu()-c0:.0f} s wall {time.time()-w0:.0f} s path {pair.target.path}", flush=True)
