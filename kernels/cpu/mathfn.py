"""Vectorizable scalar math helpers for generated elementwise loops.

The ``*32`` functions take and return a float32 scalar. They use range reduction plus
polynomials fitted for this module (least squares on Chebyshev nodes), no libm calls, and
branch-free selects so LLVM can vectorize a loop that calls them. Max error is about 1e-6
relative (exp/sigmoid/tanh/log) over the whole float32 range; ``erf32`` is 1e-6 relative
or better for |x| > 1e-30, with exact signed zeros.

Special values: NaN in gives NaN out; ``exp32(-inf) == 0``, ``exp32(inf) == inf`` and it
overflows to inf above ~88.72 and underflows smoothly through denormals below ~-87.3;
``sigmoid32`` saturates to 0/1; ``tanh32``/``erf32`` to +-1; ``log32(0) == -inf``,
``log32(x<0)`` is NaN, ``log32(inf) == inf``.

Pass float32 values: a float64 argument makes Numba compute in float64 with these float32
polynomials (less accurate than libm). For dtype-generic code use ``fexp``, ``fexpneg``,
``fsigmoid``, ``ftanh``, ``ferf`` and ``flog``: float32 -> the polynomial version, float64 ->
libm.

The helpers are ``inline='always'`` so they inherit the caller's fastmath flags; they are
written to stay correct under ``{'reassoc', 'contract', 'arcp'}`` (no ``nnan``/``ninf``).
"""
import math
import warnings

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core.errors import NumbaIRAssumptionWarning
from numba.extending import intrinsic, overload

# Typed (overload) inlining of the helpers below makes Numba's SSA pass emit a benign
# "variable '<fn>_vNN__vphi..' is not in scope" pedantic warning; silence only that one.
warnings.filterwarnings('ignore', category=NumbaIRAssumptionWarning,
                        message=r"(?s).*variable '(exp32|expneg32|sigmoid32|tanh32|erf32|log32)_v")

_F = np.float32

# --- constants (float32 so float32 code stays float32) --------------------------------
_ONE = _F(1.0)
_TWO = _F(2.0)
_HALF = _F(0.5)
_ZERO = _F(0.0)
_INF = _F(np.inf)
_NINF = _F(-np.inf)
_NAN = _F(np.nan)

_EXP_HI = _F(89.0)          # above: result overflows to inf anyway
_EXP_LO = _F(-104.0)        # below: result is 0 even as a denormal
_LOG2E = _F(1.4426950408889634)
_LN2_HI = _F(0.693359375)   # exactly representable, few mantissa bits
_LN2_LO = _F(-2.12194440e-4)

# exp(r) = 1 + r + r^2 * P(r) on [-ln2/2, ln2/2]; P cubic (fitted minimax for relative
# error, 1.1e-7 before float32 rounding). The quintic P used before was far below float32
# rounding and cost two more FMAs per element.
_EP0, _EP1, _EP2, _EP3 = map(_F, (
    0.499992311000824, 0.16667114198207855, 0.041890114545822144, 0.008312525227665901))
# sigmoid(x) = 1 / (1 + exp(-x)): -x is clamped to [_SIG_LO, _EXP_HI]; exp(-88) already
# adds nothing to 1, and 2**128 (-x > 88.4) is inf, so the result is exactly 0
_SIG_LO = _F(-88.0)
# Below _FTZ_LO, exp's result would be under 2**-126 (denormal); ``expneg32`` and sigmoid32
# move such arguments to _SIG_LO, where the one-step scale 2**-127 is encoded as 0.0. A
# multiply whose result is denormal costs a microcode assist (~100+ cycles) per element
# (a causal mask's -inf scores hit it on every masked element).
_FTZ_LO = _F(-87.3)

# tanh(x) = x + x^3 * P(x^2) on [0, 0.625]
_TANH_SMALL = _F(0.625)
_TP0, _TP1, _TP2, _TP3, _TP4 = map(_F, (
    -0.3333333141, 0.1333289069, -0.05386392106, 0.02104569995, -0.006155212812))

# erf(x) = x * P(x^2) on [0, 1]
_FP0, _FP1, _FP2, _FP3, _FP4, _FP5, _FP6 = map(_F, (
    1.128379167, -0.3761262988, 0.1128362573, -0.02685539945, 0.005191218374, -0.0008034846624,
    7.933493809e-05))
