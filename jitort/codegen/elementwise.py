"""Elementwise ops as expression strings, and the fused loop-nest emitter.

``EXPR[op](node, args, dtypes, out_dtype) -> str`` renders one node given the names of its
(already loaded) operands. A fused group of such nodes becomes one kernel: a loop nest over the
collapsed iteration space, loads hoisted to the loop level where their index is complete, one
SSA temporary per node, stores of the group's outputs. The CUDA renderer reuses the table and
the group analysis and swaps the loop prologue, the decorator and the spelling of math
functions (:func:`math_call`).
"""
from __future__ import annotations

import functools
import math
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Callable

import ml_dtypes
import numpy as np

from ..ir import Node
from .lowprec import LOWP, MATH as LOWP_MATH, cast_supported, narrow_expr

FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
#: 16-bit floats: stored as their uint16 words (Numba has no such arrays), computed in float32
HALF = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))
F32 = np.dtype(np.float32)
_U16 = np.dtype(np.uint16)
_U8 = np.dtype(np.uint8)
INTS = tuple(np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64,
                                   np.uint8, np.uint16, np.uint32, np.uint64))
BOOL = np.dtype(np.bool_)
NUMERIC = FLOATS + INTS


def storage_dtype(dt) -> np.dtype:
    """The dtype generated code holds ``dt``'s elements in: uint16 for float16 / bfloat16,
    uint8 for the low-precision types (``lowprec.py``)."""
    dt = np.dtype(dt)
    return _U16 if dt in HALF else (_U8 if dt in LOWP else dt)


def compute_dtype(dt) -> np.dtype:
    """The dtype generated code computes ``dt`` in: float32 for float16 / bfloat16 and the
    low-precision types."""
    dt = np.dtype(dt)
    return F32 if dt in HALF or dt in LOWP else dt


def _half_name(dt) -> str:
    return "f16" if np.dtype(dt) == HALF[0] else "bf16"


def tname(dt) -> str:
    """The numpy constructor name of a dtype inside generated code."""
    dt = np.dtype(dt)
    return "np.bool_" if dt == BOOL else f"np.{dt.name}"


def lit(value, dt) -> str:
    """A typed literal (``np.float32(0.5)``): untyped Python floats would promote to float64."""
    dt = np.dtype(dt)
    if dt == BOOL:
        return "True" if value else "False"
    if dt.kind == "f":
        v = float(value)
        if math.isnan(v):
            return f"{tname(dt)}(np.nan)"
        if math.isinf(v):
            return f"{tname(dt)}({'-' if v < 0 else ''}np.inf)"
        return f"{tname(dt)}({v!r})"
    return f"{tname(dt)}({int(value)})"


#: The math functions the templates call, by name -> their spelling in CPU kernel text. A
#: backend renders the templates with its own table (``LoopStyle.math``); a name missing from
#: it has no version there (:class:`NoMath`).
CPU_MATH = {**{f: f"np.{f}" for f in (
    "exp", "log", "log1p", "sqrt", "floor", "ceil", "rint", "sign", "fmod", "trunc", "tanh",
    "sin", "cos", "tan", "arcsin", "arccos", "arctan", "sinh", "cosh", "arcsinh", "arccosh",
    "arctanh")}, "erf": "math.erf", "exp32": "_m.exp32", "sigmoid32": "_m.sigmoid32",
    "tanh32": "_m.tanh32", "erf32": "_m.erf32",
    # 16-bit floats stored as integer words (kernels/cpu/halfprec.py)
    "f16_to_f32": "_h.f16_to_f32", "f32_to_f16": "_h.f32_to_f16", "bf16_to_f32": "_h.bf16_to_f32",
    "f32_to_bf16": "_h.f32_to_bf16", "round_f16": "_h.round_f16", "round_bf16": "_h.round_bf16",
    **LOWP_MATH}
_MATH: ContextVar[dict] = ContextVar("elementwise_math", default=CPU_MATH)


class NoMath(LookupError):
    """A template called a math function the backend's table does not have."""


def math_call(name: str, *args: str) -> str:
    """A call of math function ``name`` as the backend being rendered spells it."""
    table = _MATH.get()
    if name not in table:
        raise NoMath(name)
    return f"{table[name]}({', '.join(args)})"


