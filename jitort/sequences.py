"""Sequence and optional values, run as control steps (not in the interpreter).

A sequence is a container of tensors and an optional a tensor, a sequence or nothing; as in
onnxruntime their ops are list operations, not kernels. At run time a sequence value is a
Python ``list`` of C-contiguous arrays and an optional is ``None`` or its value; graph inputs
and outputs of those types are taken and returned the same way.

:func:`claim` places these ops on :data:`~jitort.partition.CONTROL` (a control step between
compiled segments, like an If / Loop / Scan; counted as compiled in strict mode):

* container ops: SequenceEmpty, SequenceConstruct, SequenceInsert, SequenceErase, SequenceAt,
  SequenceLength, Optional, OptionalGetElement, OptionalHasElement, and Identity of a sequence
  or an optional. Every op returns a new list (the input list is never changed): values in the
  executor's ``env`` are never written after they are made.
* data movement: SplitToSequence slices its input (numpy basic slicing along the axis, each
  piece made C-contiguous: a copy of exactly its bytes) and ConcatFromSequence joins the
  elements (``np.concatenate``, or ``np.stack`` for ``new_axis=1``): exact copies of the
  elements' bytes. jitort's compiled Split / Concat take a number of operands fixed when their
  segment is generated, while a sequence's length is known only at run time, so these two use
  numpy's copies.

SequenceMap, whose body is compiled like a Loop body, is a control-flow op
(:class:`jitort.control_flow.SequenceMapFlow`).

Semantics are ONNX's: positions may be negative (counted from the end); a position out of
range, an element whose type differs from the sequence's, an empty sequence given to
ConcatFromSequence or an empty optional given to OptionalGetElement raise
:class:`~jitort.errors.InvalidInput` naming the node.
"""
from __future__ import annotations

import numpy as np
from onnx import helper

from .errors import InvalidInput
from .ir import Node
from .partition import CONTROL, INTERP

#: the ops :func:`claim` places on control steps (Identity only on a sequence / optional)
SEQUENCE_OPS = ("SequenceEmpty", "SequenceConstruct", "SequenceInsert", "SequenceErase",
                "SequenceAt", "SequenceLength", "SplitToSequence", "ConcatFromSequence",
                "Optional", "OptionalGetElement", "OptionalHasElement", "Identity")


def claim(graph, placement: dict, elem: dict) -> dict:
    """Place every interpreted sequence / optional op of ``graph`` on :data:`CONTROL`
    (``elem``: :func:`element_types`). Returns ``id(node) -> flow`` (the step's callable)."""
    flows = {}
    for n in graph.nodes:
        if placement.get(id(n)) != INTERP or n.domain != "" or n.op_type not in SEQUENCE_OPS:
            continue
        if n.op_type == "Identity" and n.inputs[0].dtype is not None:
            continue  # a tensor Identity is a lowering's business
        flows[id(n)] = _Flow(n, elem)
        placement[id(n)] = CONTROL
    return flows


def element_types(graph) -> dict[int, np.dtype]:
    """``id(value) -> element type`` of the sequences whose element type the graph fixes
    (declared or inferred at import, SequenceEmpty's ``dtype``, the tensors a sequence is
    built from), propagated through the ops that keep it."""
    elem: dict[int, np.dtype] = {}
    for v in graph.inputs:
        _declared(v, elem)
    for n in graph.nodes:
        for v in n.outputs:
            _declared(v, elem)
        if n.domain != "" or not n.outputs or id(n.outputs[0]) in elem:
            continue
        op, out = n.op_type, id(n.outputs[0])
        if op == "SequenceEmpty":
            elem[out] = np.dtype(helper.tensor_dtype_to_np_dtype(n.attrs.get("dtype", 1)))
        elif op in ("SequenceConstruct", "SplitToSequence") and n.inputs[0].dtype is not None:
            elem[out] = np.dtype(n.inputs[0].dtype)
        elif op in ("SequenceInsert", "SequenceErase", "Identity") and n.inputs[0] is not None:
            dt = elem.get(id(n.inputs[0]))
            if dt is None and op == "SequenceInsert" and n.inputs[1].dtype is not None:
                dt = np.dtype(n.inputs[1].dtype)
            if dt is not None:
                elem[out] = dt
    return elem


