"""jitort: an ONNX inference compiler.

``jitort.compile(model)`` imports an ONNX model into a small IR, optimizes it, fuses
elementwise chains, lowers each fused group into a loop nest emitted as Python source,
JIT-compiled with Numba and runs it against one statically planned workspace.

``import jitort`` loads only this facade and the error classes; the compiler (onnx, numpy,
Numba, scipy's BLAS) loads on first use of a name that needs it (PEP 562 ``__getattr__``).
"""
import os as _os
from typing import TYPE_CHECKING

# OpenBLAS threads spin against Numba's OpenMP threads on small machines unless told to sleep
# soon (see ../shared/NUMBA_NOTES.md); must be set before numpy loads OpenBLAS to take effect.
_os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

from .errors import (ExecutionError, InvalidInput, InvalidModel, InvalidOption,  # noqa: E402
                     JitortError, UnsupportedOp)
from .version import __version__  # noqa: E402

if TYPE_CHECKING:
    from .options import Options
    from .runtime import CompiledModel
    from .warm import compile, compile_count
    from .session import InferenceSession

__all__ = ["compile", "CompiledModel", "compile_count", "InferenceSession", "JitortError",
           "InvalidModel", "InvalidInput", "InvalidOption", "UnsupportedOp", "ExecutionError",
           "Options", "__version__"]

#: public name -> the submodule defining it, imported on first access (``compile`` looks for
#: the model's snapshot in the cache first, jitort/warm.py, then compiles with jitort.runtime)
_LAZY = {"compile": "warm", "CompiledModel": "runtime", "compile_count": "warm",
         "InferenceSession": "session", "Options": "options"}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        # an AttributeError also lets `from jitort import submodule` import the submodule
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module
    value = getattr(import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
