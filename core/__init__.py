"""The decoding algorithm: sampling, verification, methods, scheduler, budget. No model code."""
