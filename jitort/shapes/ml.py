"""Shape functions: the ai.onnx.ml domain (scikit-learn converters' ops) but its tree
ensembles (``trees``)."""
from __future__ import annotations

import numpy as np

from .core import _fail, _prod, register, register_dtypes

_ML = "ai.onnx.ml"


def _rows(node, shapes) -> int:
    x = shapes[0]
    if len(x) not in (1, 2):
        raise _fail(node, "input must be 1-D or 2-D", shapes)
    return 1 if len(x) == 1 else x[0]


def _nclasses(node) -> int:
    at = node.attrs
    return len(at.get("classlabels_int64s") or at.get("classlabels_ints")
               or at.get("classlabels_strings") or [])


@register("LinearClassifier", domain=_ML)
def _linear_classifier(node, shapes, values):
    n = _rows(node, shapes)
    nc = _nclasses(node)
    ncoef = len(node.attrs.get("coefficients", []))
    feats = shapes[0][-1]
    classes = ncoef // feats if feats else nc
    return [(n,), (n, max(classes, nc) if nc == 2 and classes == 1 else classes)]


@register("LinearRegressor", domain=_ML)
def _linear_regressor(node, shapes, values):
    return [(_rows(node, shapes), int(node.attrs.get("targets", 1)))]


@register("Scaler", "Normalizer", "Binarizer", "Imputer", "LabelEncoder", "CategoryMapper",
          domain=_ML)
def _same(node, shapes, values):
    x = shapes[0]
    if node.op_type == "Normalizer" and len(x) not in (1, 2):
        raise _fail(node, "input must be 1-D or 2-D", shapes)
    return [tuple(x)]



def _xdt(in_dtypes):
    x = in_dtypes[0] if in_dtypes else None
    return x if x is not None and np.dtype(x).kind == "f" else np.dtype(np.float32)


# onnx's inference leaves some of these outputs untyped; only those take these dtypes (a
# string-labelled classifier's label output is typed by onnx already)
@register_dtypes("TreeEnsembleClassifier", "LinearClassifier", domain=_ML)
def _classifier_dtypes(in_dtypes):
    return [np.dtype(np.int64), _xdt(in_dtypes)]


@register_dtypes("LinearRegressor", "Scaler", "Normalizer", domain=_ML)
def _float_dtypes(in_dtypes):
    return [np.dtype(np.float32)]


@register("ArrayFeatureExtractor", domain=_ML)
def _array_feature_extractor(node, shapes, values):
    # the last axis becomes one entry per index, whatever the indices' shape; their values
    # matter only to the lowering
    if len(shapes) < 2 or shapes[1] is None:
        raise _fail(node, "needs the indices input", shapes)
    x = shapes[0]
    k = _prod(shapes[1])
    return [(1, k) if len(x) == 1 else tuple(x[:-1]) + (k,)]


def _svm_classes(node) -> int:
    at = node.attrs
    return len(at.get("classlabels_ints") or at.get("classlabels_strings") or [])


@register("SVMClassifier", domain=_ML)
def _svm_classifier(node, shapes, values):
    # onnxruntime's score columns: one per class with probabilities (prob_a) or in the
    # liblinear form (no support vectors); else one per class pair, two for two classes
    n, nc = _rows(node, shapes), _svm_classes(node)
    pairs = node.attrs.get("vectors_per_class") and not node.attrs.get("prob_a")
    return [(n,), (n, (nc * (nc - 1) // 2 if nc > 2 else 2) if pairs else nc)]


@register("SVMRegressor", domain=_ML)
def _svm_regressor(node, shapes, values):
    return [(_rows(node, shapes), 1)]


@register("OneHotEncoder", domain=_ML)
def _one_hot_encoder(node, shapes, values):
    at = node.attrs
    return [tuple(shapes[0]) + (len(at.get("cats_int64s") or at.get("cats_strings") or []),)]


@register("FeatureVectorizer", domain=_ML)
def _feature_vectorizer(node, shapes, values):
    dims = [int(d) for d in node.attrs.get("inputdimensions", [])]
    if len(dims) != len(shapes):
        raise _fail(node, f"{len(dims)} inputdimensions for {len(shapes)} inputs", shapes)
    return [(_rows(node, shapes[:1]) if len(shapes[0]) <= 2 else shapes[0][0], sum(dims))]


@register_dtypes("SVMClassifier", domain=_ML)
def _svm_classifier_dtypes(in_dtypes):
    return [np.dtype(np.int64), np.dtype(np.float32)]


@register_dtypes("SVMRegressor", "OneHotEncoder", "FeatureVectorizer", domain=_ML)
def _float32_dtypes(in_dtypes):
    return [np.dtype(np.float32)]
