"""The product's model side, by role: target/ (PyTorch target), draft/ (llama.cpp draft), pairs/
(catalog, Hub, vocabulary), fit/ (memory, threads, measured costs); loader.py loads a pair and
runs its generations. Measurement-only code lives in measure/, beside scripts/."""
import os

# Before torch loads OpenMP: its threads sleep at a barrier instead of spinning. On a busy
# machine spinning threads starve each other (a 2-thread prefill took 8x longer beside
# other processes; README, *Under a competing load*). The user's own setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
