"""CPU lowerings: convolution: Conv and FusedConv (direct, im2col+GEMM, Winograd)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ... import tuning
from ...ir import Node
from ..calls import KernelModule, Scalar, View, Zeros
from ..registry import Unlowerable, lowering
from ..symbolic import concrete
from .common import ACT_CODES, _conv_geometry, _conv_pads, _is_float, act_args

if TYPE_CHECKING:
    from ..emitter import Emitter

_conv = KernelModule("conv")
_wino = KernelModule("winograd")
_cnhwc = KernelModule("conv_nhwc")
_convi = KernelModule("conv_implicit")
_convc = KernelModule("conv_cvec")
_convg = KernelModule("conv_group")


def _epi(act) -> tuple[int, Scalar, Scalar]:
    """The fused activation's code, alpha and beta as the kernels take them (float64)."""
    code, alpha, beta = act
    return code, Scalar("float64", float(alpha)), Scalar("float64", float(beta))


def _no_bias(y, count) -> Zeros:
    """The zero bias array of ``count`` elements (in the output's type) that a conv without
    bias passes (``int`` pins a symbolic size, as its text did)."""
    return Zeros(np.dtype(y.dtype).name, (int(count),))


def _conv_ok(n: Node) -> bool:
    return _is_float(n.inputs[0], n.inputs[1], n.outputs[0]) and n.inputs[1].dtype == n.inputs[0].dtype \
        and (n.input(2) is None or n.inputs[2].dtype == n.inputs[0].dtype)


