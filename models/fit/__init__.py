"""Fitting a pair to this machine: what a target needs (footprint.py) against what the device has
(memory.py), where each model runs and on how many threads (placement.py), and the measured
draft and verify costs the budget prices rounds with (profiler.py)."""
