"""numpy fast paths for the requantizing products QLinearMatMul and QLinearConv, and for
onnxruntime's quantized contrib ops (QLinearAdd / Mul / Sigmoid / LeakyRelu /
GlobalAveragePool / Concat, MatMulIntegerToFloat, DynamicQuantizeMatMul, MatMulNBits), which
onnx.reference lacks: without them a model holding one could not be tiered.

onnx.reference rounds ``rint(acc * multiplier + y_zero_point)`` in float64; onnxruntime (and
jitort's compiled kernels, ``kernels/cpu/quant.py``) round ``rint(float32(acc) * multiplier)``
with the multiplier ``float32(a_scale * b_scale) / y_scale`` in float32, then add the zero
point. At a tie (power-of-two scales make them common) the two differ by one wherever the zero
point is odd, so a tiered model's first calls disagreed with its compiled ones. These paths
follow onnxruntime. The integer products run as float64 BLAS products: exact, as every partial
sum of 8-bit products stays far below 2**53.
"""
from __future__ import annotations

import numpy as np

from .. import ir
from .numpy_conv import conv
from .registry import Defer, fast

_Q8 = (np.dtype(np.uint8), np.dtype(np.int8))


def _centered(q: np.ndarray, zero_point: np.ndarray, shape: tuple) -> np.ndarray:
    """``q - zero_point`` in float64, the zero point per tensor or reshaped to ``shape``."""
    z = np.asarray(zero_point, np.float64)
    return q.astype(np.float64) - (z.reshape(shape) if z.ndim else z)


def _requantize(acc: np.ndarray, sa, sb, sy, zy, shape: tuple) -> np.ndarray:
    """onnxruntime's requantization of the exact integer ``acc``: ``sb`` per tensor or
    reshaped to ``shape`` (per output column / channel)."""
    sb = np.asarray(sb, np.float32)
    mult = (np.float32(sa) * (sb.reshape(shape) if sb.ndim else sb)) / np.float32(sy)
    zy = np.asarray(zy)
    info = np.iinfo(zy.dtype)
    v = np.rint(acc.astype(np.float32) * mult) + np.float32(zy)
    return np.clip(v, info.min, info.max).astype(zy.dtype)


def _operands(a: list) -> tuple:
    """(x, x_scale, x_zero, w, w_scale, w_zero, y_scale, y_zero) of a QLinear* node: 8-bit
    integers, the input and output scales per tensor (others defer to the reference)."""
    x, sx, zx, w, sw, zw, sy, zy = a[:8]
    if any(np.asarray(v).dtype not in _Q8 for v in (x, zx, w, zw, zy)) or \
            np.size(sx) != 1 or np.size(sy) != 1 or np.size(zy) != 1:
        raise Defer
    return (x, np.asarray(sx).reshape(()), zx, w, sw, zw, np.asarray(sy).reshape(()),
            np.asarray(zy).reshape(()))


@fast("QLinearMatMul", since=10)
def _qlinear_matmul(node: ir.Node):
    def run(a):
        x, sx, zx, w, sw, zw, sy, zy = _operands(a)
        col = (-1,) if w.ndim >= 2 else ()
        if x.ndim < 1 or w.ndim < 1 or np.ndim(sw) > 1 or np.ndim(zw) > 1 or (
                col == () and np.size(sw) != 1):
            raise Defer  # per-matrix parameters of a batched weight: the reference's
        acc = np.matmul(_centered(x, zx, ()), _centered(w, zw, col))
        return [_requantize(acc, sx, sw, sy, zy, col)]
    return run


@fast("QLinearConv", since=10)
def _qlinear_conv(node: ir.Node):
    def run(a):
        x, sx, zx, w, sw, zw, sy, zy = _operands(a)
        if x.ndim < 3 or w.ndim != x.ndim:
            raise Defer
        per_m = (-1,) + (1,) * (w.ndim - 1)          # over w's output channels
        per_c = (1, -1) + (1,) * (x.ndim - 2)         # over the output's channels
        acc = conv(_centered(x, zx, ()), _centered(w, zw, per_m), None, node)
        if len(a) > 8 and a[8] is not None:
            acc += np.asarray(a[8], np.float64).reshape(per_c)
        return [_requantize(acc, sx, sw, sy, zy, per_c)]
    return run


