"""CPU lowerings: the remaining numeric ops (Det, NegativeLogLikelihoodLoss,
SoftmaxCrossEntropyLoss, BitCast, TensorScatter, DeformConv).

Kernels: ``jitort.kernels.cpu.misc`` (alias ``_misc`` in generated drivers). Index inputs
(loss targets, TensorScatter's write_indices) are validated by the kernels (IndexError, which
the runtime reports as invalid input), never read out of range.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ...ir import Node
from ..calls import KernelModule, Scalar, View, Zeros
from ..registry import Unlowerable, lowering
from .common import _PLAIN, _axis, _conv_geometry, _is_float, _prod

if TYPE_CHECKING:
    from ..emitter import Emitter

_misc = KernelModule("misc")

_I = (np.dtype(np.int32), np.dtype(np.int64))


def _dtn(v) -> str:
    """``v``'s numpy dtype name."""
    return np.dtype(v.dtype).name


@lowering("Det", supports=lambda n: _is_float(n.inputs[0], n.outputs[0]))
def lower_det(em: Emitter, n: Node) -> None:
    x, y = n.inputs[0], n.outputs[0]
    xs = em.shape(x)
    b, m = _prod(xs[:-2]), xs[-1]
    yv = em.write(y)
    em.call(_misc.det, em.shaped(x, (b, m, m)), yv.reshape(em.sizes((b,))))


def _loss_ok(n: Node) -> bool:
    ins = n.inputs
    return (_is_float(ins[0], *[o for o in n.outputs if o is not None])
            and ins[1] is not None and ins[1].dtype is not None and np.dtype(ins[1].dtype) in _I
            and (len(ins) < 3 or ins[2] is None or _is_float(ins[2])))


_RED = {"none": 0, "sum": 1, "mean": 2}


def _red(n: Node) -> int:
    r = n.attrs.get("reduction", "mean")
    r = r.decode() if isinstance(r, bytes) else r
    if r not in _RED:
        raise Unlowerable(n, f"reduction {r!r}")
    return _RED[r]


def _loss_common(em, n: Node, x3: View, xs, lse: View | None = None):
    """The NLL call over a (N, C, D) view ``x3`` of log-probabilities (of scores when
    ``lse``, the (N, D) log-sum-exp, is given)."""
    t, y = n.inputs[1], n.outputs[0]
    w = n.inputs[2] if len(n.inputs) > 2 else None
    nn, c, d = xs[0], xs[1], _prod(xs[2:])
    ts = em.shape(t)
    if tuple(ts) != (xs[0],) + tuple(xs[2:]):
        raise Unlowerable(n, f"target shape {ts} does not match input {xs}")
    if w is not None and tuple(em.shape(w)) != (c,):
        raise Unlowerable(n, "weight must have shape (C,)")
    red = _red(n)
    ign = n.attrs.get("ignore_index")
    wv = em.read(w) if w is not None else Zeros(_dtn(y), (1,))
    yv = em.write(y)
    ys = (nn, d) if red == 0 else (1, 1)
    lv = lse if lse is not None else Zeros("float64", (1, 1))
    em.call(_misc.nll, x3, em.shaped(t, (nn, d)), wv, em.size(int(w is not None)),
            em.size(int(ign) if ign is not None else 0), em.size(int(ign is not None)),
            em.size(red), lv, em.size(int(lse is not None)), yv.reshape(em.sizes(ys)))


@lowering("NegativeLogLikelihoodLoss", supports=_loss_ok)
def lower_nll(em: Emitter, n: Node) -> None:
    x = n.inputs[0]
    xs = em.shape(x)
    if len(xs) < 2:
        raise Unlowerable(n, "input must be at least 2-D")
    _loss_common(em, n, em.shaped(x, (xs[0], xs[1], _prod(xs[2:]))), xs)


@lowering("SoftmaxCrossEntropyLoss", supports=_loss_ok)
def lower_sce(em: Emitter, n: Node) -> None:
    """log-sum-exp per sample (float64), then the loss reads x - lse at the targets only; the
    log_prob output, when wanted, is x - lse everywhere."""
    x = n.inputs[0]
    xs = em.shape(x)
    if len(xs) < 2:
        raise Unlowerable(n, "scores must be at least 2-D")
    x3 = (xs[0], xs[1], _prod(xs[2:]))
    xv = em.shaped(x, x3)
    lse = em.temp(x3[0] * x3[2], np.float64).reshape(em.sizes((x3[0], x3[2])))
    em.call(_misc.log_sum_exp1, xv, lse)
    lpo = n.outputs[1] if len(n.outputs) > 1 and n.outputs[1] is not None else None
    if lpo is not None:
        lp = em.write(lpo).reshape(em.sizes(x3))
        em.call(_misc.sub_lse, xv, lse, lp)
    _loss_common(em, n, xv, xs, lse)


