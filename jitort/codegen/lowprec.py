"""Low-precision element types in generated code: float8 (E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ,
E8M0), float4 E2M1, int4 / uint4, int2 / uint2.

numpy (ml_dtypes) stores each of them unpacked, one byte per element; jitort plans them at that
size and hands them to generated code as uint8 views (``storage_dtype``). Fused elementwise
loops widen each such operand to float32 on load and narrow on store with the conversions of
``kernels/cpu/lowprec.py`` (``_l.`` in kernel text): the pattern of float16 / bfloat16
(``kernels/cpu/halfprec.py``). Cast / CastLike compile to and from these types; a Cast between
two of them goes through float32 (exact: every value of each type is a float32). Their
QuantizeLinear / DequantizeLinear lowerings are in ``lowerings/quant.py``.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from ..ir import Node

#: dtype -> its name in kernels/cpu/lowprec.py (``NAMES``, in the order of its type codes)
LOWP: dict[np.dtype, str] = {
    np.dtype(ml_dtypes.float8_e4m3fn): "e4m3fn",
    np.dtype(ml_dtypes.float8_e4m3fnuz): "e4m3fnuz",
    np.dtype(ml_dtypes.float8_e5m2): "e5m2",
    np.dtype(ml_dtypes.float8_e5m2fnuz): "e5m2fnuz",
    np.dtype(ml_dtypes.float4_e2m1fn): "e2m1",
    np.dtype(ml_dtypes.float8_e8m0fnu): "e8m0",
    np.dtype(ml_dtypes.int4): "i4",
    np.dtype(ml_dtypes.uint4): "u4",
    np.dtype(ml_dtypes.int2): "i2",
    np.dtype(ml_dtypes.uint2): "u2",
}
KIND = {dt: k for k, dt in enumerate(LOWP)}
#: float8 types: Cast's ``saturate`` applies to them
FLOAT8 = tuple(list(LOWP)[:4])
E8M0 = np.dtype(ml_dtypes.float8_e8m0fnu)
_U8 = np.dtype(np.uint8)
#: Cast's round_mode (opset 24+, for E8M0) -> kernels/cpu/lowprec.py's code
ROUND_MODES = {"up": 0, "nearest": 1, "down": 2}
#: sources a Cast narrows to a low-precision type exactly (float64 would round twice)
_NARROW_FROM = (np.dtype(np.float32), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))

#: the conversions kernel text calls, by name -> their spelling (the ``_l`` module alias)
MATH = {f"{fn}": f"_l.{fn}" for name in LOWP.values()
        for fn in (f"{name}_to_f32", f"f32_to_{name}", f"round_{name}")}


def is_lowp(dt) -> bool:
    return dt is not None and np.dtype(dt) in LOWP


def cast_supported(n: Node, plain: tuple) -> bool:
    """Cast / CastLike from or to a low-precision type: ``plain`` lists the other dtypes the
    fused loops take (numeric, bool, 16-bit floats)."""
    src, dst = np.dtype(n.inputs[0].dtype), np.dtype(n.outputs[0].dtype)
    if dst in LOWP:
        if n.attrs.get("round_mode", "up") not in ROUND_MODES:
            return False
        return src in _NARROW_FROM or src in LOWP
    return src in LOWP and (dst in plain or dst in LOWP)


def narrow_expr(n: Node, x: str, math_call) -> str:
    """The float32 value ``x`` rounded to the Cast's low-precision output type (still a
    float32: the store writes its byte)."""
    dt = np.dtype(n.outputs[0].dtype)
    sat = "True" if n.attrs.get("saturate", 1) else "False"
    mode = str(ROUND_MODES[n.attrs.get("round_mode", "up")])
    return math_call(f"round_{LOWP[dt]}", f"np.float32({x})", sat, mode)

