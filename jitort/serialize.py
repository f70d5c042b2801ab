"""Pickling a :class:`~jitort.CompiledModel`: the model as given plus its compile options.

A compiled model holds Numba dispatchers, plans and workspaces, none of which pickle. It pickles
as what built it instead: the model source (an absolute path, whose folder also holds its
external data unless ``base_dir`` says otherwise, or the serialized model bytes when compile was
given bytes or an ``onnx.ModelProto``) and every keyword option of the compile call. Unpickling
calls :func:`jitort.compile` again; the generated modules and Numba's machine code come from the
on-disk cache (``$JITORT_CACHE_DIR``), so on a machine that compiled the model before a worker
is ready in about a second, with zero Numba compilations (``jitort.compile_count()``).

A path travels as a path: the unpickling machine must see the same file (a shared file system
on a cluster). Pickle a model compiled from bytes to ship the weights themselves.
"""
from __future__ import annotations

import os
from typing import Any

from . import devices

#: names in ``CompiledModel.__init__``'s locals that are not compile options
_NOT_OPTIONS = ("self", "model", "__class__")


def capture(model: Any, init_locals: dict) -> tuple[Any, dict]:
    """``(source, options)`` recorded by ``CompiledModel.__init__`` from its own ``locals()``.

    Every keyword parameter is kept as passed (a ``**kwargs`` parameter is flattened into them);
    a path and a relative ``base_dir`` are made absolute so that the pickle does not depend on
    the working directory at unpickling time.
    """
    options = {k: v for k, v in init_locals.items() if k not in _NOT_OPTIONS}
    options.update(options.pop("kwargs", None) or {})
    if isinstance(options.get("base_dir"), (str, os.PathLike)):
        options["base_dir"] = os.path.abspath(options["base_dir"])
    if isinstance(model, (str, os.PathLike)):
        source: Any = os.path.abspath(model)
    elif isinstance(model, (bytearray, memoryview)):
        source = bytes(model)
    else:  # bytes are kept by reference; a ModelProto is serialized only when pickled
        source = model
    return source, options


def reduce(cm) -> tuple:
    """``CompiledModel.__reduce__``: rebuild with :func:`rebuild` from the model and options."""
    source = getattr(cm, "_source", None)
    if source is None:
        raise TypeError(f"cannot pickle {type(cm).__name__}: it records no model source")
    if not isinstance(source, (str, bytes)):  # an onnx.ModelProto (external data loaded)
        source = source.SerializeToString()
    return rebuild, (source, dict(cm._options), getattr(cm, "device", "cpu"))


def rebuild(source, options: dict, device: str = "cpu"):
    """Unpickle: compile again (code from the on-disk cache)."""
    return devices.factory(device)(source, **options)
