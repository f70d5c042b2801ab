"""Ops on string tensors, run as steps between compiled segments.

Numba arrays hold no strings, so no lowering takes a string tensor. What scikit-learn models
converted by skl2onnx do with strings is narrow: pick columns of a string input (Gather,
ArrayFeatureExtractor), reshape and concatenate them, map them to numbers (OneHotEncoder,
LabelEncoder, CategoryMapper) and, for classifiers trained on string labels, map the
predicted class back to its name. Those ops, where a string tensor is among their inputs or
outputs, are placed on :data:`~jitort.partition.DYNAMIC` steps (as
:mod:`jitort.dynamic_ops`'s are) whose flows are numpy array operations and dict lookups made
once per node: no per-call interpretation, and strict mode accepts them. Everything numeric
around them compiles as usual. The ai.onnx string ops run so too: Equal on strings,
StringConcat, StringSplit (Python's ``str.split``), RegexFullMatch (Python's ``re`` with ASCII
classes, as RE2's); the text ops of :mod:`jitort.text_ops` as well, and DictVectorizer (a
map input, given as a dict).

Classifiers with string labels (:func:`index_labels`, at import) are rewritten to compute the
class *index* (int64 labels ``0 .. K-1``, compiled with the other numeric ML ops) followed by
an ai.onnx.ml LabelEncoder from index to name, as onnxruntime computes them (its string-label
classifiers run on indices too). String outputs are numpy object arrays of ``str``, as
onnxruntime returns them.

Semantics are onnxruntime's (tests/test_string_ops.py compares every op against it): missing
keys take the node's default (LabelEncoder / CategoryMapper: ``default_string`` "_Unused",
``default_int64`` -1, ``default_float`` -0.0), the first of repeated LabelEncoder keys wins
(the last of repeated opset-1 ``classes_strings``), OneHotEncoder's repeated category takes its last position and, with ``zeros=0``, an unknown
category is an error.
"""
from __future__ import annotations

from itertools import repeat
from typing import Callable

import numpy as np

from .errors import InvalidInput, InvalidModel
from .ir import Graph, Node, Value
from .interpreter.registry import Defer, fast, lookup
from .partition import DYNAMIC, INTERP
from .shapes.core import register_dtypes
from .strings import STRING
from .strings import as_text as _text
from .strings import string_array as _str_array
from .strings import string_list as _strings
from .text_ops import TEXT_FLOWS

_ML = "ai.onnx.ml"
#: classifier -> the attribute holding its integer labels
_INT_LABELS = {"TreeEnsembleClassifier": "classlabels_int64s",
               "LinearClassifier": "classlabels_ints", "SVMClassifier": "classlabels_ints"}


def _is_str(v: Value | None) -> bool:
    return v is not None and v.dtype is not None and np.dtype(v.dtype) == STRING


# --- classifiers with string labels ------------------------------------------------------------

def index_labels(graph: Graph) -> int:
    """Rewrite every classifier with ``classlabels_strings`` to integer labels ``0 .. K-1``
    followed by a LabelEncoder (int64 index -> label string). Returns how many were."""
    done = 0
    for n in list(graph.nodes):
        attr = _INT_LABELS.get(n.op_type)
        names = n.attrs.get("classlabels_strings") if attr and n.domain == _ML else None
        if not names or not n.outputs or n.outputs[0].name == "":
            continue
        if n.attrs.get(attr):
            raise InvalidModel(f"node {n.label}: both classlabels_strings and {attr}")
        y = n.outputs[0]
        index = Value(graph.fresh_name(y.name + "_index"), np.dtype(np.int64), y.shape,
                      producer=n)
        del n.attrs["classlabels_strings"]
        n.attrs[attr] = list(range(len(names)))
        n.outputs[0] = index
        n.proto = None
        enc = Node("LabelEncoder", [index], [y], {
            "keys_int64s": list(range(len(names))), "values_strings": [_text(s) for s in names],
            "default_string": "_Unused"}, domain=_ML, name=(n.name or n.op_type) + "_labels",
            since_version=2)
        y.producer = enc
        graph.nodes.insert(graph.nodes.index(n) + 1, enc)
        done += 1
    return done


