"""16-bit floats (float16, bfloat16) as uint16 storage, converted to and from float32.

Numba has no float16 arrays on the CPU and no bfloat16 at all, so jitort keeps such values in
uint16 arrays (the words themselves) and computes in float32: kernels and fused loops load a
word, convert it (``f16_to_f32`` / ``bf16_to_f32``), compute, and convert-store
(``f32_to_f16`` / ``f32_to_bf16``). ``round_f16`` / ``round_bf16`` round a float32 to the
nearest 16-bit value and return it as a float32 (a 16-bit temporary held in a register).

float16: LLVM's ``fpext half`` / ``fptrunc float to half`` where the CPU has F16C (x86) or
native half conversions (aarch64): LLVM lowers them to ``vcvtph2ps`` / ``vcvtps2ph`` (vector
forms in vectorized loops). Elsewhere LLVM would emit calls to compiler-rt's
``__extendhfsf2`` / ``__truncsfhf2``, which Numba's JIT does not link, so an exact integer
version is used instead (chosen once at import from the host CPU's features). Both round to
nearest even, keep infinities, and turn NaN into a quiet NaN of the same sign.

bfloat16: the top 16 bits of a float32: widening is a shift; narrowing rounds to nearest even
by adding ``0x7fff + lsb`` before the shift; a NaN stays a (quiet) NaN.
"""
import platform

import numpy as np
from llvmlite import binding as _llvm
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

_FLAGS = dict(inline='always', error_model='numpy')


def _has_hw_half() -> bool:
    if platform.machine().lower() in ("aarch64", "arm64"):
        return True
    try:
        return "f16c" in _llvm.get_host_cpu_features().flatten().split(",") or \
            "+f16c" in _llvm.get_host_cpu_features().flatten().split(",")
    except Exception:  # no feature query: the integer conversions are always right
        return False


#: Whether float16 converts through LLVM's half instructions (else the integer version).
HW_HALF = _has_hw_half()


# --- bit casts -------------------------------------------------------------------------------

@intrinsic
def _f32_bits(typingctx, x):
    """A float32's bits as uint32."""
    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.IntType(32))
    return types.uint32(types.float32), codegen


@intrinsic
def _bits_f32(typingctx, u):
    """uint32 bits as a float32."""
    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.FloatType())
    return types.float32(types.uint32), codegen


@intrinsic
def _hw_f16_to_f32(typingctx, h):
    """``fpext half`` of a uint16's bits."""
    def codegen(context, builder, sig, args):
        return builder.fpext(builder.bitcast(args[0], ir.HalfType()), ir.FloatType())
    return types.float32(types.uint16), codegen


@intrinsic
def _hw_f32_to_f16(typingctx, x):
    """``fptrunc float to half`` (round to nearest even), as uint16 bits."""
    def codegen(context, builder, sig, args):
        return builder.bitcast(builder.fptrunc(args[0], ir.HalfType()), ir.IntType(16))
    return types.uint16(types.float32), codegen


# --- float16 in integers (exact; for CPUs without half conversions) ------------------------

_MAGIC = np.float32(2.0 ** -14)  # 2**-14: (the smallest normal float16) re-biases subnormals


@njit(**_FLAGS)
def _sw_f16_to_f32(h):
    h32 = np.uint32(h)
    sign = (h32 & np.uint32(0x8000)) << np.uint32(16)
    o = (h32 & np.uint32(0x7fff)) << np.uint32(13)
    exp = o & np.uint32(0x0f800000)
    o += np.uint32(112 << 23)  # exponent bias 15 -> 127
    if exp == np.uint32(0x0f800000):  # inf / NaN: the exponent all ones again, NaN quiet
        o += np.uint32(112 << 23)
        if o & np.uint32(0x007fffff):
            o |= np.uint32(0x00400000)
    elif exp == 0:  # zero / subnormal: exact through one float subtraction
        o += np.uint32(1 << 23)
        o = _f32_bits(_bits_f32(o) - _MAGIC)
    return _bits_f32(o | sign)


@njit(**_FLAGS)
def _sw_f32_to_f16(x):
    f = _f32_bits(x)
    sign = f & np.uint32(0x80000000)
    f ^= sign
    if f >= np.uint32(143 << 23):  # >= 65536 (rounds to inf), inf or NaN
        if f > np.uint32(0x7f800000):
            o = np.uint32(0x7e00) | ((f >> np.uint32(13)) & np.uint32(0x3ff))
        else:
            o = np.uint32(0x7c00)
    elif f < np.uint32(113 << 23):  # below the smallest normal float16: a float add rounds
        g = _f32_bits(_bits_f32(f) + _bits_f32(np.uint32(126 << 23)))
        o = g - np.uint32(126 << 23)
    else:
        odd = (f >> np.uint32(13)) & np.uint32(1)
        f += np.uint32(((15 - 127) << 23) & 0xffffffff) + np.uint32(0xfff) + odd
        o = f >> np.uint32(13)
    return np.uint16(o | (sign >> np.uint32(16)))


# --- the conversions kernels call ------------------------------------------------------------

_TO_F32, _TO_F16 = ((_hw_f16_to_f32, _hw_f32_to_f16) if HW_HALF
                    else (_sw_f16_to_f32, _sw_f32_to_f16))


@njit(**_FLAGS)
def f16_to_f32(h):
    """float16 bits (uint16) -> float32."""
    return _TO_F32(np.uint16(h))


@njit(**_FLAGS)
def f32_to_f16(x):
    """float32 -> float16 bits (uint16), round to nearest even."""
    return _TO_F16(np.float32(x))


@njit(**_FLAGS)
def bf16_to_f32(h):
    """bfloat16 bits (uint16) -> float32."""
    return _bits_f32(np.uint32(h) << np.uint32(16))


@njit(**_FLAGS)
def f32_to_bf16(x):
    """float32 -> bfloat16 bits (uint16), round to nearest even; NaN stays a quiet NaN."""
    u = _f32_bits(np.float32(x))
    if (u & np.uint32(0x7fffffff)) > np.uint32(0x7f800000):
        return np.uint16((u >> np.uint32(16)) | np.uint32(0x40))
    u += np.uint32(0x7fff) + ((u >> np.uint32(16)) & np.uint32(1))
    return np.uint16(u >> np.uint32(16))


@njit(**_FLAGS)
def round_f16(x):
    """``x`` rounded to the nearest float16, as a float32."""
    return f16_to_f32(f32_to_f16(x))


@njit(**_FLAGS)
def round_bf16(x):
    """``x`` rounded to the nearest bfloat16, as a float32."""
    return bf16_to_f32(f32_to_bf16(x))
