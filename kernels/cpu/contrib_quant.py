"""CPU kernels: onnxruntime's quantized contrib ops (domain ``com.microsoft``). Imports nothing
from jitort.

The arithmetic follows onnxruntime's CPU kernels (MLAS): float32 throughout, values clamped to
the output type's range and rounded half to even (``np.rint``), as ``quant.py`` does.

* QLinearAdd: ``zc + ra * (a - za) + rb * (b - zb)`` with ``ra = sa / sc``, ``rb = sb / sc``;
  QLinearMul: ``zc + (sa * sb / sc) * (a - za) * (b - zb)``.
* QLinearSigmoid / QLinearLeakyRelu / QLinearConcat's requantized inputs: a 256-entry table
  built at compile time (dequantize, the function, quantize), as onnxruntime builds one.
* QLinearGlobalAveragePool: the int32 sum of ``x - zx`` over the image, times
  ``sx / (sy * image size)``, requantized.
* MatMulIntegerToFloat / DynamicQuantizeMatMul: the exact int32 product (``quant.qmatmul*``)
  times ``sa * sb[n]`` plus the bias.
* MatMulNBits: the blockwise n-bit weights dequantized to float32 once (``dequantize_nbits``,
  numpy, at compile time); the product is the float gemm's.
"""
import numpy as np
from numba import njit


@njit(cache=True, error_model='numpy', inline='always')
def _round_clamp(v, lo, hi):
    if not (v >= lo):  # NaN too
        v = lo
    if v > hi:
        v = hi
    return np.int32(np.rint(v))


@njit(cache=True, error_model='numpy')
def qlinear_binary(a4, b4, y4, mul, ra, rb, za, zb, zc, lo, hi):
    """QLinearAdd (``mul`` False) / QLinearMul over 4-D views whose dimensions are the
    output's or 1 (broadcast): see the module docstring."""
    d0, d1, d2, d3 = y4.shape
    a0, a1, a2, a3 = (a4.shape[0] != 1, a4.shape[1] != 1, a4.shape[2] != 1, a4.shape[3] != 1)
    b0, b1, b2, b3 = (b4.shape[0] != 1, b4.shape[1] != 1, b4.shape[2] != 1, b4.shape[3] != 1)
    fz = np.float32(zc)
    for i0 in range(d0):
        for i1 in range(d1):
            for i2 in range(d2):
                for i3 in range(d3):
                    x = np.float32(np.int32(a4[i0 * a0, i1 * a1, i2 * a2, i3 * a3]) - za)
                    w = np.float32(np.int32(b4[i0 * b0, i1 * b1, i2 * b2, i3 * b3]) - zb)
                    if mul:
                        v = x * w * ra + fz
                    else:
                        v = ra * x + rb * w + fz
                    y4[i0, i1, i2, i3] = _round_clamp(v, lo, hi)


@njit(cache=True, error_model='numpy')
def lut_apply(x1, table, y1, off):
    """y = table[x + off] (off 128 for int8, 0 for uint8)."""
    for i in range(x1.shape[0]):
        y1[i] = table[np.int32(x1[i]) + off]


@njit(cache=True, error_model='numpy')
def lut_concat(x2, table, off, y2, col0):
    """One QLinearConcat input (outer, its columns) into y2 (outer, all columns) from column
    ``col0``, each value through its requantization table."""
    for o in range(x2.shape[0]):
        for j in range(x2.shape[1]):
            y2[o, col0 + j] = table[np.int32(x2[o, j]) + off]


