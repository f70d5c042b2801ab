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


def wrap(result: list, wanted: list[int], zipmaps: dict[int, list]) -> list:
    """``result`` (the arrays of outputs ``wanted``, by graph index) with ZipMap outputs as
    lists of dicts."""
    out = list(result)
    for k, i in enumerate(wanted):
        labels = zipmaps.get(i)
        if labels is not None:
            a = out[k].reshape(-1, len(labels))
            out[k] = [dict(zip(labels, row)) for row in a.tolist()]
    return out
