"""Ops whose output shape depends on the input *values*: NonZero, Compress, Unique,
NonMaxSuppression, run as *dynamic steps*.

A compiled segment is planned per input-shape signature, with one static workspace: an output
whose size is known only once the op has run cannot be placed in it. Such a node is placed on
:data:`~jitort.partition.DYNAMIC` and scheduled between segments, as a control step is
(:class:`~jitort.partition.DynamicStep`): the executor calls its flow on the input arrays, the
flow runs the op's compiled kernels (``kernels/cpu/select.py``: count, then fill an array
allocated for that count, or fill an upper-bound buffer and return the count) and its outputs
land in ``env`` as fresh arrays, outside any workspace. The segments after it are planned per
the resulting shapes (their plan cache: a new count is a new plan, replayed from the recording,
never a new compilation). The node counts as compiled (strict mode accepts it): its work runs
in compiled code.

Semantics are onnx.reference's (numpy's ``nonzero`` / ``compress`` / ``unique``, the
reference's NonMaxSuppression). A node whose element types the kernels do not handle stays on
the interpreter, with the reason in ``fallback_reasons``.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from .errors import InvalidInput
from .feeds import HALF_DTYPES
from .ir import Node
from .partition import DYNAMIC, INTERP

#: numeric element types the comparing kernels take (16-bit floats widened to float32 first)
_NUMERIC = "biuf"


def claim(graph, placement: dict) -> tuple[dict, dict]:
    """Place every interpreted NonZero / Compress / Unique / NonMaxSuppression whose element
    types the kernels handle on :data:`DYNAMIC`. Returns ``(flows, reasons)``: ``id(node) ->
    flow`` (a callable from the input arrays to the output arrays) and ``node label -> why it
    stays interpreted``."""
    flows, reasons = {}, {}
    for n in graph.nodes:
        if placement.get(id(n)) != INTERP or n.domain != "" or n.op_type not in _FLOWS:
            continue
        make, check = _FLOWS[n.op_type]
        why = check(n)
        if why:
            reasons[n.label] = why
            continue
        flows[id(n)] = make(n)
        placement[id(n)] = DYNAMIC
    return flows, reasons


# --- element types -----------------------------------------------------------------------------

def _dtype(v) -> np.dtype | None:
    return None if v is None or v.dtype is None else np.dtype(v.dtype)


def _numeric(dt) -> bool:
    return dt is not None and (dt in HALF_DTYPES or dt.kind in _NUMERIC)


def _check_numeric(n: Node) -> str | None:
    dt = _dtype(n.inputs[0])
    if not _numeric(dt):
        return f"{n.op_type} kernels take bool, integer and float tensors, not {dt}"
    return None


def _check_compress(n: Node) -> str | None:
    dt, cond = _dtype(n.inputs[0]), _dtype(n.input(1))
    if dt is None or dt.kind in "OSUV" and dt not in HALF_DTYPES:
        return f"Compress moves fixed-size elements, not {dt}"
    if cond != np.dtype(bool):
        return f"Compress condition must be bool, not {cond}"
    return None


def _check_nms(n: Node) -> str | None:
    types = [_dtype(n.inputs[0]), _dtype(n.input(1))]
    if any(t != np.dtype(np.float32) for t in types):
        return f"the NonMaxSuppression kernel takes float32 boxes and scores, not {types}"
    return None


def _comparable(x: np.ndarray) -> np.ndarray:
    """``x`` as the kernels compare it: 16-bit floats widened to float32 (exact)."""
    from .kernels.cpu import select
    x = np.asarray(x, order="C")
    if x.dtype not in HALF_DTYPES:
        return x
    out = np.empty(x.shape, np.float32)
    select.half_to_f32(x.view(np.uint16).reshape(-1), x.dtype != np.float16, out.reshape(-1))
    return out


def _axis_split(shape: tuple, axis: int) -> tuple[int, int, int]:
    """(outer, n, inner): ``shape`` seen as three axes around ``axis``."""
    return math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])


def _axis(n: Node, rank: int) -> int:
    axis = int(n.attrs["axis"])
    if not -rank <= axis < rank:
        raise InvalidInput(f"{n.op_type} node {n.label}: axis {axis} out of range for rank {rank}")
    return axis % rank


def _take(x: np.ndarray, axis: int | None, idx: np.ndarray) -> np.ndarray:
    """``x`` with its slices ``idx`` along ``axis`` (None: of the flattened ``x``), copied as
    bytes by a compiled kernel."""
    from .kernels.cpu import select
    x = np.asarray(x, order="C")
    if axis is None:
        outer, m, inner, shape = 1, x.size, 1, (idx.size,)
    else:
        outer, m, inner = _axis_split(x.shape, axis)
        shape = x.shape[:axis] + (idx.size,) + x.shape[axis + 1:]
    out = np.empty(shape, x.dtype)
    w = inner * x.dtype.itemsize
    select.take_axis(x.reshape(-1).view(np.uint8).reshape(outer, m, w), idx,
                     out.reshape(-1).view(np.uint8).reshape(outer, idx.size, w))
    return out


# --- the flows ---------------------------------------------------------------------------------

def _with_kernels(run: Callable, n: Node, *names) -> Callable:
    """``run`` with ``run.kernels()``: the kernels of ``kernels/cpu/select.py`` it calls (a
    16-bit input adds the widening), which the executor's probe looks up in Numba's on-disk
    cache before running the step (a step never compiles while a tiered model probes)."""
    half = _dtype(n.inputs[0]) in HALF_DTYPES and n.op_type != "Compress"

    def kernels() -> list:
        from .kernels.cpu import select
        return [getattr(select, k) for k in names + (("half_to_f32",) if half else ())
                if k is not None]
    run.kernels = kernels
    return run


def _nonzero(n: Node) -> Callable:
    def run(args: list) -> list:
        from .kernels.cpu import select
        x = _comparable(args[0])
        flat = x.reshape(-1)
        out = np.empty((x.ndim, select.count_nonzero(flat)), np.int64)
        if x.ndim:
            select.nonzero_fill(flat, np.array(x.shape, np.int64), out)
        return [out]
    return _with_kernels(run, n, "count_nonzero", "nonzero_fill")


def _compress(n: Node) -> Callable:
    def run(args: list) -> list:
        from .kernels.cpu import select
        x, cond = args[0], np.asarray(args[1], order="C").reshape(-1)
        axis = None if n.attrs.get("axis") is None else _axis(n, x.ndim)
        length = x.size if axis is None else x.shape[axis]
        idx = select.true_positions(cond, length)
        if idx.size == 1 and idx[0] < 0:
            raise InvalidInput(f"Compress node {n.label}: the condition selects past the "
                               f"{'flattened input' if axis is None else f'axis {axis}'} "
                               f"(length {length})")
        return [_take(x, axis, idx)]
    return _with_kernels(run, n, "true_positions", "take_axis")


def _unique(n: Node) -> Callable:
    def run(args: list) -> list:
        from .kernels.cpu import select
        x = np.asarray(args[0], order="C")
        keys = _comparable(x)
        if n.attrs.get("axis") is None:
            axis, keys = None, keys.reshape(-1, 1)
        else:
            axis = _axis(n, x.ndim)
            outer, m, inner = _axis_split(x.shape, axis)
            rows = np.empty((m, outer * inner), keys.dtype)
            select.axis_rows(keys.reshape(outer, m, inner), rows)
            keys = rows
        # numpy's unique merges NaNs without an axis only (along an axis, rows compare as
        # structured values, and a NaN field never equals another)
        first, inverse, counts = select.unique_rows(keys, axis is None,
                                                    bool(n.attrs.get("sorted", 1)))
        return [_take(x, axis, first), first, inverse, counts]
    return _with_kernels(run, n, "axis_rows" if "axis" in n.attrs else None, "unique_rows",
                         "take_axis")


def _optional_scalar(args: list, k: int):
    """Input ``k`` as a Python scalar, or None where omitted or empty."""
    a = args[k] if k < len(args) else None
    return None if a is None or np.size(a) == 0 else np.asarray(a).reshape(-1)[0]


def _nms(n: Node) -> Callable:
    center = int(n.attrs.get("center_point_box", 0))

    def run(args: list) -> list:
        from .kernels.cpu import select
        boxes, scores = np.asarray(args[0], order="C"), np.asarray(args[1], order="C")
        if (boxes.ndim != 3 or boxes.shape[2] != 4 or scores.ndim != 3
                or boxes.shape[0] != scores.shape[0] or boxes.shape[1] != scores.shape[2]):
            raise InvalidInput(f"NonMaxSuppression node {n.label}: boxes {boxes.shape} must be "
                               f"(batches, boxes, 4) and scores {scores.shape} (batches, "
                               "classes, boxes)")
        max_out = _optional_scalar(args, 2)
        max_out = 0 if max_out is None else max(int(max_out), 0)
        iou = _optional_scalar(args, 3)
        score = _optional_scalar(args, 4)
        b, c, nbox = scores.shape
        out = np.empty((b * c * min(nbox, max_out), 3), np.int64)
        k = select.nms(boxes, scores, max_out, np.float32(0 if iou is None else iou),
                       np.float32(0 if score is None else score), score is not None,
                       center == 1, out)
        return [out[:k]]
    return _with_kernels(run, n, "nms")


#: op -> (flow factory, element-type check: the reason it stays interpreted, or None)
_FLOWS = {
    "NonZero": (_nonzero, _check_numeric),
    "Compress": (_compress, _check_compress),
    "Unique": (_unique, _check_numeric),
    "NonMaxSuppression": (_nms, _check_nms),
}
