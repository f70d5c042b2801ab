"""The ops jitort's own passes create (domain ``"jitort"``), decomposed into ONNX semantics.

A compiled backend runs them; these are for when it cannot (a lowering declines the shapes, so
the node falls back to the interpreter) and for constant folding. ``MatMulBias`` is
``act(a @ b + bias)``; ``FusedConv`` is ``act(Conv(x, W, B) [+ residual])`` with the Conv of
:mod:`.numpy_conv`, or ``onnx.reference`` for the forms it defers (see
:func:`jitort.passes.epilogues.fuse_epilogues` for the attributes).
"""
from __future__ import annotations

import math

import numpy as np

from .. import ir
from .numpy_ops import _erf, _sigmoid
from .registry import Defer, fast, kind

_SQRT1_2 = 1.0 / math.sqrt(2.0)
_SQRT2_PI = math.sqrt(2.0 / math.pi)


def activation(y: np.ndarray, name: str, params) -> np.ndarray:
    """ONNX ``name`` (Relu, LeakyRelu, Clip, Sigmoid, Tanh, Gelu with approximate="none",
    Swish, HardSigmoid, HardSwish; GeluTanh: Gelu with approximate="tanh") applied to ``y``;
    ``params`` are ``[alpha, beta]`` (LeakyRelu's slope, Clip's bounds, Swish's alpha,
    HardSigmoid's alpha and beta)."""
    p = [float(v) for v in params] + [0.0, 0.0]
    if name == "":
        return y
    with np.errstate(all="ignore"):
        if name == "Relu":
            r = np.maximum(y, 0)
        elif name == "LeakyRelu":
            r = np.where(y < 0, y * y.dtype.type(p[0]), y)
        elif name == "Clip":
            r = np.clip(y, y.dtype.type(p[0]), y.dtype.type(p[1]))
        elif name == "Sigmoid":
            r = _sigmoid(y)
        elif name == "Tanh":
            r = np.tanh(y)
        elif name == "Gelu":
            r = 0.5 * y * (1.0 + _erf(y * _SQRT1_2))
        elif name == "GeluTanh":
            r = 0.5 * y * (1.0 + np.tanh(_SQRT2_PI * (y + 0.044715 * y * y * y)))
        elif name == "Swish":
            r = y * _sigmoid(y * y.dtype.type(p[0]))
        elif name in ("HardSigmoid", "HardSwish"):
            a, b = (1 / 6, 0.5) if name == "HardSwish" else (p[0], p[1])
            h = np.clip(y * y.dtype.type(a) + y.dtype.type(b), 0, 1)
            r = y * h if name == "HardSwish" else h
        else:
            raise ValueError(f"unknown fused activation {name!r}")
    return np.asarray(r).astype(y.dtype, copy=False)


def fused_activation(node: ir.Node) -> tuple[str, list[float]]:
    """The epilogue of a MatMulBias / FusedConv: (activation name, [alpha, beta]) from its
    ``activation`` / ``activation_params`` attributes (an older MatMulBias may carry ``alpha``).
    Read here for the interpreter and by the lowerings (``codegen.lowerings.act_args``)."""
    params = [float(p) for p in node.attrs.get("activation_params", [])] or \
        [float(node.attrs.get("alpha", 0.0))]
    return node.attrs.get("activation", ""), params + [0.0] * (2 - len(params))


def _act_attrs(node: ir.Node) -> tuple[str, list]:
    name, params = fused_activation(node)
    activation(np.zeros(1, np.float32), name, params)  # unknown names fail at build time
    return name, params


@fast("MatMulBias", domain="jitort")
def _matmul_bias(node: ir.Node):
    name, params = _act_attrs(node)

    def run(a):
        x, w, b = a[0], a[1], a[2]
        if x.dtype != w.dtype or kind(x.dtype) != "f" or x.ndim == 0 or w.ndim == 0:
            raise Defer
        y = np.asarray(np.matmul(x, w) + b).astype(x.dtype, copy=False)
        return [activation(y, name, params)]
    return run


@fast("FusedConv", domain="jitort")
def _fused_conv(node: ir.Node):
    from .numpy_conv import conv
    from .reference import ReferenceRunner
    name, params = _act_attrs(node)
    attrs = {k: v for k, v in node.attrs.items() if k not in ("activation", "activation_params")}
    plain = ir.Node("Conv", list(node.inputs[:3]), list(node.outputs[:1]), attrs, "", node.name, 11)
    runner = None

    def run(a):
        nonlocal runner
        x = a[0]
        if kind(x.dtype) != "f":
            raise Defer
        b = a[2] if len(a) > 2 else None
        try:
            y = conv(x, a[1], b, plain)
        except Defer:  # a form the numpy path leaves to the reference
            if runner is None:
                runner = ReferenceRunner(plain, {"": 11})
            y = np.asarray(runner([x, a[1], b])[0]).astype(x.dtype, copy=False)
        if len(a) > 3 and a[3] is not None:
            r = a[3]
            if r.shape != y.shape:
                raise ValueError(f"residual shape {r.shape} differs from the conv output {y.shape}")
            y = (y + r).astype(x.dtype, copy=False)
        return [activation(y, name, params)]
    return run


@fast("FusedConvNHWC", domain="jitort")
def _fused_conv_nhwc(node: ir.Node):
    """The channels-last FusedConv of ``passes.layout``: NHWC input/residual/output, HWIO
    weights, run as the NCHW FusedConv."""
    attrs = dict(node.attrs)
    nchw = _fused_conv(ir.Node("FusedConv", list(node.inputs), list(node.outputs), attrs,
                               "jitort", node.name, 1))

    def run(a):
        x = np.ascontiguousarray(np.transpose(a[0], (0, 3, 1, 2)))
        w = np.ascontiguousarray(np.transpose(a[1], (3, 2, 0, 1)))
        args = [x, w] + list(a[2:3])
        if len(a) > 3 and a[3] is not None:
            args.append(np.ascontiguousarray(np.transpose(a[3], (0, 3, 1, 2))))
        y = nchw(args)[0]
        return [np.ascontiguousarray(np.transpose(y, (0, 2, 3, 1)))]
    return run
