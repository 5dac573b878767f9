"""The target: a transformers causal LM behind three verbs (prefill / score / rollback), eager
(eager.py, the reference) or static-cache and compiled (static.py over attention.py), in the
precision quant.py makes; choice.py picks the path and precision, sampling.py runs the shared
sampling transform on the device."""
