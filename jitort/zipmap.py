"""ai.onnx.ml ZipMap at the model's boundary.

ZipMap turns a (rows, classes) probability tensor into a list of ``{label: probability}``
dicts: not a tensor, so no backend or workspace can hold it. A ZipMap whose output is a graph
output (scikit-learn classifiers converted by skl2onnx end so) is taken out of the graph at
import: the graph returns its input tensor, and :func:`wrap` builds the dicts from it after the
call, as onnxruntime returns them (Python labels and floats; built in compiled code,
kernels/cpu/pydicts.py).
"""
from __future__ import annotations

import numpy as np

from .errors import InvalidModel
from .ir import Graph
from .kernels.cpu.pydicts import fill_label_dicts


class Labels:
    """A ZipMap's labels as its dicts hold them: sorted, as onnxruntime's (a ``std::map``),
    with the score column of each."""

    def __init__(self, labels: list):
        self.columns = sorted(range(len(labels)), key=labels.__getitem__)
        self.keys = [labels[j] for j in self.columns]
        self.count = len(labels)
        #: the key objects' addresses for the compiled builder; ``keys`` keeps them alive
        self.key_ids = np.array([id(v) for v in self.keys], np.intp)
        self.column_index = np.array(self.columns, np.intp)
        self.in_order = self.columns == list(range(self.count))


def split(graph: Graph) -> dict[int, Labels]:
    """Remove the ZipMap nodes that make graph outputs; ``{output index: labels}``."""
    found: dict[int, list] = {}
    consumers = graph.consumers()
    for n in list(graph.nodes):
        if n.op_type != "ZipMap" or n.domain != "ai.onnx.ml":
            continue
        y = n.outputs[0]
        where = [i for i, v in enumerate(graph.outputs) if v is y]
        if not where or consumers.get(id(y)):
            continue
        labels = n.attrs.get("classlabels_int64s") or n.attrs.get("classlabels_strings")
        if not labels:
            raise InvalidModel(f"node {n.label}: ZipMap without classlabels")
        labels = [v.decode() if isinstance(v, bytes) else v for v in labels]
        graph.nodes.remove(n)
        for i in where:
            graph.outputs[i] = n.inputs[0]
            found[i] = Labels([int(v) if isinstance(v, int) else v for v in labels])
    return found


#: up to this many rows the dicts are built by dict(zip(...)): less set-up than a compiled call
_NATIVE_MIN_ROWS = 16


def _dicts(a: np.ndarray, labels: Labels) -> list:
    """One ``{label: a[r, its column]}`` per row r, keys sorted, Python floats: as onnxruntime's."""
    rows = a.shape[0]
    if rows <= _NATIVE_MIN_ROWS:
        keys = labels.keys
        if not labels.in_order:
            a = a[:, labels.columns]
        return [dict(zip(keys, row)) for row in a.tolist()]
    out = [None] * rows
    if fill_label_dicts(a, labels.column_index, labels.key_ids, id(out)) != rows:
        raise MemoryError("ZipMap: building the output dicts")
    return out


def wrap(result: list, wanted: list[int], zipmaps: dict[int, Labels]) -> list:
    """``result`` (the arrays of outputs ``wanted``, by graph index) with ZipMap outputs as
    lists of dicts."""
    out = list(result)
    for k, i in enumerate(wanted):
        labels = zipmaps.get(i)
        if labels is not None:
            a = out[k]
            if a.ndim != 2 or a.shape[1] != labels.count:
                a = a.reshape(-1, labels.count)
            out[k] = _dicts(a, labels)
    return out
