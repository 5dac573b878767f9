"""The product's model side, by role: target/ (PyTorch target), draft/ (llama.cpp draft), pairs/
(catalog, Hub, vocabulary), fit/ (memory, threads, measured costs); loader.py loads a pair and
runs its generations. Measurement-only code lives in measure/, beside scripts/."""