# erfc(x) * exp(x^2) = R(1/x) on [1, 4]
_ERF_CLAMP = _F(4.0)
_FR0, _FR1, _FR2, _FR3, _FR4, _FR5, _FR6, _FR7 = map(_F, (
    0.0003539744573, 0.5576755452, 0.05141485685, -0.5072547916, 0.5782349, -0.3567149962,
    0.1220097755, -0.01813566915))

# log(1+f) = f - f^2/2 + f^3 * P(f) on [sqrt(.5)-1, sqrt(2)-1]
_SQRT_HALF = _F(0.70710678118654752)
_FLT_MIN = _F(1.17549435e-38)
_TWO23 = _F(8388608.0)
_TWENTYTHREE = _F(23.0)
_LP0, _LP1, _LP2, _LP3, _LP4, _LP5, _LP6, _LP7 = map(_F, (
    0.3333332856, -0.2500029652, 0.2000147135, -0.1664225085, 0.142021143, -0.1297214522,
    0.1271267889, -0.08102270427))


# --- bit-level intrinsics (plain LLVM bitcasts, vectorize fine) ------------------------
# rint(t) by the float32 "magic number" 1.5 * 2**23: after t + M the integer n sits in the
# low mantissa bits of the sum, so 2**n is two integer ops away (no float->int convert, and
# no poison: a NaN t just gives NaN n). The add and subtract are emitted here without
# fast-math flags, so a caller's 'reassoc' cannot fold (t + M) - M back to t.
_MAGIC = 12582912.0
_MAGIC_BITS = 0x4B400000


def _rint_magic(builder, t):
    f32 = ir.FloatType()
    m = ir.Constant(f32, _MAGIC)
    s = builder.fadd(t, m)
    return s, builder.fsub(s, m)


@intrinsic
def _split1(typingctx, t):
    """(n, 2**n) for n = rint(t) as float32; for |t| < 128.5 (n = 128 gives inf, n = -127
    gives 0; a NaN t gives a NaN n)."""
    if t != types.float32:
        return None

    def codegen(context, builder, sig, args):
        i32 = ir.IntType(32)
        s, n = _rint_magic(builder, args[0])
        e = builder.shl(builder.bitcast(s, i32), ir.Constant(i32, 23))      # n << 23
        scale = builder.bitcast(builder.add(e, ir.Constant(i32, 127 << 23)), ir.FloatType())
        return context.make_tuple(builder, sig.return_type, (n, scale))

    return types.UniTuple(types.float32, 2)(types.float32), codegen


@intrinsic
def _split2(typingctx, t):
    """(n, 2**h, 2**(n-h)) for n = rint(t) as float32 and h = n >> 1; for t in
    [-151, 129]: multiplying by both scales reaches denormals and overflows to inf
    correctly."""
    if t != types.float32:
        return None

    def codegen(context, builder, sig, args):
        i32 = ir.IntType(32)
        f32 = ir.FloatType()
        s, n = _rint_magic(builder, args[0])
        ni = builder.sub(builder.bitcast(s, i32), ir.Constant(i32, _MAGIC_BITS))
        h = builder.ashr(ni, ir.Constant(i32, 1))
        lo = builder.sub(ni, h)
        bias = ir.Constant(i32, 127)
        sh = ir.Constant(i32, 23)
        s1 = builder.bitcast(builder.shl(builder.add(h, bias), sh), f32)
        s2 = builder.bitcast(builder.shl(builder.add(lo, bias), sh), f32)
        return context.make_tuple(builder, sig.return_type, (n, s1, s2))

    return types.UniTuple(types.float32, 3)(types.float32), codegen


@intrinsic
def _exponent32(typingctx, x):
    """Unbiased exponent e (as float32) such that x = m * 2**e with m in [0.5, 1)
    for normal positive x."""
    if x != types.float32:
        return None

    def codegen(context, builder, sig, args):
        i32 = ir.IntType(32)
        bits = builder.bitcast(args[0], i32)
        e = builder.and_(builder.lshr(bits, ir.Constant(i32, 23)), ir.Constant(i32, 0xFF))
        e = builder.sub(e, ir.Constant(i32, 126))
        return builder.sitofp(e, ir.FloatType())

    return types.float32(types.float32), codegen