# --- placement ---------------------------------------------------------------------------------

def claim(graph: Graph, placement: dict) -> tuple[dict, dict]:
    """Place every interpreted op of :data:`_FLOWS` that reads or writes a string tensor, and
    every text op (:data:`TEXT_OPS`, whatever its element types), on :data:`DYNAMIC`. Returns
    ``(flows, reasons)`` as :func:`jitort.dynamic_ops.claim`."""
    flows, reasons = {}, {}
    for n in graph.nodes:
        if placement.get(id(n)) != INTERP:
            continue
        key = (n.domain, n.op_type)
        make = _FLOWS.get(key)
        if make is None or not (key in TEXT_OPS or key in _ANY_TYPE
                                or any(map(_is_str, n.inputs + n.outputs))):
            continue
        try:
            flow = make(n)
        except _Declined as e:
            reasons[n.label] = str(e)
            continue
        if not hasattr(flow, "kernels"):
            flow.kernels = list  # numpy and dict lookups: no Numba kernel to find in the cache
        flows[id(n)] = flow
        placement[id(n)] = DYNAMIC
    return flows, reasons


class _Declined(Exception):
    """A form of the op these flows do not take (it stays with the interpreter)."""


# --- lookups -----------------------------------------------------------------------------------

def _attr_list(n: Node, *names):
    for name in names:
        v = n.attrs.get(name)
        if v is not None and not (isinstance(v, (list, tuple, np.ndarray)) and len(v) == 0):
            return np.asarray(v).reshape(-1).tolist() if isinstance(v, np.ndarray) else list(v)
    return None


def _lookup(n: Node, table: dict, default, out_dtype: np.dtype) -> Callable:
    """A flow mapping each element through ``table`` (``default`` where absent)."""
    key_str = _is_str(n.inputs[0])

    def run(args: list) -> list:
        x = np.asarray(args[0])
        keys = _strings(x) if key_str else x.reshape(-1).tolist()
        got = list(map(table.get, keys, repeat(default, len(keys))))
        if out_dtype == STRING:
            return [_str_array(got, x.shape)]
        return [np.array(got, out_dtype).reshape(x.shape)]
    return run


def _nan_key(table: dict, matches: bool) -> dict:
    """Float keys: NaN cannot be found by equality. From LabelEncoder-4 on a NaN key matches
    NaN inputs (``matches``); before, it matches nothing (onnxruntime)."""
    nan = [v for k, v in table.items() if isinstance(k, float) and k != k]
    if not nan or not matches:
        return {k: v for k, v in table.items() if not (isinstance(k, float) and k != k)}

    class _NanTable(dict):
        def get(self, k, d=None):
            return nan[0] if isinstance(k, float) and k != k else dict.get(self, k, d)
    return _NanTable((k, v) for k, v in table.items() if not (isinstance(k, float) and k != k))


