"""User-facing layer: the Gradio app and the shared command-line options."""