ExprFn = Callable[[Node, list, list, np.dtype], str]
EXPR: dict[str, ExprFn] = {}
#: dtypes each op is compiled for (others go to the interpreter)
DTYPES: dict[str, tuple] = {}


def expr(*ops: str, dtypes=FLOATS):
    def deco(fn):
        for op in ops:
            EXPR[op] = fn
            DTYPES[op] = dtypes
        return fn
    return deco


def _binary(sym):
    return lambda n, a, d, o: f"({a[0]} {sym} {a[1]})"


for _op, _sym in (("Add", "+"), ("Sub", "-"), ("Mul", "*")):
    expr(_op, dtypes=NUMERIC)(_binary(_sym))
for _op, _sym in (("Equal", "=="), ("Less", "<"), ("Greater", ">"), ("LessOrEqual", "<="),
                  ("GreaterOrEqual", ">=")):
    expr(_op, dtypes=NUMERIC + (BOOL,))(_binary(_sym))
expr("And", dtypes=(BOOL,))(_binary("&"))
expr("Or", dtypes=(BOOL,))(_binary("|"))
expr("Xor", dtypes=(BOOL,))(_binary("^"))
expr("Not", dtypes=(BOOL,))(lambda n, a, d, o: f"(not {a[0]})")
expr("Neg", dtypes=FLOATS + INTS)(lambda n, a, d, o: f"(-{a[0]})")
expr("Abs", dtypes=FLOATS + INTS)(lambda n, a, d, o: f"abs({a[0]})")
expr("Identity", "Expand", dtypes=NUMERIC + (BOOL,))(lambda n, a, d, o: a[0])
expr("Reciprocal")(lambda n, a, d, o: f"({lit(1, o)} / {a[0]})")
expr("Sqrt")(lambda n, a, d, o: math_call("sqrt", a[0]))
expr("Floor")(lambda n, a, d, o: math_call("floor", a[0]))
expr("Ceil")(lambda n, a, d, o: math_call("ceil", a[0]))
expr("Round")(lambda n, a, d, o: math_call("rint", a[0]))
_NP_UNARY = {"Sin": "sin", "Cos": "cos", "Tan": "tan", "Asin": "arcsin", "Acos": "arccos",
             "Atan": "arctan", "Sinh": "sinh", "Cosh": "cosh", "Asinh": "arcsinh",
             "Acosh": "arccosh", "Atanh": "arctanh"}
for _op, _fn in _NP_UNARY.items():
    expr(_op)(lambda n, a, d, o, _fn=_fn: math_call(_fn, a[0]))
expr("Log")(lambda n, a, d, o: math_call("log", a[0]))
expr("IsNaN", dtypes=FLOATS)(lambda n, a, d, o: f"({a[0]} != {a[0]})")


def _f32(o) -> bool:
    return np.dtype(o) == np.float32


@expr("Exp")
def _exp(n, a, d, o):
    return math_call("exp32", a[0]) if _f32(o) else math_call("exp", a[0])


@expr("Sigmoid")
def _sigmoid(n, a, d, o):
    if _f32(o):
        return math_call("sigmoid32", a[0])
    return f"({lit(1, o)} / ({lit(1, o)} + {math_call('exp', '-' + a[0])}))"


@expr("Tanh")
def _tanh(n, a, d, o):
    return math_call("tanh32", a[0]) if _f32(o) else math_call("tanh", a[0])


@expr("Erf")
def _erf(n, a, d, o):
    return math_call("erf32", a[0]) if _f32(o) else math_call("erf", a[0])


def _max(x, y):  # NaN-propagating select, like np.maximum
    return f"({x} if ({x} >= {y} or {x} != {x}) else {y})"


def _min(x, y):
    return f"({x} if ({x} <= {y} or {x} != {x}) else {y})"


@expr("Relu", dtypes=FLOATS + INTS)
def _relu(n, a, d, o):
    return f"({a[0]} if not ({a[0]} < {lit(0, o)}) else {lit(0, o)})"


@expr("Max", dtypes=NUMERIC)
def _vmax(n, a, d, o):
    return functools.reduce(_max, a)  # _max(_max(a0, a1), a2)...


@expr("Min", dtypes=NUMERIC)
def _vmin(n, a, d, o):
    return functools.reduce(_min, a)


