"""Python objects built in compiled code: the ``{label: probability}`` dicts of ai.onnx.ml
ZipMap, one per row, through CPython's C API (the functions every extension module links
against, declared here as external symbols of the running interpreter).

Only the stable, reference-counted entry points are used: ``PyDict_New``, ``PyDict_SetItem``
(new references to key and value), ``PyFloat_FromDouble``, ``PyList_SetItem`` (steals the
dict, drops the item it replaces) and ``Py_DecRef``. Objects travel as their addresses
(``id()`` in CPython); the caller keeps the label objects and the output list alive for the
call. The GIL is held: these functions are compiled without ``nogil``.
"""

import numpy as np
from numba import njit, types

_P = types.intp
_dict_new = types.ExternalFunction("PyDict_New", _P())
_dict_set = types.ExternalFunction("PyDict_SetItem", types.intc(_P, _P, _P))
_float = types.ExternalFunction("PyFloat_FromDouble", _P(types.float64))
_list_set = types.ExternalFunction("PyList_SetItem", types.intc(_P, _P, _P))
_decref = types.ExternalFunction("Py_DecRef", types.void(_P))


@njit(cache=True)
def fill_label_dicts(a, cols, keys, out):
    """``out[r] = {keys[0]: float(a[r, cols[0]]), ...}`` for every row of ``a`` (rows, labels),
    keys inserted in their order.

    ``keys``: the label objects' addresses; ``out``: the address of a list of ``a.shape[0]``
    items (their references are dropped as they are replaced). Returns the number of rows
    filled: fewer than all only where an allocation failed, with the Python error set (the
    caller raises it)."""
    n, k = a.shape[0], keys.shape[0]
    for r in range(n):
        d = _dict_new()
        if d == 0:
            return r
        for j in range(k):
            v = _float(np.float64(a[r, cols[j]]))
            if v == 0:
                _decref(d)
                return r
            err = _dict_set(d, keys[j], v)
            _decref(v)  # the dict holds its own reference
            if err != 0:
                _decref(d)
                return r
        _list_set(out, r, d)
    return n
