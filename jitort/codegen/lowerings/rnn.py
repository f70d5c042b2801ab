"""CPU lowerings: LSTM, GRU and RNN (input projection as one GEMM over all steps, then the recurrence).

Kernels: ``jitort.kernels.cpu.rnn`` (alias ``_rnn`` in generated drivers). One kernel call per
node: ``lstm`` / ``gru`` / ``rnn``. Constant weights are prepared once at compile time: W and R
packed into panels for the kernels' micro-kernel (``pack_weights`` / ``pack_recurrence``) and
``R^T`` per direction, (nd, H, G*H), for the few-row step loop; weights that are not constants
take BLAS, with R transposed by ``transpose_r`` in the driver. Every attribute of opsets 1-22 is honoured: direction, layout (14), clip, input_forget,
linear_before_reset, activations with activation_alpha / activation_beta (consumed in order by
the activations that take them; a missing one takes onnxruntime's default: LeakyRelu 0.01,
HardSigmoid 0.2 / 0.5, Elu 1.0, the others 0), any subset of the outputs. opset 1's
``output_sequence`` only says whether Y is wanted, which the graph already says.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ...ir import Node
from ..calls import KernelModule, Scalar, Zeros
from ..registry import Unlowerable, lowering
from .common import _is_float

if TYPE_CHECKING:
    from ..emitter import Emitter

_rnn = KernelModule("rnn")

_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
_DEFAULT_ACTS = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"], "RNN": ["Tanh"]}
#: activation name (lower case) -> kernel code (kernels/cpu/rnn.py ACT_*)
_ACT_CODES = {"sigmoid": 0, "tanh": 1, "relu": 2, "leakyrelu": 3, "thresholdedrelu": 4,
              "scaledtanh": 5, "hardsigmoid": 6, "elu": 7, "softsign": 8, "softplus": 9,
              "affine": 10}
_USES_ALPHA = {"leakyrelu", "thresholdedrelu", "scaledtanh", "hardsigmoid", "elu", "affine"}
_USES_BETA = {"scaledtanh", "hardsigmoid", "affine"}
#: defaults where activation_alpha / activation_beta run out (onnxruntime's, measured: its
#: ThresholdedRelu, ScaledTanh and Affine take 0)
_ACT_DEFAULTS = {"leakyrelu": (0.01, 0.0), "hardsigmoid": (0.2, 0.5), "elu": (1.0, 0.0)}

# input indices
_B, _SEQ, _H0, _C0, _P = 3, 4, 5, 6, 7


def _name(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _directions(n: Node) -> int:
    return 2 if _name(n.attrs.get("direction", "forward")) == "bidirectional" else 1


def _activations(n: Node):
    """(codes, alphas, betas) per activation slot, ``len == G' * directions``, or None."""
    nd = _directions(n)
    per = len(_DEFAULT_ACTS[n.op_type])
    names = [_name(a).lower() for a in n.attrs.get("activations", []) or []]
    if not names:
        names = [a.lower() for a in _DEFAULT_ACTS[n.op_type]] * nd
    elif len(names) == per and nd == 2:
        names = names * 2
    if len(names) != per * nd or any(a not in _ACT_CODES for a in names):
        return None
    alphas = list(n.attrs.get("activation_alpha", []) or [])
    betas = list(n.attrs.get("activation_beta", []) or [])
    codes, al, be = [], [], []
    for a in names:
        da, db = _ACT_DEFAULTS.get(a, (0.0, 0.0))
        if a in _USES_ALPHA and alphas:
            da = float(alphas.pop(0))
        if a in _USES_BETA and betas:
            db = float(betas.pop(0))
        codes.append(_ACT_CODES[a])
        al.append(da)
        be.append(db)
    return codes, al, be


def _wanted(v) -> bool:
    """An output the graph names (an omitted one is an untyped placeholder value)."""
    return v is not None and v.dtype is not None and not v.name.startswith("__unused_")


def _rnn_ok(n: Node) -> bool:
    x = n.inputs[0]
    if not _is_float(x, *[o for o in n.outputs if _wanted(o)]):
        return False
    dt = np.dtype(x.dtype)
    for i, v in enumerate(n.inputs[1:], 1):
        if v is None:
            continue
        if i == _SEQ:
            if v.dtype is None or np.dtype(v.dtype).kind not in "iu":
                return False
        elif v.dtype is None or np.dtype(v.dtype) != dt:
            return False
    if any(np.dtype(o.dtype) != dt for o in n.outputs if _wanted(o)):
        return False
    return _activations(n) is not None and _name(n.attrs.get("direction", "forward")) in (
        "forward", "reverse", "bidirectional")



