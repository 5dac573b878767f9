"""Keeps the libraries off the user's terminal: llama.cpp's log lines, transformers' load
progress bars and its warnings go to Python logging at debug level (`duo.llama`,
`duo.transformers`), where a debug log or a test can still read them; torchao's import notes
the user cannot act on are dropped by message."""
from __future__ import annotations

import ctypes
import logging

llama_log = logging.getLogger("duo.llama")
_routed: dict = {}  # what is installed; the llama.cpp callback must outlive every call


# What torchao and torch's pytree say when torchao is imported on a machine without CUDA or
# Triton: its optional CUDA kernels fail to load, its Triton kernels are missing, and its
# enums are registered the deprecated way. None changes what runs (CPU kernels live in torch).
QUIET = {"torchao": ("Failed to load ", "Skipping import of cpp extensions"),
         "torchao.kernel.intmm": ("Warning: Detected no triton",),
         "torch.utils._pytree": ("is an Enum subclass and is now natively supported",)}


def quiet_libraries() -> None:
    """Route llama.cpp's and transformers' output to logging and drop torchao's import notes
    (once per process, before torchao is imported)."""
    route_llama_logs()
    route_transformers()
    quiet_imports()


def quiet_imports() -> None:
    """Each QUIET logger drops its records that start with (or hold) those texts; every
    other record, an error too, passes."""
    if "imports" in _routed:
        return
    for name, texts in QUIET.items():
        logging.getLogger(name).addFilter(
            lambda record, texts=texts: not any(t in record.getMessage() for t in texts))
    _routed["imports"] = True


def route_llama_logs() -> None:
    """llama.cpp's log callback -> `duo.llama` at debug level (llama-cpp-python's own callback
    maps ggml's levels wrongly and prints warnings such as the training-window one)."""
    if "llama" in _routed:
        return
    from llama_cpp import llama_cpp as C

    @C.llama_log_callback
    def callback(level, text, user_data):
        if llama_log.isEnabledFor(logging.DEBUG):
            llama_log.debug("%s", text.decode("utf-8", "replace").rstrip("\n"))

    C.llama_log_set(callback, ctypes.c_void_p(0))
    _routed["llama"] = callback


def route_transformers() -> None:
    """No progress bars from transformers' own loading; its log records go to
    `duo.transformers`, warnings and below at debug level."""
    if "transformers" in _routed:
        return
    from transformers.utils import logging as tf_logging

    tf_logging.set_tqdm_hook(lambda factory, args, kwargs: tf_logging.EmptyTqdm(*args, **kwargs))
    tf_logging.disable_default_handler()
    tf_logging.disable_propagation()
    tf_logging.get_logger().addHandler(_ToDebug(logging.getLogger("duo.transformers")))
    _routed["transformers"] = True


class _ToDebug(logging.Handler):
    """Logs each record again on `target`: errors as errors, the rest at debug level."""

    def __init__(self, target: logging.Logger):
        super().__init__()
        self.target = target

    def emit(self, record: logging.LogRecord) -> None:
        level = record.levelno if record.levelno >= logging.ERROR else logging.DEBUG
        if self.target.isEnabledFor(level):
            self.target.log(level, "%s", record.getMessage())
