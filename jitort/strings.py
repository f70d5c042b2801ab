"""String tensors as the string steps hold them (jitort/string_ops.py, jitort/text_ops.py):
numpy object arrays of ``str``, as onnxruntime returns them."""
from __future__ import annotations

import numpy as np

STRING = np.dtype(object)


def as_text(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def string_list(a) -> list:
    """The elements of a string tensor (object or unicode array) as a flat list of str; other
    objects as their text (a NaN in an object array reads "nan", as onnxruntime's)."""
    a = np.asarray(a)
    flat = a.reshape(-1).tolist()
    if a.dtype.kind == "U":
        return flat
    return [s if type(s) is str else as_text(s) for s in flat]


def string_array(items: list, shape: tuple) -> np.ndarray:
    """An object array of ``shape`` holding ``items`` (str) in order."""
    out = np.empty(len(items), object)
    out[:] = items
    return out.reshape(shape)
