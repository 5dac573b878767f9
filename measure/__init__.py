"""Measurement only: code the benchmarks and the GPU report use and the app never runs (the
transformers and llama.cpp peers, random-weight targets and GGUFs, forward timing)."""