def _use_winograd(em: Emitter, n: Node, xs4, ws4, ys4, strides, dil, group) -> int:
    """Winograd's output tile (2 or 4) for a 3x3 stride-1 convolution with constant weights on
    a plane where it wins (group 1: ``jitort.tuning``'s ``conv.winograd``, calibrated on this
    machine, else ``kernels.cpu.winograd.winograd_wins``; ``winograd_tile``; grouped: per
    group, and ``winograd_grouped_wins``, the rule ``python scripts/sweeps/sweep_winograd_grouped.py``
    measures), else 0.
    Decided once per node from the first shape, not guarded: the generated text must not
    change with the shapes (the kernel is correct for every shape, only its speed depends on
    them)."""
    key = ("winograd", id(n))
    if key not in em.memo:
        from jitort.kernels.cpu.winograd import (winograd_grouped_wins, winograd_tile,
                                                  winograd_wins)
        w = n.inputs[1]
        c, m = concrete(xs4[1]), concrete(ys4[1])
        dims = [c // group, m // group, concrete(ys4[2]), concrete(ys4[3])]
        ok = (w.is_const and tuple(ws4[2:]) == (3, 3) and list(strides) == [1, 1]
              and list(dil) == [1, 1] and c % group == 0 and m % group == 0
              and np.dtype(w.dtype) in (np.float32, np.float64))
        if ok and group == 1:   # measured on this machine where calibrated (jitort.tuning)
            ok = tuning.choose("conv.winograd", c=c, m=m, oh=dims[2], ow=dims[3],
                               dtype=str(np.dtype(w.dtype))) == "winograd"
        elif ok:
            ok = winograd_wins(*dims) and winograd_grouped_wins(*dims)
        em.memo[key] = winograd_tile(*dims) if ok else 0
    return em.memo[key]


def _use_algorithm(em: Emitter, n: Node, xs4, ws4, ys4, strides, group, tile) -> str:
    """The kernel of a 2-D convolution that is not depthwise-staged: ``cvec``
    (``conv_cvec.conv2d_cvec``, output channels across the vector lanes), ``grouped``
    (``conv_group.conv2d_grouped``, channels-last im2col per group), ``implicit``
    (``conv_implicit.conv2d_implicit``, few taps per output), ``winograd`` (only where
    ``_use_winograd`` gave a ``tile``) or ``im2col`` (``conv.conv2d``; a 1x1 layer is one gemm).
    Float32 with constant weights: ``jitort.tuning``'s ``conv.algorithm``, calibrated on this
    machine, else the shape rules ``implicit_wins``, ``cvec_wins`` and ``grouped_wins``; other
    float convolutions: ``grouped_wins`` for grouped float64 ones without Winograd, else
    Winograd or im2col. Decided once per node from the first shape, as ``_use_winograd``."""
    key = ("algorithm", id(n))
    if key not in em.memo:
        from jitort.kernels.cpu.conv_group import grouped_wins
        w, y = n.inputs[1], n.outputs[0]
        c, m, kh, kw, oh, ow, sh, sw = (concrete(d) for d in (xs4[1], ws4[0], ws4[2], ws4[3],
                                                              ys4[2], ys4[3], *strides[:2]))
        pick = "winograd" if tile else "im2col"
        split = w.is_const and c % group == 0 and m % group == 0
        if split and np.dtype(w.dtype) == np.float32 and np.dtype(y.dtype) == np.float32:
            pick = tuning.choose("conv.algorithm", c=c, m=m, kh=kh, kw=kw, oh=oh, ow=ow, sh=sh,
                                 sw=sw, group=group, winograd=bool(tile), dtype="float32")
        elif split and not tile and np.dtype(w.dtype) == np.float64 \
                and grouped_wins(c, m, oh, ow, group):
            pick = "grouped"
        em.memo[key] = pick
    return em.memo[key]


def _out_beside_residual(em: Emitter, n: Node, y, residual) -> View:
    """``em.write(y)`` for a conv whose epilogue reads ``residual``: the kernels require that the
    residual not alias the output. The residual is read at this step and the output is a
    fresh buffer (never an in-place reuse, see ``Emitter.out``), so the planner never overlaps
    them; a Concat slice (``em.embed``) has its own bytes."""
    yv = em.write(y)
    if (residual is not None and id(y) not in em.embed
            and em.root.get(id(residual), -1) == em.root.get(id(y))):
        raise Unlowerable(n, "conv residual shares the output's buffer")  # never planned so
    return yv


def _lower_conv2d(em: Emitter, n: Node, residual=None, act=(0, 0.0, 0.0)) -> None:
    """Emit one call of the CPU conv kernel for a Conv or FusedConv: plain ``conv2d``, or the
    variant applying bias (+ residual) + activation to each output block while it is in cache.
    The residual is read at this step and the output is a fresh buffer (never an in-place reuse,
    see ``Emitter.out``), so their lifetimes intersect and the planner never overlaps them:
    ``conv2d_bias_add_act`` requires that ``res`` not alias ``out``."""
    from jitort.kernels.cpu.conv import conv2d_scratch_elems
    x, w, y = n.inputs[0], n.inputs[1], n.outputs[0]
    b = n.input(2)
    if len(em.shape(x)) == 5:
        _lower_conv3d(em, n, residual, act)
        return
    xs4, ws4, ys4, strides, dil, pads, group = _conv_geometry(em, n)
    c, kh, kw = xs4[1], ws4[2], ws4[3]
    oh, ow = ys4[2], ys4[3]
    if _use_staged(em, n):
        _lower_dw_staged(em, n, xs4, ws4, ys4, strides, pads, residual, act)
        return
    # Winograd reads its own transformed weights: neither the im2col scratch nor the raw
    # weights are placed for it
    tile = _use_winograd(em, n, xs4, ws4, ys4, strides, dil, group)
    algorithm = _use_algorithm(em, n, xs4, ws4, ys4, strides, group, tile)
    if algorithm == "cvec":
        _lower_conv2d_cvec(em, n, xs4, ws4, ys4, strides, dil, pads, residual, act, group)
        return
    if algorithm == "grouped":
        _lower_conv2d_grouped(em, n, xs4, ws4, ys4, strides, dil, pads, residual, act, group)
        return
    if algorithm == "implicit":
        _lower_conv2d_implicit(em, n, xs4, ws4, ys4, strides, dil, pads, residual, act)
        return
    if not tile:
        col = em.temp(max(1, conv2d_scratch_elems(c, kh, kw, oh, ow, group, em.threads,
                                                  ws4[0], strides, dil, xs4[3])),
                      y.dtype)
    xv = em.shaped(x, xs4)
    wv = None if tile else em.shaped(w, ws4)
    bv = em.read(b) if b is not None else _no_bias(y, ws4[0])
    rv = None if residual is None else em.shaped(residual, ys4)
    yv = _out_beside_residual(em, n, y, residual)
    y4 = yv.reshape(em.sizes(ys4))
    epi = _epi(act)
    if tile:
        from jitort.kernels.cpu.winograd import winograd_scratch_elems, winograd_weights
        u = em.constant(("winograd", tile, id(w.const)),
                        lambda: winograd_weights(w.const.reshape(ws4), tile))
        scr = em.temp(winograd_scratch_elems(c, ws4[0], oh, ow, em.threads, tile), y.dtype)
        em.call(_wino.conv3x3_winograd, xv, u, bv, y4 if rv is None else rv, y4, scr,
                *em.sizes((pads[0], pads[1])), b is not None, residual is not None, *epi)
        return
    args = em.sizes((strides[0], strides[1], pads[0], pads[1], dil[0], dil[1]))
    if n.op_type == "Conv":
        em.call(_conv.conv2d, xv, wv, bv, y4, col, *args, group, b is not None)
        return
    if residual is None:
        em.call(_conv.conv2d_bias_act, xv, wv, bv, y4, col, *args, group, b is not None, *epi)
    else:
        em.call(_conv.conv2d_bias_add_act, xv, wv, bv, rv, y4, col, *args, group, b is not None,
                *epi)


def _use_staged(em: Emitter, n: Node) -> bool:
    """Whether a depthwise convolution runs as ``conv_nhwc.dwconv_staged``: the ones the layout
    pass would run channels-last alone, in a region of their own (``layout.staged_depthwise``;
    the pass leaves those NCHW), and the NCHW ones whose channels fill whole 16-channel
    groups (``layout.staged_nchw``). Decided once per node from the first shape, as
    ``_use_winograd``."""
    key = ("dw_staged", id(n))
    if key not in em.memo:
        from ...passes.layout import staged_depthwise, staged_nchw
        em.memo[key] = staged_depthwise(n) or staged_nchw(n)
    return em.memo[key]


def _lower_dw_staged(em: Emitter, n: Node, xs4, ws4, ys4, strides, pads, residual, act) -> None:
    """A depthwise Conv / FusedConv as ``conv_nhwc.dwconv_staged`` (bands of rows transposed
    into 16-channel blocks in a worker's scratch): weights laid out in channel blocks at compile time
    (``staged_weights``, one block per thread on small planes, ``staged_blocks``); bias,
    residual and activation in the kernel."""
    from jitort.kernels.cpu.conv_nhwc import (dw_staged_scratch_elems, staged_blocks,
                                              staged_weights)
    w, y, b = n.inputs[1], n.outputs[0], n.input(2)
    c = concrete(xs4[1])
    blocks = staged_blocks(c, concrete(ys4[2]) * concrete(ys4[3]), em.threads)
    hwio = em.constant(("dw_staged", blocks, id(w.const)),
                       lambda: staged_weights(w.const.reshape(ws4), blocks))
    dims = [concrete(d) for d in (xs4[3], ws4[2], strides[0], ys4[2], ys4[3])]
    scr = em.temp(dw_staged_scratch_elems(*dims, em.threads), y.dtype)
    xv, bv, rv, y4 = _io_args(em, n, xs4, ys4, residual)
    args = em.sizes((strides[0], strides[1], pads[0], pads[1]))
    em.call(_cnhwc.dwconv_staged, xv, hwio, bv, rv, y4, scr, *args, b is not None,
            residual is not None, *_epi(act))


def _lower_conv2d_implicit(em: Emitter, n: Node, xs4, ws4, ys4, strides, dil, pads, residual,
                           act) -> None:
    """A Conv / FusedConv as ``conv_implicit.conv2d_implicit``: weights packed at compile time,
    the input's phase planes in the scratch; bias, residual and activation in the kernel."""
    from jitort.kernels.cpu.conv_implicit import implicit_scratch_elems, pack_weights
    w, y = n.inputs[1], n.outputs[0]
    pk = em.constant(("implicit", id(w.const)), lambda: pack_weights(w.const.reshape(ws4)))
    scr = em.temp(implicit_scratch_elems(xs4[0], xs4[1], xs4[2], xs4[3], ws4[2], ws4[3],
                                         ys4[2], ys4[3], strides[0], strides[1], dil[0],
                                         dil[1]), y.dtype)
    args = _packed_args(em, n, xs4, ws4, ys4, strides, dil, pads, residual, act, pk, scr)
    em.call(_convi.conv2d_implicit, *args)


def _lower_conv2d_cvec(em: Emitter, n: Node, xs4, ws4, ys4, strides, dil, pads, residual,
                       act, group) -> None:
    """A Conv / FusedConv as ``conv_cvec.conv2d_cvec``: weights packed at compile time in
    panels of output channels; bias, residual and activation in the kernel."""
    from jitort.kernels.cpu.conv_cvec import cvec_scratch_elems, pack_weights
    w, y = n.inputs[1], n.outputs[0]
    pk = em.constant(("cvec", group, id(w.const)),
                     lambda: pack_weights(w.const.reshape(ws4), group))
    scr = em.temp(cvec_scratch_elems(xs4[0], xs4[1], xs4[2], xs4[3], ws4[2], ws4[3],
                                     ys4[2], ys4[3], strides[0], strides[1], dil[0], dil[1],
                                     em.threads), y.dtype)
    args = _packed_args(em, n, xs4, ws4, ys4, strides, dil, pads, residual, act, pk, scr, group)
    em.call(_convc.conv2d_cvec, *args)


def _io_args(em: Emitter, n: Node, xs4, ys4, residual) -> tuple[View, View | Zeros, View, View]:
    """Input, bias (a 1-element zero array when none), residual (the output when none) and
    output arguments of the kernels that take the conv epilogue's operands as arrays."""
    x, y, b = n.inputs[0], n.outputs[0], n.input(2)
    xv = em.shaped(x, xs4)
    bv = em.read(b) if b is not None else _no_bias(y, 1)
    yv = _out_beside_residual(em, n, y, residual)
    y4 = yv.reshape(em.sizes(ys4))
    rv = em.shaped(residual, ys4) if residual is not None else y4
    return xv, bv, rv, y4


def _packed_args(em: Emitter, n: Node, xs4, ws4, ys4, strides, dil, pads, residual, act, pk,
                 scr, group=None) -> tuple:
    """The arguments of the packed-weight convolution kernels (``conv2d_implicit``,
    ``conv2d_cvec``, ``conv2d_grouped``): x, packed weights, kh, kw, bias, residual (the output
    when none), output, scratch, strides, begin pads, dilations[, group], bias / residual flags
    and the activation."""
    b = n.input(2)
    xv, bv, rv, y4 = _io_args(em, n, xs4, ys4, residual)
    geo = em.sizes((ws4[2], ws4[3]))
    args = em.sizes((strides[0], strides[1], pads[0], pads[1], dil[0], dil[1]))
    grp = () if group is None else (group,)
    return (xv, pk, *geo, bv, rv, y4, scr, *args, *grp, b is not None, residual is not None,
            *_epi(act))


def _lower_conv2d_grouped(em: Emitter, n: Node, xs4, ws4, ys4, strides, dil, pads, residual,
                          act, group) -> None:
    """A grouped Conv / FusedConv as ``conv_group.conv2d_grouped``: weights packed at compile
    time per group in (kh, kw, c) order; bias, residual and activation in the kernel."""
    from jitort.kernels.cpu.conv_group import grouped_scratch_elems, pack_weights
    w, y = n.inputs[1], n.outputs[0]
    pk = em.constant(("grouped", group, id(w.const)),
                     lambda: pack_weights(w.const.reshape(ws4), group))
    scr = em.temp(grouped_scratch_elems(xs4[1], xs4[2], xs4[3], ws4[2], ws4[3], ys4[2],
                                        ys4[3], ws4[0], group, em.threads), y.dtype)
    args = _packed_args(em, n, xs4, ws4, ys4, strides, dil, pads, residual, act, pk, scr, group)
    em.call(_convg.conv2d_grouped, *args)


def _lower_conv3d(em: Emitter, n: Node, residual=None, act=(0, 0.0, 0.0)) -> None:
    """3-D Conv / FusedConv: ``conv.conv3d`` (im2col of blocks of output rows + BLAS gemm,
    bias / residual / activation on each block)."""
    from jitort.kernels.cpu.conv import conv3d_scratch_elems
    x, w, y = n.inputs[0], n.inputs[1], n.outputs[0]
    b = n.input(2)
    xs, ws, ys = em.shape(x), em.shape(w), em.shape(y)
    group = int(n.attrs.get("group", 1))
    if len(ws) != 5 or len(ys) != 5 or xs[1] != ws[1] * group or ws[0] % group:
        raise Unlowerable(n, f"inconsistent shapes X {xs}, W {ws}, group {group}")
    strides = list(n.attrs.get("strides") or [1, 1, 1])
    dil = list(n.attrs.get("dilations") or [1, 1, 1])
    pads = _conv_pads(n, xs[2:], ws[2:], strides, dil, ys[2:])
    col = em.temp(max(1, conv3d_scratch_elems(xs[1], *ws[2:], *ys[2:], group, em.threads)),
                  y.dtype)
    bv = em.read(b) if b is not None else _no_bias(y, 1)
    rv = None if residual is None else em.shaped(residual, ys)
    yv = _out_beside_residual(em, n, y, residual)
    y5 = yv.reshape(em.sizes(ys))
    args = em.sizes((*strides, *pads, *dil))
    em.call(_conv.conv3d, em.shaped(x, xs), em.shaped(w, ws), bv, y5 if rv is None else rv, y5,
            col, *args, group, b is not None, residual is not None, *_epi(act))


@lowering("Conv", supports=_conv_ok)
def lower_conv(em: Emitter, n: Node) -> None:
    _lower_conv2d(em, n)


def _fused_conv_ok(n: Node) -> bool:
    r = n.input(3)
    return (_conv_ok(n) and n.attrs.get("activation", "") in ACT_CODES
            and (r is None or (r.dtype == n.inputs[0].dtype and r.dtype == n.outputs[0].dtype)))


@lowering("FusedConv", domain="jitort", supports=_fused_conv_ok)
def lower_fused_conv(em: Emitter, n: Node) -> None:
    """``act(conv(x, W) + B [+ residual])`` (see ``passes.epilogues.fuse_epilogues``); the shape
    pass has checked that the residual has the output's shape."""
    _lower_conv2d(em, n, n.input(3), act_args(n))


def _fused_conv_nhwc_ok(n: Node) -> bool:
    from ...passes.layout import nhwc_kind
    return _fused_conv_ok(n) and nhwc_kind(n) != ""


@lowering("FusedConvNHWC", domain="jitort", supports=_fused_conv_nhwc_ok)
def lower_fused_conv_nhwc(em: Emitter, n: Node) -> None:
    """A channels-last depthwise or pointwise convolution (``passes.layout``):
    ``conv_nhwc.dwconv_nhwc`` / ``pwconv_nhwc`` with the FusedConv epilogue."""
    from ...passes.layout import nhwc_kind
    x, w, y = n.inputs[0], n.inputs[1], n.outputs[0]
    b, residual = n.input(2), n.input(3)
    xs, ws, ys = em.shape(x), em.shape(w), em.shape(y)
    strides = list(n.attrs.get("strides") or [1, 1])
    dil = list(n.attrs.get("dilations") or [1, 1])
    pads = _conv_pads(n, xs[1:3], ws[0:2], strides, dil, ys[1:3])
    bv = em.read(b) if b is not None else _no_bias(y, ws[3])
    xv = em.shaped(x, xs)
    wv = em.shaped(w, ws)
    yv = _out_beside_residual(em, n, y, residual)
    y4 = yv.reshape(em.sizes(ys))
    rv = y4 if residual is None else em.shaped(residual, ys)
    epi = _epi(act_args(n))
    flags = (b is not None, residual is not None)
    if nhwc_kind(n) == "pointwise":
        em.call(_cnhwc.pwconv_nhwc, xv, wv, bv, rv, y4, *flags, *epi)
        return
    args = em.sizes((strides[0], strides[1], pads[0], pads[1], dil[0], dil[1]))
    em.call(_cnhwc.dwconv_nhwc, xv, wv, bv, rv, y4, *args, *flags, *epi)
