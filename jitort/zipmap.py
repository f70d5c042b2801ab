"""ai.onnx.ml ZipMap at the model's boundary.

ZipMap turns a (rows, classes) probability tensor into a list of ``{label: probability}``
dicts: not a tensor, so no backend or workspace can hold it. A ZipMap whose output is a graph
output (scikit-learn classifiers converted by skl2onnx end so) is taken out of the graph at
import: the graph returns its input tensor, and :func:`wrap` builds the dicts from it after the
call, as onnxruntime returns them (Python labels and floats).
"""
from __future__ import annotations

from .errors import InvalidModel
from .ir import Graph


def split(graph: Graph) -> dict[int, list]:
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
            found[i] = [int(v) if isinstance(v, int) else v for v in labels]
    return found


#: above this many labels, or up to this many rows, the dicts are built by dict(zip(...)):
#: no generated builder, and less set-up per call for a few rows
_BUILDER_MAX = 64
_BUILDER_MIN_ROWS = 16
_builders: dict = {}


def _builder(labels: list):
    """A function building ``[{labels[0]: v0, ...} for each row]`` from the columns' lists:
    dict displays over ``zip(*columns)`` (labels bound as locals), about half the time of
    ``dict(zip(labels, row))`` over ``tolist()``'s rows, which makes one list per row."""
    got = _builders.get(id(labels))  # per list object: no per-call key to build
    if got is not None and got[0] is labels:
        return got[1]
    key = tuple((type(v), v) for v in labels)
    fn = _builders.get(key)
    if fn is None:
        k = range(len(labels))
        src = ("lambda cols, " + ", ".join(f"l{i}=L[{i}]" for i in k) + ": [{"
               + ", ".join(f"l{i}: v{i}" for i in k) + "} for " + ", ".join(f"v{i}" for i in k)
               + (", " if len(labels) == 1 else "") + " in zip(*cols)]")
        fn = _builders[key] = eval(src, {"L": list(labels)})  # noqa: S307 (text made here)
    _builders[id(labels)] = (labels, fn)  # holds the list, so its id is not reused
    return fn


def wrap(result: list, wanted: list[int], zipmaps: dict[int, list]) -> list:
    """``result`` (the arrays of outputs ``wanted``, by graph index) with ZipMap outputs as
    lists of dicts."""
    out = list(result)
    for k, i in enumerate(wanted):
        labels = zipmaps.get(i)
        if labels is not None:
            a = out[k].reshape(-1, len(labels))
            if 0 < len(labels) <= _BUILDER_MAX and a.shape[0] > _BUILDER_MIN_ROWS:
                out[k] = _builder(labels)(a.T.tolist())
            else:
                out[k] = [dict(zip(labels, row)) for row in a.tolist()]
    return out
