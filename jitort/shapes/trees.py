"""Shape functions: the ai.onnx.ml tree ensembles (TreeEnsembleClassifier / Regressor,
TreeEnsemble v5)."""
from __future__ import annotations

from .core import register, register_dtypes
from .ml import _ML, _nclasses, _rows, _xdt


@register("TreeEnsembleClassifier", domain=_ML)
def _tree_classifier(node, shapes, values):
    n = _rows(node, shapes)
    return [(n,), (n, _nclasses(node))]


@register("TreeEnsembleRegressor", "TreeEnsemble", domain=_ML)
def _tree_regressor(node, shapes, values):
    return [(_rows(node, shapes), int(node.attrs.get("n_targets", 1)))]


@register_dtypes("TreeEnsembleRegressor", "TreeEnsemble", domain=_ML)
def _regressor_dtypes(in_dtypes):
    return [_xdt(in_dtypes)]
