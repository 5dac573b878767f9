"""Model backends (llama.cpp draft, PyTorch target), the pair catalog and the loaders."""
