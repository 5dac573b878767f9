"""The product's model side, by role: target/ (PyTorch target), draft/ (llama.cpp draft), pairs/
(catalog, Hub, vocabulary), fit/ (memory, threads, measured costs); loader.py loads a pair and
runs its generations. Measurement-only code lives in measure/, beside scripts/."""
import os

# Before torch loads OpenMP: its threads spin a short while at a barrier, then sleep. Spinning
# long starves a busy machine (a 2-thread prefill took 8x longer beside other processes;
# README, *Under a competing load*); sleeping at once wakes a thread at each of a compiled
# forward's few hundred parallel regions (two threads were no faster than one: 46.8 against
# 47.4 ms a token, against 27.3 with this spin; docs/target-choice.md). A compiled target
# keeps to one thread where two are slower (models/fit/pace.py). The user's setting wins.
if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
    os.environ["GOMP_SPINCOUNT"] = "10000"  # GNU OpenMP: turns of its wait loop
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