def _bitcast_ok(n: Node) -> bool:
    x, y = n.inputs[0], n.outputs[0]
    return (x.dtype is not None and y.dtype is not None and np.dtype(x.dtype) in _PLAIN
            and np.dtype(y.dtype) in _PLAIN
            and np.dtype(x.dtype).itemsize == np.dtype(y.dtype).itemsize)


@lowering("BitCast", supports=_bitcast_ok)
def lower_bitcast(em: Emitter, n: Node) -> None:
    x, y = n.inputs[0], n.outputs[0]
    size = _prod(em.shape(x))
    # same item size: reinterpret the input's bytes as the output type and copy
    src = ("@njit(cache=True, error_model='numpy')\n"
           "def __KNAME__(y, x):\n"
           f"    xv = x.view(np.{_dtn(y)})\n"
           "    for i in range(y.shape[0]):\n"
           "        y[i] = xv[i]\n")
    k = em.generated(f"k_bitcast_{_dtn(x)}_{_dtn(y)}", src)
    yv = em.write(y)
    em.call(k, yv.reshape(em.sizes((size,))), em.shaped(x, (size,)))


def _ts_ok(n: Node) -> bool:
    ins = n.inputs
    return (all(v.dtype is not None and np.dtype(v.dtype) in _PLAIN for v in ins[:2])
            and (len(ins) < 3 or ins[2] is None or np.dtype(ins[2].dtype) == np.int64))


@lowering("TensorScatter", supports=_ts_ok)
def lower_tensor_scatter(em: Emitter, n: Node) -> None:
    past, upd, y = n.inputs[0], n.inputs[1], n.outputs[0]
    idx = n.inputs[2] if len(n.inputs) > 2 else None
    ps, us = em.shape(past), em.shape(upd)
    r = len(ps)
    if r < 2 or len(us) != r:
        raise Unlowerable(n, "past_cache and update must have the same rank >= 2")
    axis = _axis(int(n.attrs.get("axis", -2)), r)
    if axis < 1 or axis >= r:
        raise Unlowerable(n, f"axis {axis} (must not be the batch axis)")
    mode = n.attrs.get("mode", "linear")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in ("linear", "circular"):
        raise Unlowerable(n, f"mode {mode!r}")
    for k in range(r):
        if k != axis and us[k] != ps[k]:
            raise Unlowerable(n, f"update dim {k} ({us[k]}) differs from the cache's ({ps[k]})")
    if us[axis] > ps[axis]:
        raise Unlowerable(n, "update longer than the cache")
    if idx is not None and tuple(em.shape(idx)) != (ps[0],):
        raise Unlowerable(n, "write_indices must have shape (batch,)")
    b, p, i = ps[0], _prod(ps[1:axis]), _prod(ps[axis + 1:])
    iv = em.read(idx) if idx is not None else Zeros("int64", (1,))
    yv = em.write(y)
    em.call(_misc.tensor_scatter, em.shaped(past, (b, p, ps[axis], i)),
            em.shaped(upd, (b, p, us[axis], i)), iv, em.size(int(idx is not None)),
            em.size(int(mode == "circular")), yv.reshape(em.sizes((b, p, ps[axis], i))))


def _deform_ok(n: Node) -> bool:
    return _is_float(*[v for v in n.inputs if v is not None], n.outputs[0])


@lowering("DeformConv", supports=_deform_ok)
def lower_deform_conv(em: Emitter, n: Node) -> None:
    x, w, off, y = n.inputs[0], n.inputs[1], n.inputs[2], n.outputs[0]
    bias = n.inputs[3] if len(n.inputs) > 3 else None
    mask = n.inputs[4] if len(n.inputs) > 4 else None
    if len(em.shape(x)) != 4:  # 1-D too: its offsets would need a zero dy per tap
        raise Unlowerable(n, f"{len(em.shape(x)) - 2}-D DeformConv")
    xs, ws, ys, strides, dil, pads, grp = _conv_geometry(em, n)
    offs = em.shape(off)
    og = int(n.attrs.get("offset_group", 1))
    ms = em.shape(mask) if mask is not None else None
    kh, kw = ws[2], ws[3]
    c, oc = xs[1], ws[0]
    # validate everything the kernel indexes (Numba does not bounds-check)
    if og <= 0 or grp <= 0 or c % og or c % grp or oc % grp or ws[1] * grp != c:
        raise Unlowerable(n, "channels do not split into group / offset_group")
    if tuple(offs) != (xs[0], og * 2 * kh * kw, ys[2], ys[3]):
        raise Unlowerable(n, f"offset shape {offs}")
    if ms is not None and tuple(ms) != (xs[0], og * kh * kw, ys[2], ys[3]):
        raise Unlowerable(n, f"mask shape {ms}")
    if bias is not None and tuple(em.shape(bias)) != (oc,):
        raise Unlowerable(n, "bias must have shape (OC,)")
    dt = _dtn(x)
    mv = em.read(mask) if mask is not None else Zeros(dt, (1, 1, 1, 1))
    bv = em.read(bias) if bias is not None else Zeros(dt, (1,))
    yv = em.write(y)
    args = em.sizes((kh, kw, strides[0], strides[1], pads[0], pads[1], dil[0], dil[1], og, grp))
    em.call(_misc.deform_conv2d, em.read(x), em.read(w), em.read(off), mv,
            em.size(int(mask is not None)), bv, em.size(int(bias is not None)), yv, *args)