@expr("Sum", dtypes=NUMERIC)
def _sum(n, a, d, o):
    return "(" + " + ".join(a) + ")"


@expr("Mean")
def _mean(n, a, d, o):
    return f"(({' + '.join(a)}) / {lit(len(a), o)})"


@expr("Pow", dtypes=NUMERIC)
def _pow(n, a, d, o):
    e = n.inputs[1]
    is_f = np.dtype(o).kind == "f"
    if e.is_const and e.const.size == 1:
        v = float(e.const.reshape(-1)[0])
        if v == 2.0:
            return f"({a[0]} * {a[0]})"
        if v == 1.0:
            return a[0]
        if v == 0.5 and is_f:
            return math_call("sqrt", a[0])
        if v == 3.0:
            return f"({a[0]} * {a[0]} * {a[0]})"
    if not is_f:  # integer base: std::pow on doubles, truncated, as onnxruntime
        return f"{tname(o)}(np.float64({a[0]}) ** np.float64({a[1]}))"
    return f"({a[0]} ** {tname(o)}({a[1]}))"


@expr("Clip", dtypes=FLOATS + INTS)
def _clip(n, a, d, o):
    x = a[0]
    if n.since_version < 11:
        lo, hi = n.attrs.get("min"), n.attrs.get("max")
        if lo is not None:
            x = _max(x, lit(lo, o))
        if hi is not None:
            x = _min(x, lit(hi, o))
        return x
    if len(a) > 1 and a[1] is not None:
        x = _max(x, a[1])
    if len(a) > 2 and a[2] is not None:
        x = _min(x, a[2])
    return x


def _below_zero(x: str, neg: str, o) -> str:
    """``x`` where it is >= 0, else ``neg``: the rectifier shape of LeakyRelu, PRelu and Elu."""
    return f"({x} if {x} >= {lit(0, o)} else {neg})"


@expr("LeakyRelu")
def _leaky(n, a, d, o):
    return _below_zero(a[0], f"{lit(n.attrs.get('alpha', 0.01), o)} * {a[0]}", o)


@expr("PRelu")
def _prelu(n, a, d, o):
    return _below_zero(a[0], f"{a[1]} * {a[0]}", o)


@expr("Elu")
def _elu(n, a, d, o):
    al = lit(n.attrs.get("alpha", 1.0), o)
    return _below_zero(a[0], f"{al} * ({_exp(n, a, d, o)} - {lit(1, o)})", o)


@expr("Selu")
def _selu(n, a, d, o):
    al, g = lit(n.attrs.get("alpha", 1.67326319217681884765625), o), lit(
        n.attrs.get("gamma", 1.05070102214813232421875), o)
    return f"({g} * ({a[0]} if {a[0]} > {lit(0, o)} else {al} * ({_exp(n, a, d, o)} - {lit(1, o)})))"


@expr("HardSigmoid")
def _hsig(n, a, d, o):
    inner = f"({lit(n.attrs.get('alpha', 0.2), o)} * {a[0]} + {lit(n.attrs.get('beta', 0.5), o)})"
    return _min(_max(inner, lit(0, o)), lit(1, o))


@expr("HardSwish")
def _hswish(n, a, d, o):
    inner = f"({lit(1 / 6, o)} * {a[0]} + {lit(0.5, o)})"
    return f"({a[0]} * {_min(_max(inner, lit(0, o)), lit(1, o))})"


@expr("Softplus")
def _softplus(n, a, d, o):
    x = a[0]
    return (f"({x} + {math_call('log1p', math_call('exp', '-' + x))} if {x} > {lit(0, o)} "
            f"else {math_call('log1p', math_call('exp', x))})")


@expr("Softsign")
def _softsign(n, a, d, o):
    return f"({a[0]} / ({lit(1, o)} + abs({a[0]})))"


@expr("ThresholdedRelu")
def _trelu(n, a, d, o):
    return f"({a[0]} if {a[0]} > {lit(n.attrs.get('alpha', 1.0), o)} else {lit(0, o)})"