@intrinsic
def _mantissa32(typingctx, x):
    """Mantissa m in [0.5, 1) of a normal positive float32 x (x = m * 2**e)."""
    if x != types.float32:
        return None

    def codegen(context, builder, sig, args):
        i32 = ir.IntType(32)
        bits = builder.bitcast(args[0], i32)
        bits = builder.and_(bits, ir.Constant(i32, 0x007FFFFF))
        bits = builder.or_(bits, ir.Constant(i32, 0x3F000000))
        return builder.bitcast(bits, ir.FloatType())

    return types.float32(types.float32), codegen


@intrinsic
def wide_vectors(typingctx):
    """Let LLVM vectorize the loops of the function this is called in with the CPU's widest
    vectors: LLVM prefers 256-bit vectors even where AVX-512 has 512-bit ones (older parts
    lowered their clock for 512-bit work); the preference is a per-function attribute, which
    this sets. No code is emitted; on CPUs without 512-bit vectors nothing changes; results
    are the same bit for bit. Call it inside the innermost loop of a
    ``prange`` body, which Numba compiles as a separate function."""
    def codegen(context, builder, sig, args):
        # llvmlite's FunctionAttributes accepts only keyword attributes; string attributes
        # are printed as given
        set.add(builder.function.attributes, '"prefer-vector-width"="512"')
        return context.get_dummy_value()

    return types.void(), codegen


