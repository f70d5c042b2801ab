"""Low-precision element types as one byte each, converted to and from float32.

The types: float8 (E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ, E8M0), float4 E2M1, int4 / uint4 and
int2 / uint2. numpy (through ml_dtypes) stores each of them unpacked, one element per byte, and
so does jitort: generated code sees uint8 arrays (the bytes themselves) and computes in float32,
as for float16 (``halfprec.py``): load a byte, widen it (``<t>_to_f32``), compute, round
(``round_<t>``) and store the byte (``f32_to_<t>``). Imports nothing from jitort or ml_dtypes.

Widening is a lookup in a 256-entry float32 table per type (``TABLES``), built from the formats'
definitions; 4-bit and 2-bit types read the low bits of the byte (as ml_dtypes does) and write
them with the high bits clear.

Narrowing (``encode``) follows onnx.reference's Cast, i.e. ml_dtypes' conversions and ONNX's
``saturate`` rule:

* float8: round to nearest even; with ``saturate`` a finite value beyond the largest one and
  +-Inf become +-max; without it they become NaN (E4M3FN: the sign kept; FNUZ: 0x80, their
  only NaN) or +-Inf (E5M2). NaN stays NaN. FNUZ types have no -0: a negative value that
  rounds to zero is +0.
* float4 E2M1 (no Inf, no NaN): round to nearest even, beyond +-6 (Inf included) saturates;
  NaN becomes a zero whose sign is the opposite of the NaN's (ml_dtypes' rule).
* E8M0 (powers of two 2**-127..2**127, 0xFF NaN; the sign is dropped): the exponent of the
  float32, rounded ``up`` (any fraction), ``nearest`` or ``down`` as
  onnx.numpy_helper.to_float8e8m0; with ``saturate`` 2**127 does not round up to NaN.
* int4 / uint4 / int2 / uint2: truncation toward zero; a value outside the type's range, Inf
  or NaN gives 0 (ml_dtypes' float -> intN conversion, which onnx.reference's Cast uses).
  QuantizeLinear's rounding and clamping are done before (see ``quantize_lowp``).
"""
import numpy as np
from numba import njit

from .halfprec import _bits_f32, _f32_bits

#: (no ``inline='always'``: Numba's IR inlining of the ten-way ``encode`` made every caller
#: take tens of seconds to compile; LLVM inlines these small functions anyway)
_FLAGS = dict(error_model='numpy')

#: type codes, in the order of ``TABLES``' rows
E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ, E2M1, E8M0, I4, U4, I2, U2 = range(10)
#: E8M0 rounding modes (Cast's ``round_mode``)
ROUND_UP, ROUND_NEAREST, ROUND_DOWN = 0, 1, 2
#: name of each type code in generated code (``<name>_to_f32``, ``f32_to_<name>``...)
NAMES = ("e4m3fn", "e4m3fnuz", "e5m2", "e5m2fnuz", "e2m1", "e8m0", "i4", "u4", "i2", "u2")


def _float_value(code: int, ebits: int, mbits: int, bias: int) -> float:
    """The magnitude of an IEEE-like code (sign bit excluded), subnormals included."""
    e, m = code >> mbits, code & ((1 << mbits) - 1)
    if e == 0:
        return m * 2.0 ** (1 - bias - mbits)
    return (1 + m / (1 << mbits)) * 2.0 ** (e - bias)


def _table(kind: int) -> np.ndarray:
    """The float32 value of each byte 0..255 read as type ``kind``."""
    out = np.zeros(256, np.float32)
    for b in range(256):
        if kind in (E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ, E2M1):
            bits = 4 if kind == E2M1 else 8
            c = b & ((1 << bits) - 1)
            sign, mag = c >> (bits - 1), c & ((1 << (bits - 1)) - 1)
            ebits, mbits, bias = {E4M3FN: (4, 3, 7), E4M3FNUZ: (4, 3, 8), E5M2: (5, 2, 15),
                                  E5M2FNUZ: (5, 2, 16), E2M1: (2, 1, 1)}[kind]
            v = _float_value(mag, ebits, mbits, bias)
            if kind == E4M3FN and mag == 0x7F:
                v = np.nan
            elif kind == E5M2 and mag >= 0x7C:
                v = np.inf if mag == 0x7C else np.nan
            elif kind in (E4M3FNUZ, E5M2FNUZ) and c == 0x80:
                v = np.nan  # (negative, as ml_dtypes reads it)
            out[b] = -v if sign else v  # (a NaN keeps its sign: re-encoding keeps it too)
        elif kind == E8M0:
            out[b] = np.nan if b == 0xFF else np.float32(2.0 ** (b - 127))
        else:
            bits = 4 if kind in (I4, U4) else 2
            c = b & ((1 << bits) - 1)
            signed = kind in (I4, I2)
            out[b] = c - (1 << bits) if signed and c >> (bits - 1) else c
    return out