@expr("Gelu")
def _gelu(n, a, d, o):
    x = a[0]
    if n.attrs.get("approximate", "none") == "tanh":
        t = _tanh(n, [f"({lit(math.sqrt(2 / math.pi), o)} * ({x} + {lit(0.044715, o)} * {x} * {x} * {x}))"], d, o)
        return f"({lit(0.5, o)} * {x} * ({lit(1, o)} + {t}))"
    e = _erf(n, [f"({x} * {lit(1 / math.sqrt(2), o)})"], d, o)
    return f"({lit(0.5, o)} * {x} * ({lit(1, o)} + {e}))"


@expr("Where", dtypes=NUMERIC + (BOOL,))
def _where(n, a, d, o):
    return f"({a[1]} if {a[0]} else {a[2]})"


@expr("Cast", dtypes=NUMERIC + (BOOL,))
def _cast(n, a, d, o):
    if np.dtype(n.outputs[0].dtype) in LOWP:  # rounded here, its byte written by the store
        return narrow_expr(n, a[0], math_call)
    if np.dtype(o) == BOOL:
        return f"({a[0]} != 0)"
    return f"{tname(o)}({a[0]})"


# --- integer arithmetic, bitwise ops ----------------------------------------------------------
SIGNED = tuple(np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64))
UNSIGNED = tuple(np.dtype(t) for t in (np.uint8, np.uint16, np.uint32, np.uint64))


@expr("Div", dtypes=NUMERIC)
def _div(n, a, d, o):
    if np.dtype(o).kind == "f":
        return f"({a[0]} / {a[1]})"
    # C division (truncates toward zero), as onnxruntime; Python's // floors
    t = tname(o)
    if np.dtype(o) in UNSIGNED:
        return f"{t}({a[0]} // {a[1]})"
    return (f"{t}(({a[0]} // {a[1]}) + {t}(({a[0]} % {a[1]} != 0) and "
            f"(({a[0]} < 0) != ({a[1]} < 0))))")


@expr("Mod", dtypes=NUMERIC)
def _mod(n, a, d, o):
    t = tname(o)
    if n.attrs.get("fmod", 0):  # C fmod: the sign of the dividend
        if np.dtype(o).kind == "f":
            return math_call("fmod", a[0], a[1])
        # integers: std::fmod on doubles, as onnxruntime; a - trunc(a / b) * b in float64 is
        # the same for |a|, |b| < 2**53 and vectorizes (integer division does not)
        fa, fb = f"np.float64({a[0]})", f"np.float64({a[1]})"
        return f"{t}({fa} - {math_call('trunc', f'{fa} / {fb}')} * {fb})"
    if np.dtype(o).kind == "f":
        return _float_mod(a[0], a[1], o)
    return f"{t}({a[0]} % {a[1]})"  # Python/numpy mod: the sign of the divisor


def _float_mod(x, y, o):
    """numpy's float remainder (``np.mod``, as onnx.reference's Mod with fmod=0): the sign of
    the divisor. C fmod, then a nonzero result of the other sign than ``y`` moves by ``y``
    (``-1 % inf == inf``), and a zero one takes ``y``'s sign; NaN from fmod (``y == 0``,
    ``x`` infinite, a NaN operand) stays NaN."""
    m = math_call("fmod", x, y)
    zero = f"({lit(0.0, o)} if {y} > 0 else {lit(-0.0, o)})"
    return (f"(({m} + {y}) if ({m} != 0 and (({y} < 0) != ({m} < 0))) "
            f"else ({m} if {m} != 0 else {zero}))")


@expr("BitShift", dtypes=INTS)
def _bitshift(n, a, d, o):
    # opset 28's rule: a shift by a negative amount or by the width or more gives what the sign
    # extension alone gives (-1 for a right shift of a negative signed value, else 0); in LLVM
    # such a shift is poison, so it is never the value selected. Signed right shifts are
    # arithmetic; a left shift's bits past the type's width are cut by the conversion.
    t, x, y = tname(o), a[0], a[1]
    bits = 8 * np.dtype(o).itemsize
    ok = f"({y} < {bits})" if np.dtype(o).kind == "u" else f"({y} >= 0 and {y} < {bits})"
    if n.attrs.get("direction", "LEFT") == "LEFT":
        return f"({t}({x} << {y}) if {ok} else {t}(0))"
    fill = f"{t}(0)" if np.dtype(o).kind == "u" else f"({t}(-1) if {x} < 0 else {t}(0))"
    return f"({t}({x} >> {y}) if {ok} else {fill})"