# --- onnxruntime's quantized elementwise contrib ops, as jitort's compiled kernels compute them
# (kernels/cpu/contrib_quant.py: float32 throughout, saturated, rounded half to even). QLinearMul
# and the tables match onnxruntime exactly; its x86 QLinearAdd rounds a float32 sum formed in
# another order (and a fixed-point one on Arm), one step apart at some ties.
MS = "com.microsoft"


def _zero(z, like) -> np.ndarray:
    """A zero point, or 0 of ``like``'s type where it is omitted."""
    return np.zeros((), like.dtype) if z is None else np.asarray(z)


def _params(a: list, i: int, like: np.ndarray) -> tuple:
    """(scale, zero point) at inputs i, i + 1 as float32 / the zero point's integer type (an
    omitted zero point is 0 of ``like``'s type); per tensor only."""
    s, z = a[i], _zero(a[i + 1] if len(a) > i + 1 else None, like)
    if s is None or np.size(s) != 1 or np.size(z) != 1 or z.dtype not in _Q8:
        raise Defer
    return np.float32(np.asarray(s).reshape(())), z.reshape(())


def _through_table(fn, x: np.ndarray, sx, zx, sy, zy) -> np.ndarray:
    """x's codes mapped through the compiled kernels' requantization table of ``fn``
    (``contrib_quant.build_lut``: dequantize, fn, quantize into zy's type)."""
    from jitort.kernels.cpu.contrib_quant import build_lut
    table = build_lut(fn, sx, zx, sy, zy, x.dtype, zy.dtype)
    return table[x.astype(np.int32) - np.iinfo(x.dtype).min]


def _round_clamp(v: np.ndarray, dtype) -> np.ndarray:
    """rint(v) saturated to ``dtype`` (NaN to its minimum)."""
    info = np.iinfo(dtype)
    v = np.where(v >= np.float32(info.min), v, np.float32(info.min))
    return np.rint(np.minimum(v, np.float32(info.max))).astype(dtype)


@fast(("QLinearAdd", "QLinearMul"), domain=MS)
def _qlinear_binary(node: ir.Node):
    mul = node.op_type == "QLinearMul"

    def run(a):
        x, w = a[0], a[3]
        if x.dtype not in _Q8 or w.dtype not in _Q8:
            raise Defer
        (sa, za), (sb, zb), (sc, zc) = _params(a, 1, x), _params(a, 4, w), _params(a, 6, x)
        xa = (x.astype(np.int32) - np.int32(za)).astype(np.float32)
        wb = (w.astype(np.int32) - np.int32(zb)).astype(np.float32)
        if mul:
            v = xa * wb * (np.float32(sa * sb) / sc) + np.float32(zc)
        else:
            v = (sa / sc) * xa + (sb / sc) * wb + np.float32(zc)
        return [_round_clamp(v, zc.dtype)]
    return run


@fast(("QLinearSigmoid", "QLinearLeakyRelu"), domain=MS)
def _qlinear_unary(node: ir.Node):
    alpha = np.float32(node.attr("alpha", 0.01))

    def fn(v):
        if node.op_type == "QLinearSigmoid":
            return np.float32(1) / (np.float32(1) + np.exp(-v))
        return np.where(v >= 0, v, v * alpha)

    def run(a):
        x = a[0]
        if x.dtype not in _Q8:
            raise Defer
        return [_through_table(fn, x, *_params(a, 1, x), *_params(a, 3, x))]
    return run


@fast("QLinearGlobalAveragePool", domain=MS)
def _qlinear_gap(node: ir.Node):
    last = bool(node.attr("channels_last", 0))

    def run(a):
        x = a[0]
        if x.dtype not in _Q8 or x.ndim < 3:
            raise Defer
        (sx, zx), (sy, zy) = _params(a, 1, x), _params(a, 3, x)
        axes = tuple(range(1, x.ndim - 1)) if last else tuple(range(2, x.ndim))
        img = int(np.prod([x.shape[i] for i in axes]))
        acc = x.astype(np.int64).sum(axis=axes, keepdims=True) - int(zx) * img
        scale = sx / (sy * np.float32(img))
        return [_round_clamp(acc.astype(np.float32) * scale + np.float32(zy), zy.dtype)]
    return run