def _label_encoder(n: Node) -> Callable:
    ydt = np.dtype(n.outputs[0].dtype)
    if n.since_version < 2 or "classes_strings" in n.attrs:  # opset 1: index <-> class name
        classes = [_text(s) for s in n.attrs.get("classes_strings", [])]
        if _is_str(n.inputs[0]):
            table = {c: i for i, c in enumerate(classes)}  # a repeated name: its last
            return _lookup(n, table, int(n.attrs.get("default_int64", -1)), ydt)
        return _lookup(n, dict(enumerate(classes)),
                       _text(n.attrs.get("default_string", "_Unused")), ydt)
    keys = _attr_list(n, "keys_strings", "keys_int64s", "keys_floats", "keys_tensor")
    vals = _attr_list(n, "values_strings", "values_int64s", "values_floats", "values_tensor")
    if keys is None or vals is None:
        raise InvalidModel(f"LabelEncoder node {n.label}: keys and values are required")
    if len(keys) != len(vals):
        raise InvalidModel(f"LabelEncoder node {n.label}: {len(keys)} keys for {len(vals)} values")
    if _is_str(n.inputs[0]):
        keys = [_text(k) for k in keys]
    if ydt == STRING:
        vals = [_text(v) for v in vals]
    dt = n.attrs.get("default_tensor")
    if dt is not None:
        default = np.asarray(dt).reshape(-1)[0]
        default = _text(default) if ydt == STRING else default.item()
    elif ydt == STRING:
        default = _text(n.attrs.get("default_string", "_Unused"))
    elif ydt.kind in "iu":
        default = int(n.attrs.get("default_int64", -1))
    else:
        default = float(n.attrs.get("default_float", -0.0))
    table: dict = {}
    for k, v in zip(keys, vals):
        table.setdefault(k, v)  # the first of repeated keys, as onnxruntime's map
    return _lookup(n, _nan_key(table, n.since_version >= 4), default, ydt)


def _category_mapper(n: Node) -> Callable:
    cats = [_text(s) for s in n.attrs.get("cats_strings", [])]
    ints = [int(i) for i in n.attrs.get("cats_int64s", [])]
    if len(cats) != len(ints):
        raise InvalidModel(f"CategoryMapper node {n.label}: {len(cats)} cats_strings for "
                           f"{len(ints)} cats_int64s")
    ydt = np.dtype(n.outputs[0].dtype)
    if _is_str(n.inputs[0]):
        return _lookup(n, dict(zip(cats, ints)), int(n.attrs.get("default_int64", -1)), ydt)
    return _lookup(n, dict(zip(ints, cats)), _text(n.attrs.get("default_string", "_Unused")), ydt)


def _one_hot_encoder(n: Node) -> Callable:
    cats = n.attrs.get("cats_strings")
    if not cats:
        raise _Declined("a string input needs cats_strings")
    where = {_text(c): i for i, c in enumerate(cats)}  # a repeated category: its last position
    width, zeros = len(cats), int(n.attrs.get("zeros", 1)) != 0
    ydt = np.dtype(n.outputs[0].dtype) if n.outputs[0].dtype is not None else np.dtype(np.float32)

    def run(args: list) -> list:
        x = np.asarray(args[0])
        keys = _strings(x)
        pos = np.fromiter(map(where.get, keys, repeat(-1, len(keys))), np.int64, len(keys))
        found = pos >= 0
        if not zeros and not found.all():
            raise InvalidInput(f"OneHotEncoder node {n.label}: category "
                               f"{keys[int(np.argmin(found))]!r} is not among cats_strings "
                               "and zeros=0")
        out = np.zeros((len(keys), width), ydt)
        rows = np.flatnonzero(found)
        out[rows, pos[rows]] = 1
        return [out.reshape(x.shape + (width,))]
    return run


# --- data movement -----------------------------------------------------------------------------

#: ai.onnx data movement on string tensors: the interpreter's numpy fast paths
#: (jitort/interpreter/numpy_ops.py) run it as it is, every opset form included
_MOVES = ("Gather", "Reshape", "Concat", "Flatten", "Squeeze", "Unsqueeze", "Transpose",
          "Identity")


def _numpy_move(n: Node) -> Callable:
    """The interpreter's numpy fast path for data-movement node ``n`` as a flow: unicode
    arrays fed as object arrays of str (the form string tensors take here), its errors as
    :class:`InvalidInput` naming the node."""
    build = lookup(n.domain, n.op_type, n.since_version)
    if build is None:
        raise _Declined(f"no numpy {n.op_type} for opset {n.since_version}")
    run = build(n)

    def flow(args: list) -> list:
        args = [a.astype(object) if isinstance(a, np.ndarray) and a.dtype.kind == "U" else a
                for a in args]
        try:
            return run(args)
        except Defer:
            raise InvalidInput(f"{n.op_type} node {n.label}: inputs of types "
                               f"{[getattr(a, 'dtype', type(a).__name__) for a in args]} "
                               "it does not take") from None
        except IndexError as e:
            raise InvalidInput(f"{n.op_type} node {n.label}: an index is out of range: {e}") \
                from None
        except ValueError as e:
            raise InvalidInput(f"{n.op_type} node {n.label}: {e}") from None
    return flow