#: ``TABLES[kind, byte]``: the float32 value of ``byte`` as type ``kind``
TABLES = np.stack([_table(k) for k in range(len(NAMES))])


# --- narrowing -------------------------------------------------------------------------------

@njit(**_FLAGS)
def _enc_float(x, sat, mbits, emin, maxv, maxcode, kind):
    """float32 -> code of a float8 / float4 type (module doc): ``mbits`` mantissa bits,
    smallest normal exponent ``emin``, largest finite value ``maxv`` (code ``maxcode``)."""
    u = _f32_bits(np.float32(x))
    neg = (u >> np.uint32(31)) != 0
    a = u & np.uint32(0x7fffffff)
    sbit = np.uint32(8) if kind == E2M1 else np.uint32(0x80)
    sign = sbit if neg else np.uint32(0)
    fnuz = kind == E4M3FNUZ or kind == E5M2FNUZ
    if a > np.uint32(0x7f800000):  # NaN
        if fnuz:
            return np.uint8(0x80)
        if kind == E2M1:
            return np.uint8(sbit - sign)
        return np.uint8(sign | np.uint32(0x7f if kind == E4M3FN else 0x7e))
    e = np.int32(a >> np.uint32(23)) - np.int32(127)
    if a == np.uint32(0x7f800000):
        r = np.float32(np.inf)
    elif e < emin - mbits - 1:  # below half the smallest subnormal (float32 subnormals too)
        r = np.float32(0.0)
    else:
        q = _bits_f32(np.uint32((max(e, emin) - mbits + 127) << 23))  # the target's ulp there
        r = np.float32(np.rint(_bits_f32(a) / q)) * q
    if r > maxv:  # overflow (after rounding), Inf
        if sat or kind == E2M1:
            return np.uint8(sign | np.uint32(maxcode))
        if kind == E5M2:
            return np.uint8(sign | np.uint32(0x7c))
        if fnuz:
            return np.uint8(0x80)
        return np.uint8(sign | np.uint32(0x7f))
    if r == 0:
        return np.uint8(0) if fnuz else np.uint8(sign)
    rb = _f32_bits(r)
    if np.int32(rb >> np.uint32(23)) - np.int32(127) < emin:  # a subnormal of the target
        code = np.uint32(r / _bits_f32(np.uint32((emin - mbits + 127) << 23)))
    else:  # rebias the exponent, keep the top mantissa bits
        code = (rb >> np.uint32(23 - mbits)) - np.uint32((127 - (1 - emin)) << mbits)
    return np.uint8(sign | code)


@njit(**_FLAGS)
def _enc_e8m0(x, sat, mode):
    """float32 -> E8M0 code, as onnx.numpy_helper.to_float8e8m0 (the sign is dropped)."""
    u = _f32_bits(np.float32(x))
    exp = (u >> np.uint32(23)) & np.uint32(0xff)
    if exp == np.uint32(0xff):
        return np.uint8(0xff)
    up = False
    if mode == ROUND_NEAREST:
        g = (u & np.uint32(0x400000)) != 0
        rr = (u & np.uint32(0x200000)) != 0
        s = (u & np.uint32(0x1fffff)) != 0
        up = g and (rr or s or exp > 0)
    elif mode == ROUND_UP:
        up = (u & np.uint32(0x7fffff)) != 0
    if up and not (sat and exp == np.uint32(0xfe)):
        exp += np.uint32(1)
    return np.uint8(exp)


@njit(**_FLAGS)
def _enc_int(x, lo, hi, mask):
    """float32 -> intN code: truncated toward zero; out of range, Inf, NaN -> 0."""
    v = np.float32(x)
    if not (v > np.float32(lo - 1) and v < np.float32(hi + 1)):
        return np.uint8(0)
    return np.uint8(np.int32(v) & mask)


@njit(**_FLAGS)
def encode(kind, x, sat, mode):
    """float32 ``x`` as a byte of type ``kind`` (module doc); ``sat``: Cast's ``saturate``
    (float8 and E8M0), ``mode``: E8M0's rounding mode."""
    if kind == E4M3FN:
        return _enc_float(x, sat, 3, -6, np.float32(448.0), 0x7e, kind)
    if kind == E4M3FNUZ:
        return _enc_float(x, sat, 3, -7, np.float32(240.0), 0x7f, kind)
    if kind == E5M2:
        return _enc_float(x, sat, 2, -14, np.float32(57344.0), 0x7b, kind)
    if kind == E5M2FNUZ:
        return _enc_float(x, sat, 2, -15, np.float32(57344.0), 0x7f, kind)
    if kind == E2M1:
        return _enc_float(x, sat, 1, 0, np.float32(6.0), 0x7, kind)
    if kind == E8M0:
        return _enc_e8m0(x, sat, mode)
    if kind == I4:
        return _enc_int(x, -8, 7, 0xf)
    if kind == U4:
        return _enc_int(x, 0, 15, 0xf)
    if kind == I2:
        return _enc_int(x, -2, 1, 0x3)
    return _enc_int(x, 0, 3, 0x3)