@lowering("CausalConvWithState",
          supports=lambda n: _is_float(*[v for v in n.inputs if v is not None],
                                       *[o for o in n.outputs if o is not None]))
def lower_causal_conv(em: Emitter, n: Node) -> None:
    x, w = n.inputs[0], n.inputs[1]
    bias = n.inputs[2] if len(n.inputs) > 2 else None
    past = n.inputs[3] if len(n.inputs) > 3 else None
    act = n.attrs.get("activation", "none")
    act = act.decode() if isinstance(act, bytes) else act
    if act not in ("none", "silu", "swish"):
        raise Unlowerable(n, f"activation {act!r}")
    xs, ws = em.shape(x), em.shape(w)
    st_shape = (xs[0], xs[1], ws[2] - 1)
    dt = _dtn(x)
    yv = em.write(n.outputs[0])
    st = n.outputs[1] if len(n.outputs) > 1 else None
    sv = em.write(st) if st is not None else \
        em.temp(_prod(st_shape), x.dtype).reshape(em.sizes(st_shape))
    bv = em.read(bias) if bias is not None else Zeros(dt, (1,))
    pv = em.read(past) if past is not None else Zeros(dt, (1, 1, 1))
    em.call(_misc.causal_conv, em.read(x), em.read(w), bv, em.size(int(bias is not None)),
            pv, em.size(int(past is not None)), em.size(int(act != "none")), yv, sv)


@lowering("LinearAttention",
          supports=lambda n: _is_float(*[v for v in n.inputs if v is not None],
                                       *[o for o in n.outputs if o is not None])
          and len({np.dtype(v.dtype) for v in n.inputs if v is not None}) == 1)
def lower_linear_attention(em: Emitter, n: Node) -> None:
    """The recurrence per (batch, kv head) with the state in the present_state output (or
    scratch); query heads of a group read their kv head's state (GQA)."""
    q, k, v = n.inputs[:3]
    opt = list(n.inputs[3:]) + [None] * (6 - len(n.inputs))
    past, dec, bet = opt[0], opt[1], opt[2]
    rule = n.attrs.get("update_rule", "gated_delta")
    rule = rule.decode() if isinstance(rule, bytes) else rule
    if rule not in ("linear", "gated", "delta", "gated_delta"):
        raise Unlowerable(n, f"update_rule {rule!r}")
    gating, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    if gating != (dec is not None) or delta != (bet is not None):
        raise Unlowerable(n, f"update_rule {rule!r} with decay/beta present: "
                             f"{dec is not None}/{bet is not None}")
    hq, hkv = int(n.attrs["q_num_heads"]), int(n.attrs["kv_num_heads"])
    qs, vs = em.shape(q), em.shape(v)
    b, t = qs[0], qs[1]
    dk, dv = qs[2] // hq, vs[2] // hkv
    scale = float(n.attrs.get("scale", 0.0) or 0.0)  # 0: the kernel takes 1/sqrt(d_k)
    dt = _dtn(q)
    state_shape = (b, hkv, dk, dv)
    yv = em.write(n.outputs[0])
    so = n.outputs[1] if len(n.outputs) > 1 else None
    sv = em.write(so) if so is not None else \
        em.temp(_prod(state_shape), q.dtype).reshape(em.sizes(state_shape))
    pv = em.read(past) if past is not None else Zeros(dt, (1, 1, 1, 1))
    if dec is not None:
        ds = em.shape(dec)
        dg = ds[2] // hkv
        gv = em.shaped(dec, (b, t, hkv, dg))
    else:
        gv = Zeros(dt, (1, 1, 1, 1))
    bv = em.shaped(bet, em.shape(bet)) if bet is not None else Zeros(dt, (1, 1, 1))
    em.call(_misc.linear_attention, em.shaped(q, (b, t, hq, dk)), em.shaped(k, (b, t, hkv, dk)),
            em.shaped(v, (b, t, hkv, dv)), pv, em.size(int(past is not None)), gv,
            em.size(int(dec is not None)), bv, em.size(int(bet is not None)),
            Scalar("float64", scale), yv.reshape(em.sizes((b, t, hq, dv))), sv)
