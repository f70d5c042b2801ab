"""Replacements for onnx.reference kernels that disagree with the ONNX spec.

Passed to every :class:`onnx.reference.ReferenceEvaluator` the interpreter builds (``new_ops``
also reach If/Loop/Scan bodies). Each class names the reference behaviour it corrects:

* ``Loop``: scan outputs are stacked along a new leading axis (the reference ``np.vstack``-s
  them, so 0-d per-iteration values come out as ``(N, 1)`` and rank >= 2 ones are concatenated
  instead of stacked).
* ``Optional``: an optional value is the value itself (``None`` when empty); the reference wraps
  it in a one-element list, so ``Optional()`` reads as non-empty and an optional sequence gains
  a level of nesting.
* ``Scatter`` (opset 9-10, deprecated): absent from the reference; it is ``ScatterElements``
  without ``reduction``.
* ``Scan`` opset 8 (batched form with a leading ``sequence_lens`` input): the reference only
  implements opset 9+; opset 8 runs the opset-9 body once per batch entry.
* ``Normalizer`` (ai.onnx.ml): onnxruntime's, in float32: MAX divides by the row's maximum (the
  reference: its largest magnitude), L2 is ``sign(x) * sqrt(x * x / sum(x * x))``, a row whose
  norm is 0 is left as it is, and an integer input works (the reference's in-place square root
  fails on it).
* ``Resize`` with ``coordinate_transformation_mode="tf_half_pixel_for_nn"`` (opset 11, nearest
  only): the reference rejects the mode; the source position is ``(i + 0.5) / scale`` rounded
  by ``nearest_mode`` and clamped, an axis of scale 1 keeping its positions (onnxruntime's).
  With ``align_corners`` and scales, the reference maps ``x * (in - 1) / (in * scale - 1)``
  instead of the spec's ``x * (in - 1) / (out - 1)``: it resizes to the sizes the scales give.
  With ``pytorch_half_pixel``, an output axis of length 1 reads source position 0 (the
  reference: -0.5).
* ``Scaler`` (ai.onnx.ml): the output is float (``(x - offset) * scale`` in float32, as
  onnxruntime's); the reference casts it back to the input type, truncating an integer input's.
"""
from __future__ import annotations

import numpy as np
from onnx.reference.op_run import OpRun
from onnx.reference.ops.aionnxml._op_run_aionnxml import OpRunAiOnnxMl
from onnx.reference.ops.op_loop import Loop as _RefLoop
from onnx.reference.ops.op_resize import Resize as _RefResize
from onnx.reference.ops.op_scan import Scan as _RefScan
from onnx.reference.ops.op_scatter_elements import ScatterElements as _RefScatterElements


def _stack(values: list) -> np.ndarray:
    try:
        return np.stack(values, axis=0)
    except ValueError:  # per-iteration shapes differ (not valid ONNX): keep the old behaviour
        return np.vstack(values)


class Loop(_RefLoop):
    op_domain = ""

    def _run(self, M, cond, *args, context=None, body=None, attributes=None, bindings=None):
        if args:
            v_initial, args = args[0], args[1:]
        else:
            v_initial = None
        if M is not None and not hasattr(M, "dtype"):
            raise TypeError(f"M must be empty or an array but its type is {type(M)}.")
        body = self.body
        loop_inputs = body.input_names
        inputs = dict.fromkeys(loop_inputs)
        if v_initial is not None:
            inputs[loop_inputs[2]] = v_initial
        cond_name = body.output_names[0]
        if args:
            begin = len(loop_inputs) - len(args)
            for name, val in zip(loop_inputs[begin:], args):
                inputs[name] = val
        if context is not None:
            for a in context:
                inputs[a] = context[a]
        k_carried_away: list[list] = [[] for _ in range(self.K)]
        it = 0
        outputs: list = []
        while cond and (M is None or it < M):
            if len(loop_inputs) > 0 and loop_inputs[0] is not None:
                inputs[loop_inputs[0]] = np.array(it, dtype=None if M is None else M.dtype)
            if len(loop_inputs) > 1 and loop_inputs[1] is not None:
                inputs[loop_inputs[1]] = cond
            outputs = self._run_body(inputs, attributes=attributes, bindings=bindings)
            for k in range(self.K):
                k_carried_away[k].append(outputs[-self.K + k])
            cond = outputs[self.output_index[cond_name]]
            if cond is None:
                raise RuntimeError(f"Condition {cond_name!r} returned by the subgraph cannot be None.")
            for i, o in zip(loop_inputs[2:], body.output_names[1:]):
                inputs[i] = outputs[self.output_index[o]]
            it += 1
        if it == 0:
            outputs = [inputs[i] for i in loop_inputs[2:]]
        else:
            outputs = list(outputs[1:1 + self.N])
        outputs.extend(_stack(x) if x else np.empty(shape=(0,)) for x in k_carried_away)
        while len(outputs) < len(self.onnx_node.output):
            outputs.append(np.empty(shape=()))
        return self._check_and_fix_outputs(tuple(outputs))


class Optional(OpRun):
    op_domain = ""

    def _run(self, x=None, type=None):  # noqa: A002
        return (x,)


class Scatter(_RefScatterElements):
    op_domain = ""

    def _run(self, data, indices, updates, axis=None):  # type: ignore[override]
        return super()._run(data, indices, updates, axis=axis, reduction=None)


