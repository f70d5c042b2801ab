"""CPU lowerings: the ai.onnx.ml domain but its tree ensembles (``trees``): linear models,
support vector machines, Scaler, Normalizer, Binarizer, Imputer, OneHotEncoder, LabelEncoder,
FeatureVectorizer, ArrayFeatureExtractor. Kernels: ``jitort.kernels.cpu.ml``. String labels
and string inputs are steps of their own (``jitort/string_ops.py``; Numba cannot type them).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ... import tuning
from ...ir import Node
from ..calls import KernelModule
from ..registry import Unlowerable, lowering
from ..tree_tables import _s

if TYPE_CHECKING:
    from ..emitter import Emitter

_ml = KernelModule("ml")
_ML = "ai.onnx.ml"
_POST = {"NONE": 0, "SOFTMAX": 1, "LOGISTIC": 2, "SOFTMAX_ZERO": 3, "PROBIT": 4}
#: a linear model's weights for the tile kernel (``linear.scores`` "tiles") are padded to a
#: multiple of this many features: of the kernel's tile width on any host (8 or 16 lanes)
TILE_PAD = 16
#: the default rule of calibration's ``linear.scores``: the tile kernel for up to this many
#: features with one score column, with 2-4 classes (past them: a row at a time), and for
#: any number of features with more classes
TILES_MAX_FEATURES = (16, 32)


def _rows2d(em, n: Node):
    xs = em.shape(n.inputs[0])
    rows, f = (1, xs[0]) if len(xs) == 1 else (xs[0], xs[-1])
    if len(xs) > 2:
        raise Unlowerable(n, "input must be 1-D or 2-D")
    return em.shaped(n.inputs[0], (rows, f)), rows, f


def _coefs(em, n: Node, f: int):
    w = np.asarray(n.attrs.get("coefficients", []), np.float64)
    b = np.asarray(n.attrs.get("intercepts", []), np.float64)
    if f == 0 or len(w) % f or len(w) == 0:
        raise Unlowerable(n, f"{len(w)} coefficients for {f} features")
    nt = len(w) // f
    b = b if len(b) == nt else np.zeros(nt)
    return (em.constant(("ml.w", id(n)), lambda: w.reshape(nt, f)),
            em.constant(("ml.b", id(n)), lambda: b), nt)


def _f32_rows(n: Node) -> bool:
    """float32 input: scores in float32, as onnxruntime's Gemm (``linear_rows_f32``); other
    inputs are summed per row in float64."""
    return np.dtype(n.inputs[0].dtype) == np.float32


def _numeric_in(n: Node) -> bool:
    x = n.inputs[0]
    return x.dtype is not None and np.dtype(x.dtype).kind in "fi" and all(
        o is not None and o.dtype is not None for o in n.outputs)


def _linear_f32(n: Node, f: int):
    """The row-blocked float32 kernel's plan for a LinearClassifier / LinearRegressor over
    ``f`` features: ``(W (targets, feats), b, mode, labels, post)`` or None where it does not
    apply (other dtypes, string labels, one coefficient row without two labels or with PROBIT);
    ``mode`` as :func:`jitort.kernels.cpu.ml.linear_rows_f32`."""
    at = n.attrs
    if not _f32_rows(n) or not _numeric_in(n):
        return None
    w = np.asarray(at.get("coefficients", []), np.float64)
    b = np.asarray(at.get("intercepts", []), np.float64)
    post = _POST.get(_s(at.get("post_transform", "NONE")))
    if f == 0 or len(w) % f or len(w) == 0 or post is None:
        return None
    nt = len(w) // f
    b = b if len(b) == nt else np.zeros(nt)
    if n.op_type == "LinearRegressor":
        if nt != int(at.get("targets", 1)):
            return None
        return w.reshape(nt, f), b, 0, np.zeros(2, np.int64), post
    labels = np.asarray(at.get("classlabels_ints") or [], np.int64)
    if not len(labels):
        return None
    if nt > 1:
        return (w.reshape(nt, f), b, 1, labels, post) if nt == len(labels) else None
    # one coefficient row: two labels (onnxruntime refuses other counts), PROBIT apart (it
    # writes half of the scores)
    return (w.reshape(1, f), b, 2, labels, post) if len(labels) == 2 and post != 4 else None


def _only_user(em, v, user: Node) -> bool:
    """``v`` is read by ``user`` alone, inside this segment (not needed after it)."""
    if id(v) in em.out_index:
        return False
    users = [m for m in em.seg.nodes if any(i is v for i in m.inputs)]
    return users == [user]


def _folded_scaler(em, n: Node):
    """The Scaler feeding linear node ``n`` that its kernel applies itself, or None: a float32
    Scaler in this segment, read by ``n`` only, whose offset / scale fit the features."""
    sc = n.inputs[0].producer
    if (sc is None or sc.op_type != "Scaler" or sc.domain != _ML or sc not in em.seg.nodes
            or sc.inputs[0].dtype is None or np.dtype(sc.inputs[0].dtype) != np.float32
            or not _only_user(em, n.inputs[0], n)):
        return None
    xs = em.shape(sc.inputs[0])
    f = xs[-1] if len(xs) in (1, 2) else 0
    if _linear_f32(n, f) is None:
        return None
    off, scale = (np.asarray(sc.attrs.get(a, [d]), np.float32) for a, d in (("offset", 0.0), ("scale", 1.0)))
    if len(off) not in (1, f) or len(scale) not in (1, f):
        return None
    return sc, np.broadcast_to(off, (f,)).copy(), np.broadcast_to(scale, (f,)).copy()


def _folded_normalizer(em, n: Node, mode: int):
    """The Normalizer reading linear node ``n``'s scores that its kernel applies itself, or
    None: one score per class (``mode`` 0 or 1), in this segment, the scores' only reader,
    its output a segment output (written at this step straight into the caller's array)."""
    z = n.outputs[-1]
    if mode > 1:
        return None
    users = [m for m in em.seg.nodes if any(i is z for i in m.inputs)]
    if (len(users) != 1 or users[0].op_type != "Normalizer" or users[0].domain != _ML
            or id(z) in em.out_index or id(users[0].outputs[0]) not in em.out_index
            or _NORMS.get(_s(users[0].attrs.get("norm", "MAX"))) is None):
        return None
    return users[0]


def _lower_linear_f32(em, n: Node) -> bool:
    """Emit the row-blocked float32 kernel for ``n`` (with a Scaler before and a Normalizer
    after folded in where :func:`_folded_scaler` / :func:`_folded_normalizer` allow); False
    where it does not apply."""
    folded = _folded_scaler(em, n)
    x = folded[0].inputs[0] if folded else n.inputs[0]
    xs = em.shape(x)
    if len(xs) not in (1, 2):
        return False
    rows, f = (1, xs[0]) if len(xs) == 1 else (xs[0], xs[-1])
    plan = _linear_f32(n, f)
    if plan is None:
        return False
    w, b, mode, labels, post = plan
    nt = w.shape[0]
    off, scale = (folded[1], folded[2]) if folded else (np.zeros(0, np.float32),) * 2
    norm = _folded_normalizer(em, n, mode)
    ncols = 2 if mode == 2 else nt
    z = em.write((norm or n).outputs[-1]).reshape(em.sizes((rows, ncols)))
    y = (em.write(n.outputs[0]).reshape(em.sizes((rows,))) if mode
         else em.constant(("ml.nolabels", 0), lambda: np.zeros(1, np.int64)))
    c = em.constant
    par = em.split("linear", n, rows * f * nt, 1 << 16, rows)
    tiles = tuning.choose("linear.scores", features=f, classes=nt) == "tiles"
    if tiles:   # tiles read whole vectors of features: columns zero-padded
        pad = -int(f) % TILE_PAD
        off, scale, w = (np.pad(a, [(0, 0)] * (a.ndim - 1) + [(0, pad if a.size else 0)])
                         for a in (off, scale, w))
    else:       # rows: four classes at a time, rows zero-padded
        w = np.concatenate([w, np.zeros((-nt % 4, f))])
    em.call(_ml.linear_tiles_f32 if tiles else _ml.linear_rows_f32, em.shaped(x, (rows, f)),
            c(("ml.off", id(n), tiles), lambda: off), c(("ml.scale", id(n), tiles), lambda: scale),
            c(("ml.w", id(n), tiles), lambda: w.astype(np.float32)),
            c(("ml.b32", id(n)), lambda: b.astype(np.float32)), em.size(post),
            c(("ml.labels", id(n)), lambda: labels), em.size(mode),
            em.size(-1 if norm is None else _NORMS[_s(norm.attrs.get("norm", "MAX"))]),
            em.size(int(par)), z, y)
    return True


@lowering("LinearRegressor", domain=_ML, supports=_numeric_in)
def lower_linear_regressor(em: Emitter, n: Node) -> None:
    if _lower_linear_f32(em, n):
        return
    x, rows, f = _rows2d(em, n)
    w, b, nt = _coefs(em, n, f)
    post = _POST.get(_s(n.attrs.get("post_transform", "NONE")))
    if post is None or nt != int(n.attrs.get("targets", 1)):
        raise Unlowerable(n, "post_transform or targets")
    em.call(_ml.linear, x, w, b, em.size(post if nt > 1 or post == 4 else 0),
            em.write(n.outputs[0]).reshape(em.sizes((rows, nt))))


@lowering("LinearClassifier", domain=_ML, supports=lambda n: _numeric_in(n) and bool(
    n.attrs.get("classlabels_ints")))
def lower_linear_classifier(em: Emitter, n: Node) -> None:
    if _lower_linear_f32(em, n):
        return
    x, rows, f = _rows2d(em, n)
    w, b, nt = _coefs(em, n, f)
    labels = np.asarray(n.attrs["classlabels_ints"], np.int64)
    post = _POST.get(_s(n.attrs.get("post_transform", "NONE")))
    if post is None or nt < 2 or nt != len(labels):
        raise Unlowerable(n, "one coefficient row (binary scores) or labels != rows")
    em.call(_ml.linear_classifier, x, w, b, em.size(post),
            em.constant(("ml.labels", id(n)), lambda: labels),
            em.write(n.outputs[1]).reshape(em.sizes((rows, nt))),
            em.write(n.outputs[0]).reshape(em.sizes((rows,))))


def _folded_into_linear(em, n: Node) -> bool:
    """Scaler / Normalizer ``n`` is applied by the linear kernel next to it (nothing to emit)."""
    if n.op_type == "Scaler":
        users = [m for m in em.seg.nodes if any(i is n.outputs[0] for i in m.inputs)]
        return (len(users) == 1 and users[0].op_type in ("LinearClassifier", "LinearRegressor")
                and users[0].domain == _ML and _folded_scaler(em, users[0]) is not None)
    lin = n.inputs[0].producer
    if (lin is None or lin.op_type not in ("LinearClassifier", "LinearRegressor")
            or lin.domain != _ML or lin not in em.seg.nodes or lin.outputs[-1] is not n.inputs[0]):
        return False
    plan = _linear_f32(lin, _features(em, lin))
    return plan is not None and _folded_normalizer(em, lin, plan[2]) is n


def _features(em, n: Node) -> int:
    sc = _folded_scaler(em, n)
    xs = em.shape((sc[0] if sc else n).inputs[0])
    return xs[-1] if len(xs) in (1, 2) else 0


@lowering("Scaler", domain=_ML, supports=_numeric_in)
def lower_scaler(em: Emitter, n: Node) -> None:
    if _folded_into_linear(em, n):
        return
    x, rows, f = _rows2d(em, n)
    off = np.asarray(n.attrs.get("offset", [0.0]), np.float64)
    sc = np.asarray(n.attrs.get("scale", [1.0]), np.float64)
    if len(off) not in (1, f) or len(sc) not in (1, f):
        raise Unlowerable(n, "offset / scale length is neither 1 nor the feature count")
    em.call(_ml.scaler, x, em.constant(("ml.off", id(n)), lambda: off),
            em.constant(("ml.scale", id(n)), lambda: sc),
            em.write(n.outputs[0]).reshape(em.sizes((rows, f))))


_NORMS = {"MAX": 0, "L1": 1, "L2": 2}


@lowering("Normalizer", domain=_ML, supports=_numeric_in)
def lower_normalizer(em: Emitter, n: Node) -> None:
    if _folded_into_linear(em, n):
        return
    x, rows, f = _rows2d(em, n)
    norm = _NORMS.get(_s(n.attrs.get("norm", "MAX")))
    if norm is None:
        raise Unlowerable(n, "unknown norm")
    em.call(_ml.normalizer, x, em.size(norm), em.write(n.outputs[0]).reshape(em.sizes((rows, f))))


@lowering("ArrayFeatureExtractor", domain=_ML, supports=lambda n: _numeric_in(n) and (
    n.inputs[1] is not None and n.inputs[1].is_const))
def lower_array_feature_extractor(em: Emitter, n: Node) -> None:
    xs = em.shape(n.inputs[0])
    idx = np.asarray(n.inputs[1].const, np.int64).reshape(-1)
    f = xs[-1]
    if len(idx) and (idx.min() < 0 or idx.max() >= f):
        raise Unlowerable(n, f"indices {idx.tolist()} out of range for {f} features")
    rows = 1
    for d in xs[:-1]:
        rows = rows * d
    em.call(_ml.take_columns, em.shaped(n.inputs[0], (rows, f)),
            em.constant(("ml.idx", id(n)), lambda: idx),
            em.write(n.outputs[0]).reshape(em.sizes((rows, len(idx)))))


# --------------------------------------------------------------------------------------------
# preprocessing ops (skl2onnx's Binarizer, SimpleImputer, OneHotEncoder, LabelEncoder, ...);
# their string forms stay with the interpreter (Numba arrays hold no strings)
# --------------------------------------------------------------------------------------------
def _flat_io(em, n: Node):
    total = 1
    for d in em.shape(n.inputs[0]):
        total = total * d
    return (em.shaped(n.inputs[0], (total,)),
            em.write(n.outputs[0]).reshape(em.sizes((total,))), total)


def _scalar(em, n: Node, name: str, value, dtype):
    return em.constant(("ml." + name, id(n)), lambda: np.asarray([value], dtype))


@lowering("Binarizer", domain=_ML, supports=_numeric_in)
def lower_binarizer(em: Emitter, n: Node) -> None:
    x, y, _ = _flat_io(em, n)
    thr = float(n.attrs.get("threshold", 0.0))
    em.call(_ml.binarizer, x, _scalar(em, n, "thr", thr, np.float64), y)


@lowering("Imputer", domain=_ML, supports=_numeric_in)
def lower_imputer(em: Emitter, n: Node) -> None:
    at, dt = n.attrs, np.dtype(n.inputs[0].dtype)
    if dt.kind == "f":
        vals, rep = at.get("imputed_value_floats"), at.get("replaced_value_float", 0.0)
    else:
        vals, rep = at.get("imputed_value_int64s"), at.get("replaced_value_int64", 0)
    xs = em.shape(n.inputs[0])
    if vals is None or len(vals) == 0 or not xs:
        raise Unlowerable(n, f"no imputed values for a {dt} input (or a scalar input)")
    vals = np.asarray(vals).astype(dt)
    stride = xs[0] if len(xs) == 1 else xs[1]  # onnxruntime's: the second dimension
    x, y, _ = _flat_io(em, n)
    em.call(_ml.imputer, x, _scalar(em, n, "rep", rep, dt),
            em.constant(("ml.imputed", id(n)), lambda: vals), em.size(stride), y)


@lowering("OneHotEncoder", domain=_ML, supports=lambda n: _numeric_in(n) and bool(
    n.attrs.get("cats_int64s")))
def lower_one_hot_encoder(em: Emitter, n: Node) -> None:
    cats = [int(c) for c in n.attrs["cats_int64s"]]
    where = {c: i for i, c in enumerate(cats)}  # a repeated category: its last position
    keys = np.array(sorted(where), np.int64)
    pos = np.array([where[c] for c in keys.tolist()], np.int64)
    xs = em.shape(n.inputs[0])
    if len(xs) > 2:
        raise Unlowerable(n, "input must be 1-D or 2-D")
    total = 1
    for d in xs:
        total = total * d
    em.call(_ml.one_hot, em.shaped(n.inputs[0], (total,)),
            em.constant(("ml.cats", id(n)), lambda: keys),
            em.constant(("ml.catpos", id(n)), lambda: pos),
            em.size(int(n.attrs.get("zeros", 1) != 0)),
            em.write(n.outputs[0]).reshape(em.sizes((total, len(cats)))))


def _attr_array(at: dict, names):
    """The first of ``names`` present among the attributes, as an array (None if none)."""
    for name in names:
        v = at.get(name)
        if v is not None and not isinstance(v, (str, bytes)):
            return np.asarray(v).reshape(-1)
    return None


def _label_table(n: Node):
    """LabelEncoder's numeric (keys, values, default): keys sorted and unique (the first
    of repeated keys wins, as onnxruntime's map), a NaN key apart (None: none matches NaN)."""
    at = n.attrs
    keys = _attr_array(at, ("keys_int64s", "keys_floats", "keys_tensor"))
    vals = _attr_array(at, ("values_int64s", "values_floats", "values_tensor"))
    xdt, ydt = np.dtype(n.inputs[0].dtype), np.dtype(n.outputs[0].dtype)
    if keys is None or vals is None or keys.dtype.kind not in "fiu" or vals.dtype.kind not in "fiu":
        raise Unlowerable(n, "string keys or values (Numba arrays hold no strings)")
    if len(keys) != len(vals):
        raise Unlowerable(n, f"{len(keys)} keys for {len(vals)} values")
    default = _attr_array(at, ("default_tensor",))
    if default is None:
        default = np.asarray([at.get("default_int64", -1) if ydt.kind in "iu"
                              else at.get("default_float", -0.0)])
    table, nan = {}, None
    for k, v in zip(keys.astype(xdt).tolist(), vals.tolist()):
        if k != k:  # a NaN key matches NaN from LabelEncoder-4 on, nothing before (onnxruntime)
            nan = v if nan is None and n.since_version >= 4 else nan
        else:
            table.setdefault(k, v)
    ks = sorted(table)
    return (np.asarray(ks, xdt), np.asarray([table[k] for k in ks], ydt),
            default.astype(ydt)[:1], nan)


@lowering("LabelEncoder", domain=_ML, supports=lambda n: _numeric_in(n) and np.dtype(
    n.outputs[0].dtype).kind in "fiu")
def lower_label_encoder(em: Emitter, n: Node) -> None:
    keys, vals, default, nan = _label_table(n)
    ydt = vals.dtype
    x, y, _ = _flat_io(em, n)
    em.call(_ml.label_encode, x, em.constant(("ml.lkeys", id(n)), lambda: keys),
            em.constant(("ml.lvals", id(n)), lambda: vals),
            em.constant(("ml.ldefault", id(n)), lambda: default),
            _scalar(em, n, "lnan", 0 if nan is None else nan, ydt), em.size(int(nan is not None)),
            y)


@lowering("FeatureVectorizer", domain=_ML, supports=lambda n: all(
    v is not None and v.dtype is not None and np.dtype(v.dtype).kind in "fi" for v in n.inputs))
def lower_feature_vectorizer(em: Emitter, n: Node) -> None:
    dims = [int(d) for d in n.attrs.get("inputdimensions", [])]
    if len(dims) != len(n.inputs):
        raise Unlowerable(n, f"{len(dims)} inputdimensions for {len(n.inputs)} inputs")
    shapes = [em.shape(v) for v in n.inputs]
    rows = 1 if len(shapes[0]) <= 1 else shapes[0][0]
    y = em.write(n.outputs[0]).reshape(em.sizes((rows, sum(dims))))
    off = 0
    for v, xs, width in zip(n.inputs, shapes, dims):
        if not xs or (1 if len(xs) == 1 else xs[0]) != rows:
            raise Unlowerable(n, "a scalar input or inputs with different row counts")
        w = xs[0] if len(xs) == 1 else 1
        for d in xs[1:]:
            w = w * d
        em.call(_ml.put_columns, em.shaped(v, (rows, w)), em.size(off), em.size(width), y)
        off += width


# --------------------------------------------------------------------------------------------
# support vector machines
# --------------------------------------------------------------------------------------------
_KERNELS = {"LINEAR": 0, "POLY": 1, "RBF": 2}  # anything else is SIGMOID, as onnxruntime reads it


def _svm_kernel(em, n: Node, x, rows: int, sv: np.ndarray, linear_c=None):
    """Emit the kernel values of every row against every row of ``sv``; (rows, len(sv))
    float32. ``linear_c``: the liblinear form (LINEAR kernel plus that addend)."""
    at = n.attrs
    kp = [float(v) for v in at.get("kernel_params", [])] + [0.0, 0.0, 0.0]
    ktype = 0 if linear_c is not None else _KERNELS.get(_s(at.get("kernel_type", "LINEAR")), 3)
    params = np.array(kp[:3] + [linear_c or 0.0], np.float64)
    k = em.temp(rows * len(sv), np.float32).reshape(em.sizes((rows, len(sv))))
    par = em.split("svm", n, rows * sv.size, 1 << 16, rows)
    em.call(_ml.svm_kernel, x, em.constant(("ml.sv", id(n)), lambda: sv.astype(np.float32)),
            em.size(ktype), em.constant(("ml.kparams", id(n)), lambda: params),
            em.size(int(par)), k)
    return k


def _f32(at: dict, name: str) -> np.ndarray:
    return np.asarray(at.get(name, []), np.float32).reshape(-1)


@lowering("SVMClassifier", domain=_ML, supports=lambda n: _numeric_in(n) and bool(
    n.attrs.get("classlabels_ints")))
def lower_svm_classifier(em: Emitter, n: Node) -> None:
    at = n.attrs
    labels = np.asarray(at["classlabels_ints"], np.int64)
    nc, npair = len(labels), len(labels) * (len(labels) - 1) // 2
    vpc = [int(v) for v in at.get("vectors_per_class", [])]
    coef, rho, pa, pb = (_f32(at, a) for a in ("coefficients", "rho", "prob_a", "prob_b"))
    post = _POST.get(_s(at.get("post_transform", "NONE")))
    x, rows, f = _rows2d(em, n)
    if post is None or len(pa) != len(pb) or len(rho) == 0 or nc < 2:
        raise Unlowerable(n, "post_transform, prob_a / prob_b, rho or fewer than 2 labels")
    lab = em.constant(("ml.labels", id(n)), lambda: labels)
    z = em.write(n.outputs[1]).reshape(em.sizes((rows, em.shape(n.outputs[1])[-1])))
    y = em.write(n.outputs[0]).reshape(em.sizes((rows,)))
    if not vpc:  # liblinear: one coefficient row per class, rho[0] added to each
        if len(coef) != nc * f:
            raise Unlowerable(n, f"{len(coef)} coefficients for {nc} classes x {f} features")
        k = _svm_kernel(em, n, x, rows, coef.astype(np.float64).reshape(nc, f), float(rho[0]))
        em.call(_ml.svm_linear_classify, k, em.size(post), lab,
                em.size(int(bool(np.all(coef >= 0)))), em.size(int(len(pa) > 0)), z, y)
        return
    nv = sum(vpc)
    sv = np.asarray(at.get("support_vectors", []), np.float64)
    if (len(vpc) != nc or nv == 0 or len(sv) != nv * f or len(coef) < (nc - 1) * nv
            or len(rho) < npair or 0 < len(pa) < npair):
        raise Unlowerable(n, "support vectors, coefficients, rho or prob_a do not match "
                          f"{nc} classes x {nv} vectors x {f} features")
    if nc == 2 and not len(pa) and post == 4:
        raise Unlowerable(n, "PROBIT over one binary decision value (onnxruntime leaves the "
                          "second score unwritten)")
    starts = np.cumsum([0] + vpc[:-1]).astype(np.int64)
    k = _svm_kernel(em, n, x, rows, sv.reshape(nv, f))
    c = em.constant
    em.call(_ml.svm_classify, k, c(("ml.svcoef", id(n)), lambda: coef[:(nc - 1) * nv].reshape(nc - 1, nv)),
            c(("ml.rho", id(n)), lambda: rho), c(("ml.svstart", id(n)), lambda: starts),
            c(("ml.svcount", id(n)), lambda: np.asarray(vpc, np.int64)),
            c(("ml.proba", id(n)), lambda: pa), c(("ml.probb", id(n)), lambda: pb),
            em.size(post), lab, z, y)


@lowering("SVMRegressor", domain=_ML, supports=_numeric_in)
def lower_svm_regressor(em: Emitter, n: Node) -> None:
    at = n.attrs
    coef, rho = _f32(at, "coefficients"), _f32(at, "rho")
    nv = int(at.get("n_supports", 0))
    x, rows, f = _rows2d(em, n)
    if len(rho) == 0 or len(coef) != (nv if nv > 0 else f):
        raise Unlowerable(n, f"{len(coef)} coefficients for {nv} vectors / {f} features")
    if nv > 0:
        sv = np.asarray(at.get("support_vectors", []), np.float64)
        if len(sv) != nv * f:
            raise Unlowerable(n, f"{len(sv)} support vector values for {nv} x {f} features")
        k = _svm_kernel(em, n, x, rows, sv.reshape(nv, f))
        w, b = coef.astype(np.float64), rho[:1].astype(np.float64)
    else:  # liblinear: the kernel values are the predictions
        k = _svm_kernel(em, n, x, rows, coef.astype(np.float64).reshape(1, f), float(rho[0]))
        w, b = np.ones(1), np.zeros(1)
    em.call(_ml.svm_regress, k, em.constant(("ml.svw", id(n)), lambda: w),
            em.constant(("ml.svb", id(n)), lambda: b), em.size(int(at.get("one_class", 0) != 0)),
            em.write(n.outputs[0]).reshape(em.sizes((rows, 1))))