def _indices(n: Node, idx, size: int) -> np.ndarray:
    idx = np.asarray(idx, np.int64)
    if idx.size and (idx.min() < -size or idx.max() >= size):
        raise InvalidInput(f"{n.op_type} node {n.label}: an index is out of range for a "
                           f"dimension of {size}")
    return np.where(idx < 0, idx + size, idx)


def _array_feature_extractor(n: Node) -> Callable:
    def run(args: list) -> list:
        x = np.asarray(args[0])
        idx = _indices(n, np.asarray(args[1]).reshape(-1), x.shape[-1])
        y = np.take(x, idx, axis=-1)
        return [y.reshape(1, -1) if x.ndim == 1 else y]  # onnxruntime's: 1-D in, (1, k) out
    return run


def _dict_vectorizer(n: Node) -> Callable:
    """A map input (a dict) as one row ``(1, len(vocabulary))``: each key's value at its
    vocabulary position, zeros elsewhere, keys outside the vocabulary dropped (onnxruntime's)."""
    tp = n.inputs[0].type_proto if n.inputs[0] is not None else None
    if tp is not None and tp.HasField("map_type"):
        from onnx import TensorProto as T
        kv = (tp.map_type.key_type, tp.map_type.value_type.tensor_type.elem_type)
        if kv not in {(T.STRING, T.INT64), (T.INT64, T.STRING), (T.INT64, T.FLOAT),
                      (T.INT64, T.DOUBLE), (T.STRING, T.FLOAT), (T.STRING, T.DOUBLE)}:
            names = [T.DataType.Name(k).lower() for k in kv]
            raise InvalidModel(f"DictVectorizer node {n.label}: input type map({names[0]}, "
                               f"tensor({names[1]})) is not one the op takes")
    strings = bool(n.attrs.get("string_vocabulary"))
    vocab = n.attrs.get("string_vocabulary") or n.attrs.get("int64_vocabulary") or []
    index = {(_text(k) if strings else int(k)): i for i, k in enumerate(vocab)}
    dt = np.dtype(n.outputs[0].dtype) if n.outputs[0].dtype is not None else np.dtype(np.float32)

    def run(args: list) -> list:
        m = args[0]
        if not isinstance(m, dict):
            raise InvalidInput(f"DictVectorizer node {n.label}: its input is a map (a dict of "
                               f"{'str' if strings else 'int'} keys), not {type(m).__name__}")
        out = np.zeros((1, len(vocab)), dt)
        for k, v in m.items():
            i = index.get(_text(k) if strings else k)
            if i is not None:
                out[0, i] = v
        return [out]
    return run


# --- string comparisons and edits (ai.onnx) --------------------------------------------------

def _obj(a) -> np.ndarray:
    """A string tensor as an object array of str (unicode arrays converted)."""
    a = np.asarray(a)
    return a.astype(object) if a.dtype.kind == "U" else a


def _broadcast(n: Node, a, b) -> tuple:
    try:
        return np.broadcast_arrays(_obj(a), _obj(b))
    except ValueError:
        raise InvalidInput(f"{n.op_type} node {n.label}: shapes {np.shape(a)} and "
                           f"{np.shape(b)} do not broadcast") from None


def _pairs(n: Node, args: list) -> tuple:
    """The two inputs broadcast: ``(pairs of their elements in order, the shape)``."""
    a, b = _broadcast(n, args[0], args[1])
    return zip(a.reshape(-1).tolist(), b.reshape(-1).tolist()), a.shape


def _equal(n: Node) -> Callable:
    if not all(map(_is_str, n.inputs)):
        raise _Declined("Equal compares two string tensors here")

    def run(args: list) -> list:
        pairs, shape = _pairs(n, args)
        return [np.array([x == y for x, y in pairs], bool).reshape(shape)]
    return run