def _declared(v, elem: dict) -> None:
    """Record the element type of a value typed ``seq(tensor(T))`` at import."""
    tp = v.type_proto
    if tp is None or not tp.HasField("sequence_type"):
        return
    et = tp.sequence_type.elem_type
    if et.HasField("tensor_type") and et.tensor_type.elem_type:
        elem[id(v)] = np.dtype(helper.tensor_dtype_to_np_dtype(et.tensor_type.elem_type))


# --- checking run-time values ------------------------------------------------------------------

def sequence(node: Node, x, what: str = "input sequence", dt: np.dtype | None = None) -> list:
    """``x`` as a sequence: a list or tuple of arrays (a graph input is taken as given), each
    of element type ``dt`` where the model fixes it."""
    if not isinstance(x, (list, tuple)):
        raise InvalidInput(f"{node.label}: {what} must be a sequence (a list of arrays), "
                           f"got {type(x).__name__}")
    out = []
    for k, a in enumerate(x):
        if not isinstance(a, np.ndarray):
            try:
                a = np.asarray(a)
            except Exception:
                raise InvalidInput(f"{node.label}: element {k} of the {what} is not an "
                                   f"array ({type(a).__name__})") from None
            if a.dtype == object:
                raise InvalidInput(f"{node.label}: element {k} of the {what} is not a "
                                   "numeric array")
        if dt is not None and a.dtype != dt:
            raise InvalidInput(f"{node.label}: element {k} of the {what} is {a.dtype}, the "
                               f"model declares {np.dtype(dt).name}")
        out.append(a)
    return out


def _input(node: Node, elem: dict, args: list) -> list:
    """A container op's input 0, a sequence, checked."""
    return sequence(node, args[0], dt=elem.get(id(node.inputs[0])))


def _contiguous(a: np.ndarray) -> np.ndarray:
    """``a`` C-contiguous, rank kept (compiled segments take contiguous arrays only)."""
    return a if a.flags.c_contiguous else a.copy()


def _position(node: Node, p, n: int, insert: bool = False) -> int:
    """A position in a sequence of length ``n``, negative ones counted from the end: valid in
    ``[-n, n - 1]``, or ``[-n, n]`` for an insertion."""
    p = np.asarray(p)
    if p.size != 1 or p.dtype.kind not in "iu":
        raise InvalidInput(f"{node.label}: position must be one integer, got {p.dtype} "
                           f"of shape {p.shape}")
    i = int(p.reshape(-1)[0])
    hi = n if insert else n - 1
    if not -n <= i <= hi:
        raise InvalidInput(f"{node.label}: position {i} is out of range for a sequence of "
                           f"length {n} (valid: {-n} to {hi})")
    return i + n if i < 0 else i


def _check_type(node: Node, seq: list, t: np.ndarray, dt: np.dtype | None) -> None:
    want = dt if dt is not None else (seq[0].dtype if seq else None)
    if want is not None and t.dtype != want:
        raise InvalidInput(f"{node.label}: a {t.dtype} tensor cannot go into a sequence of "
                           f"{np.dtype(want).name} tensors")


def _check_out(node: Node, a: np.ndarray) -> np.ndarray:
    """A tensor output: of the type the graph gives the output (an element of a sequence fed
    by the caller may be of another), C-contiguous."""
    want = node.outputs[0].dtype
    if want is not None and a.dtype != want:
        raise InvalidInput(f"{node.label}: the sequence holds {a.dtype} tensors where the "
                           f"model expects {np.dtype(want).name}")
    return _contiguous(a)


def copy_value(x):
    """A value of its own: an array copied, a sequence as a new list of copies, None as is."""
    if x is None:
        return None
    if isinstance(x, (list, tuple)):
            return [np.array(a, copy=True, order="C") for a in x]
    return np.array(x, copy=True, order="C")


# --- the container ops -------------------------------------------------------------------------

def _empty(node, elem, args):
    return []


def _construct(node, elem, args):
    dts = {a.dtype for a in args}
    if len(dts) > 1:
        raise InvalidInput(f"{node.label}: tensors of different types {sorted(map(str, dts))}")
    return [_contiguous(np.asarray(a)) for a in args]


def _insert(node, elem, args):
    seq = _input(node, elem, args)
    t = np.asarray(args[1])
    _check_type(node, seq, t, elem.get(id(node.inputs[0])))
    i = len(seq) if len(args) < 3 or args[2] is None else _position(node, args[2], len(seq), True)
    return seq[:i] + [_contiguous(t)] + seq[i:]