@fast("QLinearConcat", domain=MS)
def _qlinear_concat(node: ir.Node):
    axis = node.attr("axis", 0)

    def run(a):
        if len(a) < 5 or (len(a) - 2) % 3 or any(a[i].dtype not in _Q8
                                                   for i in range(2, len(a), 3)):
            raise Defer
        sy, zy = _params(a, 0, a[2])
        return [np.concatenate([_through_table(lambda v: v, a[i], *_params(a, i + 1, a[i]),
                                               sy, zy) for i in range(2, len(a), 3)],
                               axis=axis)]
    return run


def _int_to_float(acc: np.ndarray, sa, sb, bias) -> np.ndarray:
    """The exact integer product times a_scale * b_scale (per column or tensor), plus bias, in
    float32 as the compiled kernel (``contrib_quant.int_to_float``)."""
    sb = np.asarray(sb, np.float32).reshape(-1)
    y = acc.astype(np.float32) * (np.float32(sa) * sb)
    return y + np.asarray(bias, np.float32) if bias is not None else y


@fast("MatMulIntegerToFloat", domain=MS)
def _matmul_integer_to_float(node: ir.Node):
    def run(a):
        x, w, sa, sb = a[:4]
        za, zb, bias = (a[i] if len(a) > i else None for i in (4, 5, 6))
        if x.dtype not in _Q8 or w.dtype not in _Q8 or np.size(sa) != 1 \
                or np.size(_zero(za, x)) != 1 or w.ndim < 1:
            raise Defer
        zb = _zero(zb, w).reshape(-1)
        acc = np.matmul(_centered(x, _zero(za, x), ()), w.astype(np.float64) - zb)
        return [_int_to_float(acc, np.asarray(sa).reshape(()), sb, bias)]
    return run


def _dynamic_quantize(x: np.ndarray) -> tuple:
    """(codes, scale, zero point) of DynamicQuantizeLinear, as kernels/cpu/quant.py computes
    them (onnxruntime's: the range of min(0, x) .. max(0, x) over 255 codes)."""
    lo = np.float32(min(0.0, float(x.min(initial=0.0))))
    hi = np.float32(max(0.0, float(x.max(initial=0.0))))
    scale = np.float32(1.0) if hi == lo else np.float32(hi - lo) / np.float32(255.0)
    zp = np.float32(np.rint(min(max(np.float32(0.0) - lo / scale, 0.0), 255.0)))
    v = np.minimum(np.maximum(x / scale, -zp), np.float32(255.0) - zp)
    return (np.rint(v) + zp).astype(np.uint8), scale, np.uint8(zp)


@fast("DynamicQuantizeMatMul", domain=MS)
def _dynamic_quantize_matmul(node: ir.Node):
    def run(a):
        x, w, sb = a[:3]
        zb, bias = (a[i] if len(a) > i else None for i in (3, 4))
        if x.dtype != np.float32 or w.dtype not in _Q8 or w.ndim < 1 or np.isnan(x).any():
            raise Defer
        q, sa, za = _dynamic_quantize(x)
        zb = _zero(zb, w).reshape(-1)
        acc = np.matmul(q.astype(np.float64) - float(za), w.astype(np.float64) - zb)
        return [_int_to_float(acc, sa, sb, bias)]
    return run


@fast("MatMulNBits", domain=MS)
def _matmul_nbits(node: ir.Node):
    k, n = int(node.attr("K")), int(node.attr("N"))
    bits, block = int(node.attr("bits", 4)), int(node.attr("block_size"))
    # constant codes, scales and zero points (as exporters write them): dequantized once
    const = all(v is None or v.is_const for v in (node.input(1), node.input(2), node.input(3)))
    weights = []

    def run(a):
        from jitort.kernels.cpu.contrib_quant import dequantize_nbits
        x, b, scales = a[:3]
        zp, g_idx, bias = (a[i] if len(a) > i else None for i in (3, 4, 5))
        if x.dtype != np.float32 or g_idx is not None or bits not in (2, 4, 8) \
                or x.shape[-1:] != (k,):
            raise Defer
        w = weights[0] if weights else dequantize_nbits(b, scales, zp, k, n, bits, block)
        if const and not weights:
            weights.append(w)
        y = np.matmul(x.reshape(-1, k), w).reshape(x.shape[:-1] + (n,))
        return [y + bias if bias is not None else y]
    return run
