"""jitort: an ONNX inference compiler.

``jitort.compile(model)`` imports an ONNX model into a small IR, optimizes it, fuses
elementwise chains, lowers each fused group into a loop nest emitted as Python source,
JIT-compiles it with Numba and runs it against one statically planned workspace.
"""
import os as _os

# OpenBLAS threads spin against Numba's OpenMP threads on small machines unless told to sleep
# soon (see ../shared/NUMBA_NOTES.md); must be set before numpy loads OpenBLAS to take effect.
_os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

__version__ = "0.1.0"

from .errors import (ExecutionError, InvalidInput, InvalidModel, JitortError,  # noqa: E402
                     UnsupportedOp)
from .runtime import CompiledModel, compile, compile_count  # noqa: E402

__all__ = ["compile", "CompiledModel", "compile_count", "JitortError", "InvalidModel",
           "InvalidInput", "UnsupportedOp", "ExecutionError", "__version__"]