for _op, _sym in (("BitwiseAnd", "&"), ("BitwiseOr", "|"), ("BitwiseXor", "^")):
    expr(_op, dtypes=INTS)(lambda n, a, d, o, _sym=_sym: f"{tname(o)}({a[0]} {_sym} {a[1]})")
expr("BitwiseNot", dtypes=INTS)(lambda n, a, d, o: f"{tname(o)}(~{a[0]})")
expr("Sign", dtypes=FLOATS + INTS)(lambda n, a, d, o: f"{tname(o)}({math_call('sign', a[0])})")


# --- more activations ------------------------------------------------------------------------
@expr("Celu")
def _celu(n, a, d, o):
    al = float(n.attrs.get("alpha", 1.0))
    e = _exp(n, [f"({a[0]} * {lit(1 / al, o)})"], d, o)
    return f"({a[0]} if {a[0]} > {lit(0, o)} else {lit(al, o)} * ({e} - {lit(1, o)}))"


@expr("Mish")
def _mish(n, a, d, o):
    # tanh(softplus(x)) = w / (w + 2), w = e^x (e^x + 2); e^x clamped (the ratio is 1 by then)
    x = a[0]
    e = _exp(n, [_min(x, lit(20, o))], d, o)  # no builtin min: the CUDA target lacks it
    return f"({x} * (({e}) * (({e}) + {lit(2, o)})) / (({e}) * (({e}) + {lit(2, o)}) + {lit(2, o)}))"


@expr("Swish")
def _swish(n, a, d, o):
    al = float(n.attrs.get("alpha", 1.0))
    arg = a[0] if al == 1.0 else f"({lit(al, o)} * {a[0]})"
    return f"({a[0]} * {_sigmoid(n, [arg], d, o)})"


@expr("SwiGLU")
def _swiglu(n, a, d, o):
    """Swish_alpha(A) * B: the gated activation of LLM feed-forward blocks (A, B same shape)."""
    return f"({_swish(n, a[:1], d, o)} * {a[1]})"


@expr("Shrink", dtypes=FLOATS + INTS)
def _shrink(n, a, d, o):
    x = a[0]
    lam, bias = float(n.attrs.get("lambd", 0.5)), float(n.attrs.get("bias", 0.0))
    if np.dtype(o).kind == "f":
        lo, hi, b = lit(-lam, o), lit(lam, o), lit(bias, o)
        return f"({x} + {b} if {x} < {lo} else ({x} - {b} if {x} > {hi} else {lit(0, o)}))"
    # integers: compared and shifted in float64 (lambd and bias are float attributes)
    t = tname(o)
    return (f"({t}({x} + {bias!r}) if {x} < {-lam!r} else "
            f"({t}({x} - {bias!r}) if {x} > {lam!r} else {lit(0, o)}))")


@expr("IsInf", dtypes=FLOATS)
def _isinf(n, a, d, o):
    pos, neg = n.attrs.get("detect_positive", 1), n.attrs.get("detect_negative", 1)
    x = a[0]
    inf = lit(np.inf, d[0])
    if pos and neg:
        return f"(abs({x}) == {inf})"
    if pos:
        return f"({x} == {inf})"
    if neg:
        return f"({x} == -{inf})"
    return "False"


@expr("CastLike", dtypes=NUMERIC + (BOOL,))
def _castlike(n, a, d, o):
    return _cast(n, a[:1], d[:1], o)