# --- float32 functions -----------------------------------------------------------------
@njit(inline='always', error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _exp_poly(z, n):
    """exp(z - n*ln2) for |z - n*ln2| <= ln2/2 (Cody-Waite reduction, then the polynomial)."""
    r = z - n * _LN2_HI
    r = r - n * _LN2_LO
    p = _EP3 * r + _EP2
    p = p * r + _EP1
    p = p * r + _EP0
    return _ONE + r + r * r * p


@njit(inline='always', error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _exp_normal(z):
    """exp(z) for z in [-87.3, 88.3] (or NaN) with one scaling step; above 88.4 it is inf
    already (2**128), below -87.3 it is 0 or a wrong denormal. For callers that clamp."""
    n, scale = _split1(z * _LOG2E)
    return _exp_poly(z, n) * scale


# The clamps are written ``C if x > C else x``: a NaN x fails the compare and passes through
# (x86 minps/maxps semantics), and NaN then propagates through the arithmetic.
@njit(inline='always', error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def exp32(x):
    """exp(x) for a float32 scalar, ~2e-7 relative error; see module docstring."""
    xc = _EXP_HI if x > _EXP_HI else x
    xc = _EXP_LO if xc < _EXP_LO else xc
    n, s1, s2 = _split2(xc * _LOG2E)
    return _exp_poly(xc, n) * s1 * s2


@njit(inline='always', error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def expneg32(x):
    """exp(x) for a float32 x <= 89 (softmax's x - max <= 0), with results below 2**-126
    flushed to exactly 0 (no denormal arithmetic) and inf above ~88.4; NaN gives NaN."""
    return _exp_normal(_SIG_LO if x < _FTZ_LO else x)


@njit(inline='always', error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def sigmoid32(x):
    """1 / (1 + exp(-x)) for a float32 scalar; saturates to exactly 0 and 1 (results below
    ~4e-39, i.e. x < -88.4, are 0)."""
    z = -x
    # exp(z) is flushed to 0 where 1 + exp(z) == 1 anyway, and is inf above 88.4 (result 0)
    return _ONE / (_ONE + expneg32(_EXP_HI if z > _EXP_HI else z))


@njit(inline='always', error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def tanh32(x):
    """tanh(x) for a float32 scalar; polynomial near 0, 1 - 2/(exp(2|x|)+1) elsewhere."""
    ax = abs(x)
    z = x * x
    p = _TP4 * z + _TP3
    p = p * z + _TP2
    p = p * z + _TP1
    p = p * z + _TP0
    small = x + x * z * p
    a2 = ax + ax
    e = _exp_normal(_EXP_HI if a2 > _EXP_HI else a2)      # inf above 88.4: big = 1
    big = _ONE - _TWO / (e + _ONE)
    big = big if x > _ZERO else -big
    r = small if ax < _TANH_SMALL else big
    return r if x != _ZERO else x       # keep the sign of -0.0


@njit(inline='always', error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _poly6(t, c0, c1, c2, c3, c4, c5, c6):
    """c0 + c1 t + ... + c6 t^6 by Horner's rule (highest degree first)."""
    p = c6 * t + c5
    p = p * t + c4
    p = p * t + c3
    p = p * t + c2
    p = p * t + c1
    return p * t + c0


@njit(inline='always', error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _poly7(t, c0, c1, c2, c3, c4, c5, c6, c7):
    """c0 + c1 t + ... + c7 t^7, as :func:`_poly6` (the same multiply-adds in the same order)."""
    return _poly6(t, c1, c2, c3, c4, c5, c6, c7) * t + c0


@njit(inline='always', error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def erf32(x):
    """erf(x) for a float32 scalar; x*P(x^2) for |x|<1, 1 - exp(-x^2)*R(1/|x|) above."""
    ax = abs(x)
    a = ax if ax < _ERF_CLAMP else _ERF_CLAMP     # NaN -> 4, fixed up at the end
    z = a * a
    p = _poly6(z, _FP0, _FP1, _FP2, _FP3, _FP4, _FP5, _FP6)
    small = x * p
    ad = a if a > _ONE else _ONE
    u = _ONE / ad
    q = _poly7(u, _FR0, _FR1, _FR2, _FR3, _FR4, _FR5, _FR6, _FR7)
    big = _ONE - _exp_normal(-z) * q                # -z in [-16, 0]
    big = big if x > _ZERO else -big
    r = small if a < _ONE else big
    return r if x == x else x


@njit(inline='always', error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def log32(x):
    """Natural log of a float32 scalar (denormals handled); see module docstring."""
    tiny = x < _FLT_MIN
    xs = x * _TWO23 if tiny else x
    e = _exponent32(xs)
    e = e - _TWENTYTHREE if tiny else e
    m = _mantissa32(xs)
    lowm = m < _SQRT_HALF
    f = (m + m if lowm else m) - _ONE
    e = e - _ONE if lowm else e
    z = f * f
    p = _poly7(f, _LP0, _LP1, _LP2, _LP3, _LP4, _LP5, _LP6, _LP7)
    r = f * z * p - _HALF * z
    r = r + e * _LN2_LO
    r = r + f
    r = r + e * _LN2_HI
    r = r if x > _ZERO else _NAN
    r = _NINF if x == _ZERO else r
    return r if x < _INF else x


# --- dtype-generic wrappers (float32 -> polynomial, float64 -> libm) --------------------
def fexp(x):
    """exp for a float32 or float64 scalar (njit only)."""
    raise NotImplementedError


def fsigmoid(x):
    """Logistic sigmoid for a float32 or float64 scalar (njit only)."""
    raise NotImplementedError


def ftanh(x):
    """tanh for a float32 or float64 scalar (njit only)."""
    raise NotImplementedError


def ferf(x):
    """erf for a float32 or float64 scalar (njit only)."""
    raise NotImplementedError


def fexpneg(x):
    """exp for a float32 or float64 scalar x <= 88 (njit only); float32 results below
    2**-126 are 0 (``expneg32``), float64 uses libm."""
    raise NotImplementedError


def flog(x):
    """Natural log for a float32 or float64 scalar (njit only)."""
    raise NotImplementedError


def _sigmoid64(x):
    return 1.0 / (1.0 + math.exp(-x))


def _exp64(x):
    return math.exp(x)


def _tanh64(x):
    return math.tanh(x)


def _erf64(x):
    return math.erf(x)


def _log64(x):
    return math.log(x)


def _generic(stub, impl32, impl64):
    """Register ``stub`` for njit code: float32 -> impl32, other floats -> impl64 (both
    plain Python functions, inlined at the call site; a non-inlined erf32 stayed a
    scalar call and ran 10x slower)."""
    @overload(stub, inline='always')
    def _ov(x):
        if x == types.float32:
            return impl32
        if isinstance(x, types.Float):
            return impl64
        return None


_generic(fexp, exp32.py_func, _exp64)
_generic(fexpneg, expneg32.py_func, _exp64)
_generic(fsigmoid, sigmoid32.py_func, _sigmoid64)
_generic(ftanh, tanh32.py_func, _tanh64)
_generic(ferf, erf32.py_func, _erf64)
_generic(flog, log32.py_func, _log64)