def _string_concat(n: Node) -> Callable:
    def run(args: list) -> list:
        pairs, shape = _pairs(n, args)
        return [_str_array([_text(x) + _text(y) for x, y in pairs], shape)]
    return run


def _string_split(n: Node) -> Callable:
    """Python's str.split: on ``delimiter``, or on runs of whitespace where it is empty or
    absent, at most ``maxsplit`` times; Y padded with empty strings to the most pieces, Z the
    count of each."""
    delim = _text(n.attrs.get("delimiter", "")) or None
    maxsplit = n.attrs.get("maxsplit")
    maxsplit = -1 if maxsplit is None else int(maxsplit)

    def run(args: list) -> list:
        x = np.asarray(args[0])
        parts = [s.split(delim, maxsplit) for s in _strings(x)]
        width = max(map(len, parts), default=0)
        y = _str_array([p for ps in parts for p in ps + [""] * (width - len(ps))],
                       x.shape + (width,))
        return [y, np.array([len(ps) for ps in parts], np.int64).reshape(x.shape)]
    return run


def _regex_full_match(n: Node) -> Callable:
    """Whether each string matches ``pattern`` whole; ``\\w`` / ``\\d`` / ``\\s`` ASCII-only, as
    RE2's (onnxruntime's engine)."""
    import re
    pattern = _text(n.attrs.get("pattern", ""))
    try:
        rx = re.compile(pattern, re.ASCII)
    except re.error as e:
        raise InvalidModel(f"RegexFullMatch node {n.label}: pattern {pattern!r} does not "
                           f"compile: {e}") from None

    def run(args: list) -> list:
        x = np.asarray(args[0])
        return [np.array([rx.fullmatch(s) is not None for s in _strings(x)],
                         bool).reshape(x.shape)]
    return run


#: (domain, op) -> flow factory (``_Declined`` where the node's form is not taken)
_FLOWS = {
    (_ML, "LabelEncoder"): _label_encoder,
    (_ML, "CategoryMapper"): _category_mapper,
    (_ML, "OneHotEncoder"): _one_hot_encoder,
    (_ML, "ArrayFeatureExtractor"): _array_feature_extractor,
    **{("", op): _numpy_move for op in _MOVES},
    ("", "Equal"): _equal,
    ("", "StringConcat"): _string_concat,
    ("", "StringSplit"): _string_split,
    ("", "RegexFullMatch"): _regex_full_match,
    (_ML, "DictVectorizer"): _dict_vectorizer,
}
#: ops claimed on any element type where they stay interpreted (their flows are plain numpy
#: data movement): ArrayFeatureExtractor with indices computed at run time, DictVectorizer (a
#: map input)
_ANY_TYPE = frozenset({(_ML, "ArrayFeatureExtractor"), (_ML, "DictVectorizer")})


# --- text ops (jitort/text_ops.py) -------------------------------------------------------------

_MS = "com.microsoft"
#: skl2onnx's text ops: string steps, also the interpreter's fast paths (onnx.reference has no
#: Tokenizer or MurmurHash3, and its TfIdfVectorizer is not onnxruntime's)
TEXT_OPS = frozenset({("", "StringNormalizer"), (_MS, "Tokenizer"), ("", "TfIdfVectorizer"),
                      (_MS, "MurmurHash3")})


for _key in TEXT_OPS:
    _FLOWS[_key] = TEXT_FLOWS[_key]
    fast(_key[1], domain=_key[0])(_FLOWS[_key])


@register_dtypes("Tokenizer", domain=_MS)
def _tokenizer_dtypes(dts: list) -> list:
    return [STRING]


@register_dtypes("MurmurHash3", domain=_MS, attrs=True)
def _murmur3_dtypes(dts: list, attrs: dict) -> list:
    return [np.dtype(np.uint32 if int(attrs.get("positive", 1)) else np.int32)]
