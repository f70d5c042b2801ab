"""jitort: an ONNX inference compiler."""
__version__ = "0.1.0"