@njit(**_FLAGS)
def decode(kind, b):
    """Byte ``b`` of type ``kind`` as a float32."""
    return TABLES[kind, np.uint8(b)]


@njit(**_FLAGS)
def _store(kind, t):
    """A value already rounded to ``kind`` (``round_*``, NaN / Inf included) as its byte."""
    if kind == E8M0:  # exact powers of two (2**-127 is a float32 subnormal)
        if t != t:
            return np.uint8(0xff)
        return np.uint8((_f32_bits(np.float32(t)) >> np.uint32(23)) & np.uint32(0xff))
    return encode(kind, t, False, ROUND_DOWN)


# --- what generated code calls: <name>_to_f32, f32_to_<name>, round_<name> ------------------

def _make(kind):
    @njit(**_FLAGS)
    def to_f32(b):
        return TABLES[kind, np.uint8(b)]

    @njit(**_FLAGS)
    def from_f32(t):
        return _store(kind, t)

    @njit(**_FLAGS)
    def round_(x, sat, mode):
        return TABLES[kind, encode(kind, np.float32(x), sat, mode)]

    return to_f32, from_f32, round_


for _k, _name in enumerate(NAMES):
    (globals()[f"{_name}_to_f32"], globals()[f"f32_to_{_name}"],
     globals()[f"round_{_name}"]) = _make(_k)
del _k, _name


# --- QuantizeLinear / DequantizeLinear (layouts: kernels/cpu/quant.py's module doc) ----------

_INT_RANGE = np.array([[0, 0], [0, 0], [0, 0], [0, 0], [0, 0], [0, 0],
                       [-8, 7], [0, 15], [-2, 1], [0, 3]], np.float32)


@njit(**_FLAGS)
def _quant1(kind, v, zp, sat):
    """One QuantizeLinear element: ``v = x / scale``; ``zp``: the zero point's value."""
    if kind >= I4:  # rint, plus the zero point, clamped (NaN -> the low end)
        lo, hi = _INT_RANGE[kind, 0] - zp, _INT_RANGE[kind, 1] - zp
        if not (v >= lo):
            v = lo
        if v > hi:
            v = hi
        return encode(kind, np.float32(np.rint(v)) + zp, sat, ROUND_UP)
    if kind == E2M1:  # float4: the zero point is added (onnx.reference)
        return encode(kind, v + zp, sat, ROUND_UP)
    return encode(kind, v, sat, ROUND_UP)  # float8: the zero point is 0 by the spec


@njit(**_FLAGS)
def _at(j, x3, s3, blk):
    """Element ``j`` of x3 (O, A, I) in row-major order: its (o, a, i) and those of its scale
    and zero point in s3 / z3."""
    rest, i = divmod(j, x3.shape[2])
    o, a = divmod(rest, x3.shape[1])
    return o, a, i, (o if s3.shape[0] > 1 else 0), a // blk, (i if s3.shape[2] > 1 else 0)


@njit(cache=True, error_model='numpy')
def quantize_lowp(x3, s3, z3, y3, blk, has_zp, kind, sat):
    """QuantizeLinear of float32 ``x3`` to bytes ``y3`` of type ``kind``; ``z3``: bytes of
    the same type (read when ``has_zp``)."""
    for j in range(x3.size):
        o, a, i, so, sa, si = _at(j, x3, s3, blk)
        zp = TABLES[kind, z3[so, sa, si]] if has_zp else np.float32(0.0)
        v = np.float32(x3[o, a, i]) / np.float32(s3[so, sa, si])
        y3[o, a, i] = _quant1(kind, v, zp, sat)


@njit(cache=True, error_model='numpy')
def dequantize_lowp(x3, s3, z3, y3, blk, has_zp, kind):
    """DequantizeLinear of bytes ``x3`` of type ``kind`` to float32 ``y3``: ``(x - z) * s``
    for the integer types, ``x * s`` for the float ones (their zero point is ignored, as
    onnx.reference does)."""
    use_zp = has_zp and kind >= I4
    for j in range(x3.size):
        o, a, i, so, sa, si = _at(j, x3, s3, blk)
        v = TABLES[kind, x3[o, a, i]]
        if use_zp:
            v = v - TABLES[kind, z3[so, sa, si]]
        y3[o, a, i] = v * np.float32(s3[so, sa, si])