def _erase(node, elem, args):
    seq = _input(node, elem, args)
    if len(args) < 2 or args[1] is None:
        if not seq:
            raise InvalidInput(f"{node.label}: cannot erase from an empty sequence")
        return seq[:-1]
    i = _position(node, args[1], len(seq))
    return seq[:i] + seq[i + 1:]


def _at(node, elem, args):
    seq = _input(node, elem, args)
    return _check_out(node, seq[_position(node, args[1], len(seq))])


def _length(node, elem, args):
    return np.array(len(_input(node, elem, args)), np.int64)


def _split(node, elem, args):
    x = np.asarray(args[0])
    split = args[1] if len(args) > 1 else None
    axis = int(node.attrs.get("axis", 0))
    if not -x.ndim <= axis < x.ndim:
        raise InvalidInput(f"{node.label}: axis {axis} is out of range for a rank-{x.ndim} input")
    axis %= x.ndim
    dim = x.shape[axis]
    if split is None:
        sizes = [1] * dim
    else:
        split = np.asarray(split)
        if split.dtype.kind not in "iu" or split.ndim > 1:
            raise InvalidInput(f"{node.label}: split must be an integer scalar or 1-D tensor")
        if split.ndim == 0:
            size = int(split)
            if size <= 0:
                raise InvalidInput(f"{node.label}: split size {size} must be positive")
            sizes = [size] * (dim // size) + ([dim % size] if dim % size else [])
        else:
            sizes = [int(s) for s in split]
            if any(s < 0 for s in sizes) or sum(sizes) != dim:
                raise InvalidInput(f"{node.label}: split sizes {sizes} do not cover the "
                                   f"{dim} entries of axis {axis}")
    squeeze = split is None and not node.attrs.get("keepdims", 1)
    out, start = [], 0
    index = [slice(None)] * x.ndim
    for s in sizes:
        index[axis] = start if squeeze else slice(start, start + s)
        out.append(np.array(x[tuple(index)], copy=True, order="C"))
        start += s
    return out


def _concat(node, elem, args):
    seq = _input(node, elem, args)
    if not seq:
        raise InvalidInput(f"{node.label}: cannot concatenate an empty sequence")
    axis, new_axis = int(node.attrs["axis"]), int(node.attrs.get("new_axis", 0))
    r = seq[0].ndim + new_axis
    if not -r <= axis < r:
        raise InvalidInput(f"{node.label}: axis {axis} is out of range for rank-{seq[0].ndim} "
                           f"elements" + (" with new_axis=1" if new_axis else ""))
    if len({a.dtype for a in seq}) > 1:
        raise InvalidInput(f"{node.label}: the sequence mixes element types")
    try:
        y = np.stack(seq, axis=axis) if new_axis else np.concatenate(seq, axis=axis)
    except ValueError as e:
        raise InvalidInput(f"{node.label}: elements cannot be joined: {e}") from None
    return _check_out(node, y)


def _optional(node, elem, args):
    return args[0] if args else None


def _get_element(node, elem, args):
    if args[0] is None:
        raise InvalidInput(f"{node.label}: the optional input is empty")
    return copy_value(args[0])


def _has_element(node, elem, args):
    return np.array(bool(args) and args[0] is not None)


def _identity(node, elem, args):
    return copy_value(args[0])


_OPS = {"SequenceEmpty": _empty, "SequenceConstruct": _construct, "SequenceInsert": _insert,
        "SequenceErase": _erase, "SequenceAt": _at, "SequenceLength": _length,
        "SplitToSequence": _split, "ConcatFromSequence": _concat, "Optional": _optional,
        "OptionalGetElement": _get_element, "OptionalHasElement": _has_element,
        "Identity": _identity}


class _Flow:
    """One container op as a control step: its inputs to its single output."""

    def __init__(self, node: Node, elem: dict):
        self.node, self.fn = node, _OPS[node.op_type]
        self.elem = {id(v): elem[id(v)] for v in node.inputs if v is not None and id(v) in elem}

    def __call__(self, args: list) -> list:
        # an omitted optional input arrives as None
        return [self.fn(self.node, self.elem, list(args[:len(self.node.inputs)]))]