@njit(cache=True, error_model='numpy')
def qlinear_gap(x3, y2, zx, scale, zy, lo, hi, channels_last):
    """QLinearGlobalAveragePool: x3 (N, C, image) into y2 (N, C), or (N, image, C) when
    ``channels_last``; ``scale`` = sx / (sy * image), lo/hi the output range less zy."""
    nb = x3.shape[0]
    img = x3.shape[1] if channels_last else x3.shape[2]
    nc = y2.shape[1]
    fz = np.float32(zy)
    acc = np.empty(nc, np.int32)
    for b in range(nb):
        if channels_last:
            acc[:] = 0
            for p in range(img):
                for c in range(nc):
                    acc[c] += np.int32(x3[b, p, c])
        else:
            for c in range(nc):
                s = np.int32(0)
                for p in range(img):
                    s += np.int32(x3[b, c, p])
                acc[c] = s
        for c in range(nc):
            v = np.float32(acc[c] - zx * img) * scale
            y2[b, c] = _round_clamp(v, lo, hi) + np.int32(fz)


@njit(cache=True, error_model='numpy')
def int_to_float(c3, sa, sb, bias, has_bias, y3):
    """y3 = float32(c3) * (sa[0] * sb[n or 0]) (+ bias[n]): MatMulIntegerToFloat's output."""
    nb = sb.shape[0]
    s0 = np.float32(sa[0])
    for t in range(c3.shape[0]):
        for m in range(c3.shape[1]):
            for n in range(c3.shape[2]):
                s = s0 * np.float32(sb[n if nb > 1 else 0])
                v = np.float32(c3[t, m, n]) * s
                if has_bias:
                    v += bias[n]
                y3[t, m, n] = v


def build_lut(fn, sx, zx, sy, zy, in_dtype, out_dtype):
    """The 256-entry table of a quantized unary function (numpy, at compile time): for each
    code q of ``in_dtype`` (indexed q - min), quantize(fn((q - zx) * sx)) into ``out_dtype``."""
    info_in, info_out = np.iinfo(in_dtype), np.iinfo(out_dtype)
    q = np.arange(info_in.min, info_in.max + 1, dtype=np.int32)
    x = ((q - np.int32(zx)).astype(np.float32) * np.float32(sx)).astype(np.float32)
    f = np.asarray(fn(x), np.float32)
    with np.errstate(invalid="ignore", divide="ignore"):
        v = f / np.float32(sy)
    lo, hi = np.float32(info_out.min - int(zy)), np.float32(info_out.max - int(zy))
    v = np.where(v >= lo, v, lo)
    v = np.minimum(v, hi)
    return (np.rint(v).astype(np.int32) + np.int32(zy)).astype(out_dtype)


def dequantize_nbits(b, scales, zp, k, n, bits, block):
    """MatMulNBits' weights as float32 (K, N) (numpy, at compile time). ``b``: uint8
    (N, blocks, block * bits / 8), codes packed from the low bits up; ``scales`` (N * blocks);
    ``zp``: None (the middle code, 2**(bits-1)), uint8 packed like ``b`` per column (N, ceil(
    blocks * bits / 8)), or float (N * blocks) as the scales."""
    nblk = (k + block - 1) // block
    per = 8 // bits
    mask = (1 << bits) - 1
    raw = np.asarray(b, np.uint8).reshape(n, -1)
    codes = np.empty((n, raw.shape[1] * per), np.int32)
    for j in range(per):
        codes[:, j::per] = (raw >> (j * bits)) & mask
    codes = codes.reshape(n, nblk, -1)[:, :, :block]
    s = np.asarray(scales, np.float32).reshape(n, nblk, 1)
    if zp is None:
        z = np.full((n, nblk, 1), float(1 << (bits - 1)), np.float32)
    elif np.asarray(zp).dtype == np.uint8:
        zr = np.asarray(zp, np.uint8).reshape(n, -1)
        zc = np.empty((n, zr.shape[1] * per), np.int32)
        for j in range(per):
            zc[:, j::per] = (zr >> (j * bits)) & mask
        z = zc[:, :nblk].astype(np.float32).reshape(n, nblk, 1)
    else:
        z = np.asarray(zp, np.float32).reshape(n, nblk, 1)
    w = ((codes.astype(np.float32) - z) * s).reshape(n, nblk * block)[:, :k]
    return np.ascontiguousarray(w.T.astype(np.float32))