def _weights(em: Emitter, w, r, nd: int, g: int, hd: int, nin: int, dt: np.dtype):
    """W as read, W and R packed at compile time when constant (else empty placeholders), and
    R transposed to (nd, hd, g*hd): a constant, or transposed into scratch by a first call."""
    tn = dt.name
    from jitort.kernels.cpu.rnn import pack_recurrence, pack_weights
    wv = em.shaped(w, (nd, g * hd, nin))
    wpv = (em.constant(("rnn_wpack", id(w.const)), lambda: pack_weights(w.const)) if w.is_const
           else Zeros(tn, (0, 0, 0)))
    if not r.is_const:
        rtv = em.temp(nd * hd * g * hd, dt).reshape(em.sizes((nd, hd, g * hd)))
        em.call(_rnn.transpose_r, em.shaped(r, (nd, g * hd, hd)), rtv)
        return wv, wpv, Zeros(tn, (0, 0, 0, 0)), rtv
    rpv = em.constant(("rnn_rpack", id(r.const)), lambda: pack_recurrence(r.const))
    rt = em.constant(("rnn_rt", id(r.const)), lambda: np.ascontiguousarray(r.const.transpose(0, 2, 1)))
    return wv, wpv, rpv, rt.reshape(em.sizes((nd, hd, g * hd)))

@lowering("LSTM", "GRU", "RNN", supports=_rnn_ok)
def lower_rnn(em: Emitter, n: Node) -> None:
    from jitort.kernels.cpu.rnn import scratch_elems
    op = n.op_type
    g = _GATES[op]
    x, w, r = n.inputs[:3]
    xs, rs = em.shape(x), em.shape(r)
    nd = _directions(n)
    hd = rs[2]
    layout = int(n.attrs.get("layout", 0)) if n.since_version >= 14 else 0
    seq, batch = (xs[1], xs[0]) if layout else (xs[0], xs[1])
    dt = np.dtype(x.dtype)
    tn = dt.name
    codes, alphas, betas = _activations(n)
    reverse = _name(n.attrs.get("direction", "forward")) == "reverse"
    clip = n.attrs.get("clip")
    clip = float("inf") if clip is None else float(clip)
    if clip < 0:
        raise Unlowerable(n, f"negative clip {clip}")  # onnxruntime rejects it too

    xv = em.shaped(x, xs)
    wv, wpv, rpv, rtv = _weights(em, w, r, nd, g, hd, xs[2], dt)

    def opt(i, shape, zero):
        v = n.input(i)
        if v is None:
            return zero
        return em.shaped(v, shape)

    yh_shape = (batch, nd, hd) if layout else (nd, batch, hd)
    bv = opt(_B, (nd, 2 * g * hd), Zeros(tn, (1, 0)))
    sv = opt(_SEQ, (batch,), Zeros("int32", (0,)))
    h0 = opt(_H0, yh_shape, Zeros(tn, (0, 0, 0)))
    ws = em.temp(scratch_elems(seq, batch, hd, g, nd), dt)
    if op == "LSTM":
        c0 = opt(_C0, yh_shape, Zeros(tn, (0, 0, 0)))
        pv = opt(_P, (nd, 3 * hd), Zeros(tn, (1, 0)))

    outs = [o if _wanted(o) else None for o in n.outputs] + [None] * (3 - len(n.outputs))
    y_shape = (batch, seq, nd, hd) if layout else (seq, nd, batch, hd)

    def out(v, shape):
        if v is None:
            return Zeros(tn, (0,) * len(shape))
        return em.write(v).reshape(em.sizes(shape))

    yv = out(outs[0], y_shape)
    yhv = out(outs[1], yh_shape)
    # padded to 6 slots: one tuple type for every op and direction count (fewer specializations)
    pad = 6 - len(codes)
    codes, alphas, betas = codes + [0] * pad, alphas + [0.0] * pad, betas + [0.0] * pad
    acts = tuple(Scalar("int64", c) for c in codes)
    al = tuple(Scalar("float64", a) for a in alphas)
    be = tuple(Scalar("float64", b) for b in betas)
    # flags travel in the d array: a literal would compile one specialization per value
    tail = (em.size(layout), em.size(int(reverse)), acts, al, be, Scalar("float64", clip))
    if op == "LSTM":
        ycv = out(outs[2], yh_shape)
        cif = em.size(int(bool(n.attrs.get("input_forget", 0))))
        em.call(_rnn.lstm, xv, wv, wpv, rtv, rpv, bv, pv, h0, c0, sv, yv, yhv, ycv, ws, *tail, cif)
    elif op == "GRU":
        lbr = em.size(int(bool(n.attrs.get("linear_before_reset", 0))))
        em.call(_rnn.gru, xv, wv, wpv, rtv, rpv, bv, h0, sv, yv, yhv, ws, *tail, lbr)
    else:
        em.call(_rnn.rnn, xv, wv, wpv, rtv, rpv, bv, h0, sv, yv, yhv, ws, *tail)