def supports_elementwise(n: Node) -> bool:
    """True when ``n`` renders through the table for its dtypes."""
    if n.domain != "" or n.op_type not in EXPR or len(n.outputs) != 1:
        return False
    if n.op_type in ("Cast", "CastLike"):
        dts = [n.inputs[0].dtype, n.outputs[0].dtype]
        if any(np.dtype(t) in LOWP for t in dts):
            return cast_supported(n, NUMERIC + (BOOL,) + HALF)
        return all(np.dtype(t) in NUMERIC + (BOOL,) + HALF for t in dts)
    allowed = DTYPES[n.op_type]
    if F32 in allowed:  # 16-bit floats: loaded to float32, computed, rounded back
        allowed = allowed + HALF
    if n.op_type == "Where":
        ins = [v for v in n.inputs[1:] if v is not None]
    elif n.op_type in ("Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "IsNaN",
                       "IsInf"):
        ins = [v for v in n.inputs if v is not None]
    else:
        ins = [v for v in n.inputs if v is not None] + list(n.outputs)
    if n.op_type in ("Expand",):
        ins = [n.inputs[0]]
    if n.op_type == "Clip" and n.since_version >= 11 and any(
            v is not None and v.dtype != n.inputs[0].dtype for v in n.inputs[1:]):
        return False
    if n.op_type == "Pow" and np.dtype(n.inputs[0].dtype) not in FLOATS + HALF + (
            np.dtype(np.int32), np.dtype(np.int64)):
        return False  # (the exponent may be any numeric type)
    if n.op_type in ("BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "Div", "Mod") and (
            n.inputs[0].dtype != n.inputs[1].dtype):
        return False
    return all(np.dtype(v.dtype) in allowed for v in ins)


# --- fused kernel source ---------------------------------------------------------------------

@dataclass
class Operand:
    """One input of a fused kernel: its dtype and, per collapsed dim, broadcast (True) or not."""

    dtype: np.dtype
    bcast: tuple[bool, ...]


def collapse(out_shape, in_shapes, hints) -> tuple[list[int], list[tuple[bool, ...]]]:
    """Collapse the iteration space: merge neighbouring dims with equal broadcast patterns.

    ``in_shapes`` are right-aligned to ``out_shape``; ``hints[j][k]`` is True when input j is known
    to be broadcast in dim k even if its size equals the output's (both 1): it keeps the pattern
    stable across input shapes so the kernel text (and its compiled code) is reused.
    Returns the collapsed extents and, per input, the collapsed broadcast flags.
    """
    rank = len(out_shape)
    flags = []
    for j, s in enumerate(in_shapes):
        s = (1,) * (rank - len(s)) + tuple(s)
        f = []
        for k in range(rank):
            # (the order of the tests keeps the recorded decisions shape-independent where it can:
            # a hinted broadcast dim is decided by ``s[k] == 1`` alone, see codegen/symbolic.py)
            if hints[j][k] and s[k] == 1:
                f.append(True)
            elif s[k] == out_shape[k]:
                f.append(False)
            elif s[k] == 1:
                f.append(True)
            else:
                raise ValueError(f"cannot broadcast {in_shapes[j]} to {out_shape}")
        flags.append(f)
    extents: list[int] = []
    cflags: list[list[bool]] = [[] for _ in in_shapes]
    prev = None
    for k in range(rank):
        col = tuple(f[k] for f in flags)
        if prev is not None and col == prev:
            extents[-1] *= out_shape[k]
        else:
            extents.append(out_shape[k])
            for j in range(len(in_shapes)):
                cflags[j].append(col[j])
        prev = col
    if not extents:
        extents = [1]
        cflags = [[False] for _ in in_shapes]
    return extents, [tuple(f) for f in cflags]


class LoopStyle:
    """How the shared emitter renders one backend's fused kernel (the CPU's: an ``@njit`` loop nest).

    A style supplies the expression table, the decorator and signature, the index prologue
    (``open_level`` per collapsed dim), and the load and store expressions. The emitter itself
    (:func:`kernel_source`) places loads at the outermost level where their index is complete
    and writes one SSA temporary per node, the same for every style.
    """

    table = EXPR
    #: how its kernels spell the math functions the templates call (see :func:`math_call`)
    math = CPU_MATH
    #: statement placed first in the innermost loop body (None: nothing): the CPU's asks
    #: LLVM for 512-bit vectors where the CPU has them (``mathfn.wide_vectors``)
    widen: str | None = "_m.wide_vectors()"

    def head(self, name: str, outs: list[str], ins: list[str], rank: int, parallel: bool) -> list[str]:
        flags = "cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'}"
        if parallel:
            flags += ", parallel=True"
        return [f"@njit({flags})", f"def {name}({', '.join(outs + ins)}):",
                f"    {', '.join(f'n{k}' for k in range(rank))}{',' if rank == 1 else ''} = y0.shape"]

    def open_level(self, k: int, parallel: bool) -> str | None:
        """The line opening loop level ``k`` (indents what follows), or None for no loop."""
        rng = "prange" if (parallel and k == 0) else "range"
        return f"for i{k} in {rng}(n{k}):"

    def load(self, x: str, op: Operand, rank: int) -> str:
        return f"{x}[{', '.join('0' if op.bcast[k] else f'i{k}' for k in range(rank))}]"

    def store(self, y: str, rank: int) -> str:
        return f"{y}[{', '.join(f'i{k}' for k in range(rank))}]"