class Scan(_RefScan):
    op_domain = ""

    def __init__(self, onnx_node, run_params):
        super().__init__(onnx_node, run_params)
        # opset 8 has one node input (sequence_lens) more than the body has inputs
        self.batched = len(onnx_node.input) == len(self.input_names) + 1
        if self.batched and any(getattr(self, "directions", None) or []):
            raise NotImplementedError("Scan-8 with reverse directions")

    def _run(self, *args, **kwargs):  # type: ignore[override]
        if not self.batched:
            return super()._run(*args, **kwargs)
        seq_lens, rest = args[0], args[1:]
        batch = rest[0].shape[0]
        if seq_lens is not None:
            full = rest[-1].shape[1]
            if np.any(np.asarray(seq_lens) != full):
                raise NotImplementedError("Scan-8 with sequence_lens shorter than the input")
        per_batch = [super(Scan, self)._run(*[a[b] for a in rest], **kwargs)
                     for b in range(batch)]
        return tuple(np.stack([r[i] for r in per_batch], axis=0)
                     for i in range(len(per_batch[0]))) if batch else tuple()


_ROUND = {"round_prefer_floor": lambda c: np.ceil(c - 0.5), "floor": np.floor, "ceil": np.ceil,
          "round_prefer_ceil": lambda c: np.floor(c + 0.5)}


def _single_positions_first(X: np.ndarray, scales, sizes):
    """pytorch_half_pixel puts an output axis of length 1 at source position 0; the reference
    at -0.5 (and tells length 1 by the unrounded ``in * scale``): such an axis becomes the
    input's first entry, resized by 1."""
    if sizes is not None and len(sizes):
        out = [int(v) for v in sizes]
    elif scales is not None and len(scales):
        scales = np.array(scales, np.float32)
        out = [int(np.floor(i * s)) for i, s in zip(X.shape, scales)]
    else:
        return X, scales
    single = [a for a, (i, o) in enumerate(zip(X.shape, out)) if o == 1 and i > 1]
    if single:
        X = X[tuple(slice(0, 1) if a in single else slice(None) for a in range(X.ndim))]
        if sizes is None or not len(sizes):
            scales[single] = 1.0
    return X, scales


class Resize(_RefResize):
    def _run(self, X, roi, scales=None, sizes=None, **attrs):  # type: ignore[override]
        ctm = attrs.get("coordinate_transformation_mode")
        if (ctm == "align_corners" and scales is not None and len(scales)
                and (sizes is None or not len(sizes)) and attrs.get("axes") is None):
            # the reference divides by the unrounded length_original * scale - 1; the spec
            # (and onnxruntime) by the output's length - 1: resize to the sizes the scales give
            sizes = np.floor(np.asarray(X).shape * np.asarray(scales, np.float32)).astype(
                np.int64)
            return super()._run(X, roi, None, sizes, **attrs)
        if ctm == "pytorch_half_pixel" and attrs.get("axes") is None:
            X, scales = _single_positions_first(np.asarray(X), scales, sizes)
            return super()._run(X, roi, scales, sizes, **attrs)
        if ctm != "tf_half_pixel_for_nn":
            return super()._run(X, roi, scales, sizes, **attrs)
        if (attrs.get("mode") or "nearest") != "nearest":
            raise ValueError("tf_half_pixel_for_nn is a mode of nearest resizing")
        X = np.asarray(X)
        if sizes is not None and len(sizes):
            out = [int(v) for v in sizes]
            sc = [o / i if i else 1.0 for o, i in zip(out, X.shape)]
        else:
            sc = [float(v) for v in np.asarray(scales, np.float32)]
            out = [int(np.floor(i * s)) for i, s in zip(X.shape, sc)]
        rnd = _ROUND[attrs.get("nearest_mode") or "round_prefer_floor"]
        idx = [np.arange(i) if (o == i and s == 1.0) else
               np.clip(rnd((np.arange(o) + 0.5) / np.float32(s)), 0, i - 1).astype(np.int64)
               for i, o, s in zip(X.shape, out, sc)]
        return (X[np.ix_(*idx)],)


class Scaler(OpRunAiOnnxMl):
    def _run(self, x, offset=None, scale=None):  # type: ignore[override]
        off = np.asarray(offset if offset is not None else [0.0], np.float32)
        sc = np.asarray(scale if scale is not None else [1.0], np.float32)
        return ((np.asarray(x).astype(np.float32) - off) * sc,)


class Normalizer(OpRunAiOnnxMl):
    def _run(self, x, norm=None):  # type: ignore[override]
        x = np.asarray(x).astype(np.float32)
        x2 = x.reshape(x.shape[0], -1) if x.ndim > 1 else x.reshape(1, -1)
        if norm == "MAX":
            d = x2.max(axis=1, keepdims=True)
        elif norm == "L1":
            d = np.abs(x2).sum(axis=1, keepdims=True, dtype=np.float32)
        elif norm == "L2":
            d = np.square(x2).sum(axis=1, keepdims=True, dtype=np.float32)
        else:
            raise ValueError(f"Normalizer: unexpected norm {norm!r}")
        with np.errstate(divide="ignore", invalid="ignore"):
            y = np.copysign(np.sqrt(x2 * x2 / d), x2) if norm == "L2" else x2 / d
        return (np.where(d == 0, x2, y).astype(np.float32).reshape(x.shape),)


FIXED_OPS = [Loop, Optional, Scatter, Scan, Resize, Scaler, Normalizer]
