"""The draft: a GGUF model in llama.cpp on the CPU behind three verbs (propose / accept / rollback)
with its own KV cache and threads (llama.py); format.py picks the weight format it runs from."""
