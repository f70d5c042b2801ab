"""numpy fast paths for convolution, pooling and inference BatchNormalization (any number of
spatial dimensions).

``onnx.reference`` runs these ops in Python loops: a 7x7 convolution on a 256x256 plane took
0.9 s there, a ConvTranspose 2.2 s, an AveragePool over densenet's planes 0.4 s per node. The
interpreter is the first tier of a tiered model (:mod:`jitort.tiering`), which must give a first
result in seconds, so these run as one im2col + ``matmul`` (convolution), a scatter-add per
kernel tap (transposed convolution) or a reduction over a strided window view (pooling).

Results equal the reference's up to float rounding (a different summation order; MaxPool is
exact). Forms not handled here defer to the reference: ``auto_pad`` other than NOTSET and VALID
on ConvTranspose, ``output_shape``, MaxPool's Indices output, non-float inputs.
"""
from __future__ import annotations

import itertools
import math

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .. import ir
from .registry import Defer, fast, kind


def _pads(node: ir.Node, spatial: tuple, kernel: tuple, strides: tuple, dilations: tuple,
          ceil_mode: bool = False) -> list[int]:
    """Explicit [begin..., end...] pads for ``node``'s ``pads`` / ``auto_pad`` attributes."""
    nsp = len(spatial)
    auto = node.attrs.get("auto_pad", "NOTSET")
    if isinstance(auto, bytes):
        auto = auto.decode()
    if auto in ("NOTSET", ""):
        pads = [int(p) for p in node.attrs.get("pads", [0] * (2 * nsp))]
        if len(pads) != 2 * nsp:
            raise Defer
        return pads
    if auto == "VALID":
        return [0] * (2 * nsp)
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        raise Defer
    begin, end = [], []
    for n, k, s, d in zip(spatial, kernel, strides, dilations):
        out = -(-n // s)
        total = max((out - 1) * s + (k - 1) * d + 1 - n, 0)
        small = total // 2
        begin.append(small if auto == "SAME_UPPER" else total - small)
        end.append(total - small if auto == "SAME_UPPER" else small)
    return begin + end


def _ints(node: ir.Node, name: str, nsp: int, default: int) -> tuple:
    v = tuple(int(a) for a in node.attrs.get(name, [default] * nsp))
    if len(v) != nsp:
        raise Defer
    return v


def _windows(xp: np.ndarray, kernel: tuple, strides: tuple, dilations: tuple) -> np.ndarray:
    """A view [N, C, *out, *kernel] of the (already padded) ``xp``'s windows."""
    nsp = len(kernel)
    ext = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    if any(e > n for e, n in zip(ext, xp.shape[2:])):
        raise Defer  # empty output: the reference reports or handles it
    win = sliding_window_view(xp, ext, axis=tuple(range(2, 2 + nsp)))
    sl = ((slice(None),) * 2 + tuple(slice(None, None, s) for s in strides)
          + tuple(slice(None, None, d) for d in dilations))
    return win[sl]


def _pad(x: np.ndarray, pads: list[int], value=0) -> np.ndarray:
    nsp = x.ndim - 2
    if not any(pads):
        return x
    if min(pads) < 0:
        raise Defer
    return np.pad(x, [(0, 0), (0, 0)] + [(pads[i], pads[i + nsp]) for i in range(nsp)],
                  constant_values=value)


def conv(x: np.ndarray, w: np.ndarray, b, node: ir.Node) -> np.ndarray:
    """ONNX Conv of float ``x`` [N, C, *S] with ``w`` [M, C/group, *K] and optional ``b``."""
    nsp = x.ndim - 2
    if nsp < 1 or w.ndim != x.ndim or kind(x.dtype) != "f" or x.dtype != w.dtype:
        raise Defer
    group = int(node.attrs.get("group", 1))
    kernel = tuple(w.shape[2:])
    strides = _ints(node, "strides", nsp, 1)
    dilations = _ints(node, "dilations", nsp, 1)
    pads = _pads(node, x.shape[2:], kernel, strides, dilations)
    n, c = x.shape[:2]
    m = w.shape[0]
    if group < 1 or c % group or m % group or w.shape[1] * group != c or x.size == 0:
        raise Defer
    win = _windows(_pad(x, pads), kernel, strides, dilations)  # [N, C, *O, *K]
    out = win.shape[2:2 + nsp]
    cg, mg, taps, pos = c // group, m // group, math.prod(kernel), math.prod(out)
    win = win.reshape(n, group, cg, *out, *kernel)
    perm = (0, 1, 2) + tuple(range(3 + nsp, 3 + 2 * nsp)) + tuple(range(3, 3 + nsp))
    cols = win.transpose(perm).reshape(n, group, cg * taps, pos)  # im2col (one copy)
    y = np.matmul(w.reshape(1, group, mg, cg * taps), cols).reshape(n, m, *out)
    if b is not None:
        y += b.reshape((1, m) + (1,) * nsp).astype(y.dtype, copy=False)
    return y


def _x_w_b(fn):
    """A fast-path builder running ``fn(x, w, bias or None, node)``."""
    def build(node: ir.Node):
        def run(a):
            return [fn(a[0], a[1], a[2] if len(a) > 2 else None, node)]
        return run
    return build


fast("Conv")(_x_w_b(conv))


def conv_transpose(x: np.ndarray, w: np.ndarray, b, node: ir.Node) -> np.ndarray:
    """ONNX ConvTranspose: one gemm to [N, M, *K, *S] columns, then a strided add per tap."""
    nsp = x.ndim - 2
    if (nsp < 1 or w.ndim != x.ndim or kind(x.dtype) != "f" or x.dtype != w.dtype
            or "output_shape" in node.attrs):
        raise Defer
    auto = node.attrs.get("auto_pad", "NOTSET")
    if isinstance(auto, bytes):
        auto = auto.decode()
    if auto not in ("NOTSET", "", "VALID"):
        raise Defer
    group = int(node.attrs.get("group", 1))
    n, c = x.shape[:2]
    spatial = x.shape[2:]
    kernel = tuple(w.shape[2:])
    strides = _ints(node, "strides", nsp, 1)
    dilations = _ints(node, "dilations", nsp, 1)
    outpad = _ints(node, "output_padding", nsp, 0)
    pads = ([0] * (2 * nsp) if auto == "VALID"
            else [int(p) for p in node.attrs.get("pads", [0] * (2 * nsp))])
    if group < 1 or c % group or w.shape[0] != c or len(pads) != 2 * nsp or min(pads) < 0:
        raise Defer
    cg, mg = c // group, w.shape[1]
    m = mg * group
    out = [s * (i - 1) + op + (k - 1) * d + 1 - pb - pe for i, s, op, k, d, pb, pe in
           zip(spatial, strides, outpad, kernel, dilations, pads[:nsp], pads[nsp:])]
    if min(out) < 0:
        raise Defer
    if x.size == 0 or min(out) == 0:  # empty (or no input channels: the bias alone)
        y = np.zeros((n, m, *out), x.dtype)
        return y + b.reshape((1, m) + (1,) * nsp).astype(x.dtype) if b is not None else y
    taps, pos = math.prod(kernel), math.prod(spatial)
    wt = w.reshape(group, cg, mg * taps).transpose(0, 2, 1)  # [G, Mg*taps, Cg]
    cols = np.matmul(wt[None], x.reshape(n, group, cg, pos))  # [N, G, Mg*taps, pos]
    cols = cols.reshape(n, m, *kernel, *spatial)
    full = [max((i - 1) * s + (k - 1) * d + 1, pb + o) for i, s, k, d, pb, o in
            zip(spatial, strides, kernel, dilations, pads[:nsp], out)]
    y = np.zeros((n, m, *full), x.dtype)
    for tap in itertools.product(*[range(k) for k in kernel]):
        dst = (slice(None), slice(None)) + tuple(
            slice(t * d, t * d + (i - 1) * s + 1, s)
            for t, d, i, s in zip(tap, dilations, spatial, strides))
        y[dst] += cols[(slice(None), slice(None)) + tap]
    y = y[(slice(None), slice(None)) + tuple(slice(pb, pb + o) for pb, o in zip(pads[:nsp], out))]
    if b is not None:
        y = y + b.reshape((1, m) + (1,) * nsp).astype(y.dtype, copy=False)
    return np.ascontiguousarray(y)


fast("ConvTranspose")(_x_w_b(conv_transpose))


def _pool_geometry(node: ir.Node, x: np.ndarray):
    nsp = x.ndim - 2
    # an empty batch or channel axis pools here (the reference orders the pads wrongly then)
    if nsp < 1 or kind(x.dtype) != "f" or 0 in x.shape[2:]:
        raise Defer
    kernel = _ints(node, "kernel_shape", nsp, 0)
    strides = _ints(node, "strides", nsp, 1)
    dilations = _ints(node, "dilations", nsp, 1)
    if min(kernel) < 1:
        raise Defer
    pads = _pads(node, x.shape[2:], kernel, strides, dilations)
    if int(node.attrs.get("ceil_mode", 0)):
        # extra end padding so that the last window (starting inside the input or its begin
        # padding) exists; it never counts as an element
        extra = []
        for i, (n, k, s, d) in enumerate(zip(x.shape[2:], kernel, strides, dilations)):
            span = n + pads[i] + pads[i + nsp] - ((k - 1) * d + 1)
            o = -(-span // s) + 1
            if (o - 1) * s >= n + pads[i]:
                o -= 1
            extra.append(max((o - 1) * s + (k - 1) * d + 1 - (n + pads[i] + pads[i + nsp]), 0))
    else:
        extra = [0] * nsp
    return nsp, kernel, strides, dilations, pads, extra


@fast("MaxPool")
def _max_pool(node: ir.Node):
    if len([o for o in node.outputs if o is not None and o.name]) > 1:
        return None  # Indices: the reference

    def run(a):
        x = a[0]
        nsp, kernel, strides, dilations, pads, extra = _pool_geometry(node, x)
        full = pads[:nsp] + [p + e for p, e in zip(pads[nsp:], extra)]
        win = _windows(_pad(x, full, -np.inf), kernel, strides, dilations)
        return [win.max(axis=tuple(range(-nsp, 0)))]
    return run


@fast(("AveragePool",))
def _average_pool(node: ir.Node):
    include_pad = bool(int(node.attrs.get("count_include_pad", 0)))

    def run(a):
        x = a[0]
        nsp, kernel, strides, dilations, pads, extra = _pool_geometry(node, x)
        full = pads[:nsp] + [p + e for p, e in zip(pads[nsp:], extra)]
        axes = tuple(range(-nsp, 0))
        total = _windows(_pad(x, full), kernel, strides, dilations).sum(axis=axes, dtype=x.dtype)
        if not any(full):
            return [total / x.dtype.type(math.prod(kernel))]
        # elements per window: the input's, plus the explicit pads when count_include_pad
        ones = np.ones((1, 1) + x.shape[2:], x.dtype)
        if include_pad:
            ones = _pad(ones, pads, 1)
            count = _pad(ones, [0] * nsp + extra, 0)
        else:
            count = _pad(ones, full, 0)
        count = _windows(count, kernel, strides, dilations).sum(axis=axes, dtype=x.dtype)
        with np.errstate(divide="ignore", invalid="ignore"):
            return [(total / count).astype(x.dtype, copy=False)]
    return run


@fast("GlobalAveragePool")
def _global_average_pool(node: ir.Node):
    """Mean over the spatial axes (the reference's np.average divides by zero on an empty
    batch); empty spatial axes go to the reference."""
    def run(a):
        x = a[0]
        if x.ndim < 3 or kind(x.dtype) != "f" or 0 in x.shape[2:]:
            raise Defer
        acc = np.float32 if x.dtype == np.float16 else x.dtype  # as the reference's numpy
        return [x.mean(axis=tuple(range(2, x.ndim)), keepdims=True, dtype=acc).astype(x.dtype)]
    return run


@fast("BatchNormalization", since=7)
def _batch_norm(node: ir.Node):
    """Inference BatchNormalization (running mean and variance), for nodes with the one
    output Y and no ``training_mode``: onnx.reference's opset-9 version takes batch statistics
    whenever ``momentum`` is set, which its default always is (densenet121's BN layers came
    out 5 % off onnxruntime's). Training forms go to the reference."""
    if len([o for o in node.outputs if o is not None and o.name]) != 1 or \
            int(node.attrs.get("training_mode", 0)):
        return None
    eps = float(node.attrs.get("epsilon", 1e-5))

    def run(a):
        x, scale, bias, mean, var = a[:5]
        if kind(x.dtype) != "f" or x.ndim < 2:
            raise Defer
        shape = (1, -1) + (1,) * (x.ndim - 2)
        inv = scale.astype(np.float64) / np.sqrt(var.astype(np.float64) + eps)
        y = (x - mean.reshape(shape)) * inv.astype(x.dtype).reshape(shape) + bias.reshape(shape)
        return [y.astype(x.dtype, copy=False)]
    return run