CPU_STYLE = LoopStyle()


def kernel_source(name: str, ops: list[tuple[Node, list[int], int]], operands: list[Operand],
                  out_temps: list[int], rank: int, parallel: bool, temp_dtypes: list[np.dtype],
                  style: LoopStyle = CPU_STYLE, inplace: dict[int, int] | None = None) -> str:
    """Render a fused elementwise kernel.

    ``ops``: (node, operand refs, result temp) in order; a ref ``r >= 0`` is temp ``r``, ``-1-j``
    is kernel input ``j``. ``out_temps[i]`` is stored to output ``y{i}`` -- or, for
    ``inplace[i] = j``, to input ``x{j}`` (the caller passes the same buffer as ``y{i}``, a
    non-broadcast operand written over in place). Storing through the input's own name lets
    LLVM see one base pointer (a same-iteration dependence) and vectorize; through ``y{i}``
    its runtime overlap check fails for equal pointers and the scalar loop runs (15x slower
    on an erf GELU).
    """
    inplace = inplace or {}
    ins = [f"x{j}" for j in range(len(operands))]
    outs = [f"y{i}" for i in range(len(out_temps))]
    lines = style.head(name, outs, ins, rank, parallel)
    # the loop level at which each input's index is complete (-1: before all loops)
    level = []
    for op in operands:
        full = [k for k in range(rank) if not op.bcast[k]]
        level.append(max(full) if full else -1)

    def load(j):
        x = style.load(ins[j], operands[j], rank)
        if operands[j].dtype in HALF:
            x = math_call(f"{_half_name(operands[j].dtype)}_to_f32", x)
        elif operands[j].dtype in LOWP:
            x = math_call(f"{LOWP[operands[j].dtype]}_to_f32", x)
        return f"a{j} = {x}"

    body: list[str] = []
    math_names = _MATH.set(style.math)
    try:
        ind = _loops_and_ops(body, style, ins, operands, ops, rank, parallel, temp_dtypes,
                             level, load)
        for i, t in enumerate(out_temps):
            target = ins[inplace[i]] if i in inplace else outs[i]
            val = f"t{t}"
            if temp_dtypes[t] in HALF:
                val = math_call(f"f32_to_{_half_name(temp_dtypes[t])}", val)
            elif temp_dtypes[t] in LOWP:
                val = math_call(f"f32_to_{LOWP[temp_dtypes[t]]}", val)
            body.append(f"{ind}{style.store(target, rank)} = {val}")
    finally:
        _MATH.reset(math_names)
    return "\n".join(lines + body) + "\n"


def _loops_and_ops(body, style, ins, operands, ops, rank, parallel, temp_dtypes, level, load):
    """The loop nest, hoisted loads and one SSA temporary per node of :func:`kernel_source`;
    16-bit float temporaries are float32 values rounded to 16 bits (``round_*``)."""
    ind = "    "
    for j in range(len(operands)):
        if level[j] == -1:
            body.append(ind + load(j))
    for k in range(rank):
        opener = style.open_level(k, parallel)
        if opener is not None:
            body.append(ind + opener)
            ind += "    "
        for j in range(len(operands)):
            if level[j] == k:
                body.append(ind + load(j))
    if style.widen:
        body.append(ind + style.widen)
    for node, refs, t in ops:
        args = [None if r is None else (f"t{r}" if r >= 0 else f"a{-1 - r}") for r in refs]
        dts = [None if r is None else compute_dtype(
            temp_dtypes[r] if r >= 0 else operands[-1 - r].dtype) for r in refs]
        e = style.table[node.op_type](node, args, dts, compute_dtype(temp_dtypes[t]))
        if temp_dtypes[t] in HALF:
            e = math_call(f"round_{_half_name(temp_dtypes[t])}", e)
        body.append(f"{ind}t{t} = {e}")
    return ind
