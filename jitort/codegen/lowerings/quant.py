"""CPU lowerings: quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv.

Kernels: ``jitort.kernels.cpu.quant`` (alias ``_quant`` in generated drivers).

QuantizeLinear / DequantizeLinear to and from the low-precision types (float8, float4 E2M1,
int4 / uint4, int2 / uint2: ``codegen/lowprec.py``) run ``jitort.kernels.cpu.lowprec``'s
kernels on the same layouts. Declined (run by the interpreter), by the support predicates:
QuantizeLinear / DequantizeLinear outputs or scales other than float32 (float16 ones are
computed in float32 by ``passes/precision.py``), a ``precision`` attribute other than float32.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ...ir import Node
from ..calls import KernelModule, View, Zeros
from ..lowprec import E8M0, KIND, is_lowp
from ..registry import Unlowerable, lowering
from ..symbolic import concrete
from .common import _3d, _axis, _conv_pads, _prod

if TYPE_CHECKING:
    from ..emitter import Emitter

_quant = KernelModule("quant")
_lowp = KernelModule("lowprec")

_F32 = np.dtype(np.float32)
_I32 = np.dtype(np.int32)
#: quantized integer types the kernels take
_QINT = (np.dtype(np.uint8), np.dtype(np.int8), np.dtype(np.uint16), np.dtype(np.int16))
_Q8 = (np.dtype(np.uint8), np.dtype(np.int8))
#: elements from which the elementwise kernels run split over the threads (4x below its value
#: under Numba's TBB layer, as a region's cost fell: kernels/cpu/workers.py)
_PAR_ELEMS = 1 << 15
#: DynamicQuantizeLinear's two passes share one parallel region: it gains from 32K floats at
#: 2 threads on jitort's pool (``python scripts/sweeps/sweep_split.py``, split / serial: 16-24K
#: 1.01-1.02, 32K 0.85, 64K 0.74, 256K 0.56; from 48-64K under TBB)
_DYN_PAR_ELEMS = 1 << 15
#: output channels per group from which a constant-weight quantized convolution runs on the
#: integer gemm (6-row tiles); fewer (depthwise) keep the float path's direct kernels
_I8_MIN_MG = 4


def _dt(v):
    return None if v is None or v.dtype is None else np.dtype(v.dtype)


def _lowp_q(v) -> bool:
    """A low-precision quantized type (E8M0 is a scale type, not a quantized one)."""
    return is_lowp(_dt(v)) and _dt(v) != E8M0


def _quantize_ok(n: Node) -> bool:
    x, s, z = n.inputs[0], n.inputs[1], n.input(2)
    y = n.outputs[0]
    if _lowp_q(y):
        return (_dt(x) == _F32 and _dt(s) == _F32 and (z is None or _dt(z) == _dt(y))
                and n.attrs.get("precision", 0) in (0, 1))
    return (_dt(x) in (_F32, _I32) and _dt(s) == _F32 and _dt(y) in _QINT
            and (z is None or _dt(z) == _dt(y)) and n.attrs.get("precision", 0) in (0, 1))


def _dequantize_ok(n: Node) -> bool:
    x, s, z = n.inputs[0], n.inputs[1], n.input(2)
    ok_x = _dt(x) in _QINT + (_I32,) or _lowp_q(x)
    return (ok_x and _dt(s) == _F32 and _dt(n.outputs[0]) == _F32
            and (z is None or _dt(z) == _dt(x)))


def _par(em: Emitter, n: Node, elems, threshold: int = _PAR_ELEMS) -> bool:
    """Split over the threads? (``Emitter.split``)"""
    return em.split("quant_par", n, elems, threshold)


def _qdq_views(em: Emitter, n: Node):
    """(x3 shape, s3 shape, block) of a QuantizeLinear / DequantizeLinear (module doc of
    ``kernels/cpu/quant.py``); checks the scale and zero point shapes."""
    x, s, z = n.inputs[0], n.inputs[1], n.input(2)
    xs, ss = tuple(em.shape(x)), tuple(em.shape(s))
    if z is not None and tuple(em.shape(z)) != ss and not (
            _prod(em.shape(z)) == 1 and _prod(ss) == 1 and len(ss) <= 1):  # [1] beside ()
        raise Unlowerable(n, f"zero point shape {tuple(em.shape(z))} differs from the scale's {ss}")
    block = int(n.attrs.get("block_size", 0) or 0)
    total = _prod(xs)
    if block <= 0 and (len(ss) == 0 or (len(ss) == 1 and ss[0] == 1)):
        return (1, 1, total), (1, 1, 1), 1
    rank = len(xs)
    axis = int(n.attrs.get("axis", 1))
    if not -rank <= axis < rank:
        raise Unlowerable(n, f"axis {axis} out of range for rank {rank}")
    axis = _axis(axis, rank)
    o, a, i = _3d(xs, axis)
    if block <= 0:
        if len(ss) != 1 or ss[0] != xs[axis]:
            raise Unlowerable(n, f"per-axis scale of shape {ss} for axis {axis} of {xs}")
        if i == 1:  # the scale varies along the contiguous axis
            return (o, 1, a), (1, 1, a), 1
        return (o, a, i), (1, a, 1), 1
    nb = (xs[axis] + block - 1) // block
    if len(ss) != rank or ss[axis] != nb or any(ss[k] != xs[k] for k in range(rank) if k != axis):
        raise Unlowerable(n, f"blocked scale of shape {ss} for {xs}, axis {axis}, block {block}")
    return (o, a, i), (o, nb, i), block


def _zp_arg(em: Emitter, z, s3) -> tuple[View | Zeros, bool]:
    if z is None:
        return Zeros("uint8", (1, 1, 1)), False
    return em.shaped(z, s3), True


@lowering("QuantizeLinear", supports=_quantize_ok)
def lower_quantize(em: Emitter, n: Node) -> None:
    x, s, z, y = n.inputs[0], n.inputs[1], n.input(2), n.outputs[0]
    x3, s3, blk = _qdq_views(em, n)
    zv, has = _zp_arg(em, z, s3)
    if _lowp_q(y):
        em.call(_lowp.quantize_lowp, em.shaped(x, x3), em.shaped(s, s3), zv,
                em.write(y).reshape(em.sizes(x3)), em.size(blk), has, KIND[_dt(y)],
                bool(n.attrs.get("saturate", 1)))
        return
    info = np.iinfo(_dt(y))
    yv = em.write(y)
    fn = _quant.quantize_par if _par(em, n, _prod(x3)) else _quant.quantize
    em.call(fn, em.shaped(x, x3), em.shaped(s, s3), zv, yv.reshape(em.sizes(x3)), em.size(blk),
            float(info.min), float(info.max), has)


@lowering("DequantizeLinear", supports=_dequantize_ok)
def lower_dequantize(em: Emitter, n: Node) -> None:
    x, s, z, y = n.inputs[0], n.inputs[1], n.input(2), n.outputs[0]
    x3, s3, blk = _qdq_views(em, n)
    zv, has = _zp_arg(em, z, s3)
    yv = em.write(y)
    if _lowp_q(x):
        em.call(_lowp.dequantize_lowp, em.shaped(x, x3), em.shaped(s, s3), zv,
                yv.reshape(em.sizes(x3)), em.size(blk), has, KIND[_dt(x)])
        return
    fn = _quant.dequantize_par if _par(em, n, _prod(x3)) else _quant.dequantize
    em.call(fn, em.shaped(x, x3), em.shaped(s, s3), zv, yv.reshape(em.sizes(x3)), em.size(blk),
            has)


@lowering("DynamicQuantizeLinear",
          supports=lambda n: _dt(n.inputs[0]) == _F32 and _dt(n.outputs[0]) == np.dtype(np.uint8))
def lower_dynamic_quantize(em: Emitter, n: Node) -> None:
    x = n.inputs[0]
    y, ys, yz = n.outputs
    total = _prod(em.shape(x))
    yv, sv, zv = em.write(y), em.write(ys), em.write(yz)
    fn = (_quant.dynamic_quantize_par if _par(em, n, total, _DYN_PAR_ELEMS)
          else _quant.dynamic_quantize)
    one = em.sizes((1,))
    em.call(fn, em.shaped(x, (total,)), yv.reshape(em.sizes((total,))), sv.reshape(one),
            zv.reshape(one))


# --- MatMulInteger / QLinearMatMul --------------------------------------------------------------

def _mm_shapes(em: Emitter, n: Node, a, b):
    """(a3, b3, y3) shapes of a matmul with numpy broadcasting over (a single run of) batches."""
    sa, sb = tuple(em.shape(a)), tuple(em.shape(b))
    if not sa or not sb:
        raise Unlowerable(n, "matmul of a scalar")
    sa2 = (1,) + sa if len(sa) == 1 else sa
    sb2 = sb + (1,) if len(sb) == 1 else sb
    m, k, k2, nn = sa2[-2], sa2[-1], sb2[-2], sb2[-1]
    if k != k2:
        raise Unlowerable(n, f"inner dimensions differ: {sa} x {sb}")
    ba, bb = sa2[:-2], sb2[:-2]
    if _prod(bb) == 1:
        return (1, _prod(ba) * m, k), (1, k, nn), (1, _prod(ba) * m, nn)
    r = max(len(ba), len(bb))
    ba_, bb_ = (1,) * (r - len(ba)) + ba, (1,) * (r - len(bb)) + bb
    if ba_ == bb_:
        t = _prod(ba_)
        return (t, m, k), (t, k, nn), (t, m, nn)
    if _prod(ba_) == 1:
        t = _prod(bb_)
        return (1, m, k), (t, k, nn), (t, m, nn)
    raise Unlowerable(n, f"matmul batch broadcast {sa} x {sb}")


def _vec(em: Emitter, n: Node, v, allowed, what: str, dtype=np.uint8) -> View | Zeros:
    """A scale or zero point as a 1-D view of 1 or ``allowed`` entries (absent: [0])."""
    if v is None:
        return Zeros(np.dtype(dtype).name, (1,))
    s = tuple(em.shape(v))
    cnt = _prod(s)
    if len(s) > 1 or not (cnt == 1 or (allowed is not None and cnt == allowed)):
        raise Unlowerable(n, f"{what} of shape {s}")
    return em.shaped(v, (cnt,))


def _unit_scales(em: Emitter) -> tuple[View, View, View]:
    """The three scales of MatMulInteger / ConvInteger (mode 0, no requantization): [1.0]
    each (the IR has zero placeholders only, so a constant of the arena)."""
    one = em.constant(("quant_unit_scale",), lambda: np.ones(1, np.float32))
    return one, one, one


def _requant(em: Emitter, n: Node, scales, zy, y, a_what: str, b_what: str, b_len):
    """(a scale, b scale, y scale, y zero point, mode, lo, hi) of an integer product: unit
    scales and mode 0 when ``scales`` is None (MatMulInteger / ConvInteger), else the
    QLinear* scales (b's of 1 or ``b_len`` entries) and a requantization to y's dtype range."""
    if scales is None:
        sa, sb, sy = _unit_scales(em)
        return sa, sb, sy, Zeros("uint8", (1,)), 0, 0.0, 0.0
    s_a, s_b, s_y = scales
    sa = _vec(em, n, s_a, None, a_what)
    sb = _vec(em, n, s_b, b_len, b_what)
    sy = _vec(em, n, s_y, None, "y scale")
    zyv = _vec(em, n, zy, None, "y zero point", _dt(y))
    info = np.iinfo(_dt(y))
    return sa, sb, sy, zyv, 1, float(info.min), float(info.max)


def _shifted_weights(em: Emitter, tag: str, w, zw, shape, *args):
    """Constant integer weights ``w`` less their zero points ``zw`` as a float32 constant (by
    kernels/cpu/quant.shift_weights, memoized per weights) and their largest magnitude."""
    from jitort.kernels.cpu.quant import shift_weights
    key = (tag, id(w.const), None if zw is None else id(zw.const))
    if key not in em.memo:
        wz = np.zeros(1, np.int32) if zw is None else zw.const.reshape(-1)
        em.memo[key] = shift_weights(w.const.reshape(tuple(concrete(d) for d in shape)), wz, *args)
    return em.constant(key + ("f32",), lambda: em.memo[key][0]), em.memo[key][1]


def _lower_qmm(em: Emitter, n: Node, a, za, b, zb, scales, y, zy, into=None) -> None:
    """``into``: (uint8 A view or None, its zero point view or None, int32 output view)
    replacing ``a``'s / ``za``'s / ``y``'s (the int32 product of onnxruntime's
    MatMulIntegerToFloat / DynamicQuantizeMatMul, lowerings/contrib_quant.py)."""
    from jitort.kernels.cpu.qgemm import HAS_VNNI
    a3, b3, y3 = _mm_shapes(em, n, a, b)
    m, nn = a3[1], b3[2]
    a_in, za_in, y_out = into or (None, None, None)
    zav = _vec(em, n, za, m, "a zero point", _dt(a)) if za_in is None else za_in
    a_signed = _dt(a) == np.int8 and a_in is None
    av = em.shaped(a, a3) if a_in is None else a_in.reshape(em.sizes(a3))
    zbv = _vec(em, n, zb, nn, "b zero point", _dt(b))
    const_b = b.is_const and (zb is None or zb.is_const)
    # constant B, one batch of it, and VNNI: the integer gemm (kernels/cpu/qgemm.py)
    use_i8 = const_b and HAS_VNNI and b3[0] == 1
    if const_b and not use_i8:
        bcv, bmax = _shifted_weights(em, "qmm_b", b, zb, b3)
    else:
        bcv, bmax = Zeros("float32", (1, 1, 1)), 0
    sa, sb, sy, zyv, mode, lo, hi = _requant(
        em, n, scales, zy, y, "a scale (per-row a scales are not supported)", "b scale", nn)
    ws = em.temp(_prod(a3) + _prod(b3) + _prod(y3), np.float64)
    yv = em.write(y) if y_out is None else y_out
    if use_i8:  # B packed once here
        from jitort.kernels.cpu.quant import prepack_b
        pkey = ("qmm_b_i8", id(b.const), None if zb is None else id(zb.const))
        if pkey not in em.memo:
            bz = np.zeros(1, np.int32) if zb is None else zb.const.reshape(-1)
            em.memo[pkey] = prepack_b(b.const.reshape(tuple(concrete(d) for d in b3)), bz)
        pv, cs, zv = (em.constant(pkey + (i,), lambda i=i: em.memo[pkey][i]) for i in range(3))
        em.call(_quant.qmatmul_i8, av, zav, a_signed, pv, cs, zv,
                yv.reshape(em.sizes(y3)), ws, mode, sa, sb, sy, zyv, lo, hi)
        return
    em.call(_quant.qmatmul, av, zav, em.shaped(b, b3), zbv, bcv, bmax, const_b,
            yv.reshape(em.sizes(y3)), ws, mode, sa, sb, sy, zyv, lo, hi)


@lowering("MatMulInteger", supports=lambda n: _dt(n.inputs[0]) in _Q8 and _dt(n.inputs[1]) in _Q8
          and _dt(n.outputs[0]) == _I32)
def lower_matmul_integer(em: Emitter, n: Node) -> None:
    _lower_qmm(em, n, n.inputs[0], n.input(2), n.inputs[1], n.input(3), None, n.outputs[0], None)


@lowering("QLinearMatMul", supports=lambda n: _dt(n.inputs[0]) in _Q8 and _dt(n.inputs[3]) in _Q8
          and _dt(n.outputs[0]) in _Q8
          and all(_dt(n.inputs[i]) == _F32 for i in (1, 4, 6)))
def lower_qlinear_matmul(em: Emitter, n: Node) -> None:
    i = n.inputs
    _lower_qmm(em, n, i[0], i[2], i[3], i[5], (i[1], i[4], i[6]), n.outputs[0], i[7])


# --- ConvInteger / QLinearConv ------------------------------------------------------------------

def _lower_qconv(em: Emitter, n: Node, x, zx, w, zw, scales, bias, y, zy) -> None:
    from jitort.kernels.cpu.conv import conv2d_scratch_elems
    from jitort.kernels.cpu.qgemm import HAS_VNNI
    xs, ws_, ys = tuple(em.shape(x)), tuple(em.shape(w)), tuple(em.shape(y))
    if len(xs) not in (3, 4) or len(ws_) != len(xs) or len(ys) != len(xs):
        raise Unlowerable(n, f"{len(xs) - 2}-D quantized convolution (1-D and 2-D are compiled)")
    sp = len(xs) - 2
    strides = list(n.attrs.get("strides") or [1] * sp)
    dil = list(n.attrs.get("dilations") or [1] * sp)
    pads = _conv_pads(n, xs[2:], ws_[2:], strides, dil, ys[2:])
    group = int(n.attrs.get("group", 1))
    if sp == 1:
        xs, ws_, ys = xs[:2] + (1,) + xs[2:], ws_[:2] + (1,) + ws_[2:], ys[:2] + (1,) + ys[2:]
        strides, dil, pads = [1] + strides, [1] + dil, [0] + pads
    if xs[1] != ws_[1] * group or ws_[0] % group or ys[1] != ws_[0]:
        raise Unlowerable(n, f"inconsistent shapes X {xs}, W {ws_}, group {group}")
    m = ws_[0]
    zxv = _vec(em, n, zx, None, "x zero point (per-channel x zero points are not supported)",
               _dt(x))
    zwv = _vec(em, n, zw, m, "w zero point", _dt(w))
    const_w = w.is_const and (zw is None or zw.is_const)
    # constant weights, VNNI, enough rows per group: the integer gemm (kernels/cpu/qgemm.py)
    use_i8 = const_w and HAS_VNNI and ws_[0] // group >= _I8_MIN_MG and ws_[1] > 0
    if const_w and not use_i8:
        wcv, wmax = _shifted_weights(em, "qconv_w", w, zw, ws_, 0)
    else:
        wcv, wmax = Zeros("float32", (1, 1, 1, 1)), 0
    sx, swv, sy, zyv, mode, lo, hi = _requant(em, n, scales, zy, y, "x scale", "w scale", m)
    if bias is not None:
        if tuple(em.shape(bias)) != (m,):
            raise Unlowerable(n, f"bias of shape {tuple(em.shape(bias))}")
        bv = em.read(bias)
    else:
        bv = Zeros("int32", (1,))
    if use_i8:
        _lower_qconv_i8(em, n, x, zxv, w, zw, (strides, pads, dil, group), (xs, ws_, ys),
                        (mode, sx, swv, sy, zyv, bv, bias is not None, lo, hi), y)
        return
    ncol = max(1, conv2d_scratch_elems(xs[1], ws_[2], ws_[3], ys[2], ys[3], group, em.threads))
    scr = em.temp(_prod(xs) + _prod(ws_) + _prod(ys) + ncol, np.float64)
    yv = em.write(y)
    geo = em.sizes((strides[0], strides[1], pads[0], pads[1], dil[0], dil[1]))
    em.call(_quant.qconv2d, em.shaped(x, xs), zxv, em.shaped(w, ws_), zwv, wcv, wmax, const_w,
            yv.reshape(em.sizes(ys)), scr, em.size(ncol), *geo, em.size(group), mode, sx, swv,
            sy, zyv, bv, bias is not None, lo, hi)


def _lower_qconv_i8(em: Emitter, n: Node, x, zxv, w, zw, geo, shapes, quant, y) -> None:
    """A constant-weight quantized convolution on the integer gemm (``quant.qconv2d_i8``):
    the weights packed here, once."""
    from jitort.kernels.cpu.gemm import scratch_workers
    from jitort.kernels.cpu.quant import prepack_conv_w, qconv_i8_scratch
    (strides, pads, dil, group), (xs, ws_, ys) = geo, shapes
    mode, sx, swv, sy, zyv, bv, has_bias, lo, hi = quant
    key = ("qconv_w_i8", id(w.const), None if zw is None else id(zw.const), int(group))
    if key not in em.memo:
        wz = np.zeros(1, np.int32) if zw is None else zw.const.reshape(-1)
        em.memo[key] = prepack_conv_w(w.const.reshape(tuple(concrete(d) for d in ws_)), wz,
                                      int(group))
    pk, rs, zwi = (em.constant(key + (i,), lambda i=i: em.memo[key][i]) for i in range(3))
    has_zw = em.memo[key][3]
    threads = scratch_workers(em.threads)
    nbytes = qconv_i8_scratch(xs[0], xs[1], xs[2], xs[3], ws_[2], ws_[3], ys[2], ys[3],
                              strides[0], strides[1], pads[0], pads[1], dil[0], dil[1], group,
                              threads)
    scr = em.temp(nbytes, np.uint8)
    yv = em.write(y)
    g = em.sizes((strides[0], strides[1], pads[0], pads[1], dil[0], dil[1], group))
    em.call(_quant.qconv2d_i8, em.shaped(x, xs), zxv, _dt(x) == np.int8, pk, rs, zwi, has_zw,
            *em.sizes((ws_[2], ws_[3])), yv.reshape(em.sizes(ys)), scr, *g, mode, sx, swv, sy,
            zyv, bv, has_bias, lo, hi)


@lowering("ConvInteger", supports=lambda n: _dt(n.inputs[0]) in _Q8 and _dt(n.inputs[1]) in _Q8
          and _dt(n.outputs[0]) == _I32)
def lower_conv_integer(em: Emitter, n: Node) -> None:
    _lower_qconv(em, n, n.inputs[0], n.input(2), n.inputs[1], n.input(3), None, None,
                 n.outputs[0], None)


@lowering("QLinearConv", supports=lambda n: _dt(n.inputs[0]) in _Q8 and _dt(n.inputs[3]) in _Q8
          and _dt(n.outputs[0]) in _Q8 and all(_dt(n.inputs[i]) == _F32 for i in (1, 4, 6))
          and (n.input(8) is None or _dt(n.inputs[8]) == _I32))
def lower_qlinear_conv(em: Emitter, n: Node) -> None:
    i = n.inputs
    _lower_qconv(em, n, i[0], i[2], i[3], i[5], (i[1], i[4], i[6]), n.input(8), n.outputs[0],
                 i[7])


# --- host evaluation ----------------------------------------------------------------------------
# QuantizeLinear / DequantizeLinear on host-known values (constant weights, constant-index
# Gathers in models from onnxruntime's quantizer) run in the interpreter, and onnx.reference has
# no implementation before opset 19: these numpy fast paths (registered with the interpreter's
# registry from here, the family's module) follow the kernels' arithmetic.

from ...interpreter.registry import Defer, fast  # noqa: E402


def _np_scale(x, s, axis, block):
    """``s`` broadcastable against ``x`` (per-tensor, per-axis or blocked)."""
    if s.size == 1 and block <= 0:
        return s.reshape(())
    axis = _axis(axis, x.ndim)
    if block <= 0:
        shape = [1] * x.ndim
        shape[axis] = -1
        return s.reshape(shape)
    return np.take(np.repeat(s, block, axis=axis), np.arange(x.shape[axis]), axis=axis)


@fast("QuantizeLinear", since=10)
def _host_quantize(node):
    axis, block = node.attr("axis", 1), int(node.attr("block_size", 0) or 0)
    out_attr = node.attr("output_dtype", 0)

    def run(a):
        x, s, z = a[0], a[1], (a[2] if len(a) > 2 else None)
        if out_attr:
            from onnx.helper import tensor_dtype_to_np_dtype
            dt = np.dtype(tensor_dtype_to_np_dtype(out_attr))
        else:
            dt = np.dtype(np.uint8) if z is None else z.dtype
        if dt not in _QINT or s.dtype != _F32 or x.dtype not in (_F32, _I32):
            raise Defer
        info = np.iinfo(dt)
        zp = np.float32(0) if z is None else _np_scale(x, z, axis, block).astype(np.float32)
        with np.errstate(invalid="ignore", divide="ignore"):
            v = x.astype(np.float32) / _np_scale(x, s, axis, block)
            lo, hi = np.float32(info.min) - zp, np.float32(info.max) - zp
            v = np.where(v >= lo, v, lo)
            v = np.minimum(v, hi)
        return [np.asarray((np.rint(v) + zp).astype(np.int32).astype(dt))]
    return run


@fast("DequantizeLinear", since=10)
def _host_dequantize(node):
    axis, block = node.attr("axis", 1), int(node.attr("block_size", 0) or 0)

    def run(a):
        x, s, z = a[0], a[1], (a[2] if len(a) > 2 else None)
        if x.dtype not in _QINT + (_I32,) or s.dtype != _F32 or node.attr("output_dtype", 0) not in (0, 1):
            raise Defer
        v = x.astype(np.int32)
        if z is not None:
            v = v - _np_scale(x, z, axis, block).astype(np.int32)
        return [np.asarray(v.astype(np.float32) * _np_scale(x, s, axis, block))]
    return run
