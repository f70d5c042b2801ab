"""CUDA lowerings of convolutions (Conv, jitort.FusedConv) and pooling."""
from __future__ import annotations

from ...ir import Node
from ..cuda_emit import CudaEmitter, _conv, _is_float, _one_product_dtype, _pool, lowering
from ..lowerings import ACT_CODES, _conv_geometry, _conv_pads, _prod, act_args
from ..registry import Unlowerable


# The most im2col elements a convolution's scratch holds (64 MiB of float32): the images whose
# columns fit go to cuBLAS in one call, the rest in further calls of the same size.
COL_ELEMS = 1 << 24
# Fewer output channels per group than this and the launcher runs its direct kernel
# (kernels/cuda/conv.py, TILED_MIN_KOUT): no scratch for columns it would not use.
MIN_GROUP_KOUT = 8


def col_images(n: int, per_img: int) -> int:
    """How many images' im2col columns (``per_img`` elements each) a convolution's scratch
    holds: the whole batch where it fits in ``COL_ELEMS``, at least one."""
    return max(1, min(n, COL_ELEMS // max(1, per_img)))


def _lower_conv(em: CudaEmitter, n: Node, residual=None, act=(0, 0.0, 0.0)) -> None:
    """One call of the conv launcher for a Conv or FusedConv (bias, optional residual of the
    output's shape and activation in its epilogue). A convolution that is not pointwise gets
    scratch for the im2col columns of as many images as ``col_images`` allows, which the
    launcher uses where cuBLAS serves (a GPU with CuPy) and ignores elsewhere."""
    x, w, b, y = n.inputs[0], n.inputs[1], n.input(2), n.outputs[0]
    xs, ws, ys, strides, dil, pads, group = _conv_geometry(em, n)
    xv, wv = em.read(x), em.read(w)
    bv = em.read(b) if b is not None else wv
    geo = (xs[0], xs[1], xs[2], xs[3], ws[0], ws[2], ws[3], ys[2], ys[3], strides[0], strides[1],
           pads[0], pads[1], dil[0], dil[1], group)
    dims = em.sizes(geo)
    rv = em.read(residual) if residual is not None else None
    yv = em.write(y)  # a fresh row, live with the residual's at this step: never the same memory
    pointwise = ws[2] == ws[3] == 1 and list(strides) == [1, 1] and ys[2:] == xs[2:]
    per_img = xs[1] * ws[2] * ws[3] * ys[2] * ys[3]
    imgs = col_images(xs[0], per_img)
    # no columns where a group has few output channels (depthwise): the direct kernel runs
    col = () if pointwise or ws[0] // group < MIN_GROUP_KOUT else (
        em.temp(per_img * imgs, y.dtype), em.size(imgs))
    if n.op_type == "Conv":
        em.call(_conv.conv2d, xv, wv, bv, yv, *dims, b is not None, *col)
        return
    code, alpha, beta = act
    epi = (code, float(alpha), float(beta))
    if residual is None:
        em.call(_conv.conv2d_bias_act, xv, wv, bv, yv, *dims, b is not None, *epi, *col)
    else:
        em.call(_conv.conv2d_bias_add_act, xv, wv, bv, rv, yv, *dims, b is not None, True, *epi,
                *col)


def _conv_dtypes(n: Node) -> bool:
    return _one_product_dtype(*n.inputs, n.outputs[0])


@lowering("Conv", supports=_conv_dtypes)
def lower_conv(em: CudaEmitter, n: Node) -> None:
    _lower_conv(em, n)


@lowering("FusedConv", domain="jitort", supports=lambda n: _conv_dtypes(n)
          and n.attrs.get("activation", "") in ACT_CODES)
def lower_fused_conv(em: CudaEmitter, n: Node) -> None:
    """jitort.FusedConv: ``act(conv(x, W) + B [+ residual])`` in the conv kernel's store (the
    shape pass has checked that the residual has the output's shape)."""
    _lower_conv(em, n, n.input(3), act_args(n))


def _pool_ok(n: Node) -> bool:
    return _is_float(n.inputs[0], n.outputs[0]) and len([o for o in n.outputs if o is not None]) == 1


def _pool_geometry(em: CudaEmitter, n: Node):
    xs, ys = em.shape(n.inputs[0]), em.shape(n.outputs[0])
    if len(xs) != 4:
        raise Unlowerable(n, f"{len(xs) - 2}-D pooling")
    k = list(n.attrs["kernel_shape"])
    s = list(n.attrs.get("strides", [1, 1]))
    dil = list(n.attrs.get("dilations", [1, 1]))
    pads = _conv_pads(n, xs[2:], k, s, dil, ys[2:])
    if n.attrs.get("auto_pad", "NOTSET") in ("NOTSET", ""):
        ends = list(n.attrs.get("pads", [0, 0, 0, 0]))[2:4]
    else:
        ends = [max(0, (ys[2 + a] - 1) * s[a] + (k[a] - 1) * dil[a] + 1 - xs[2 + a]) - pads[a]
                for a in range(2)]
    return (xs[0] * xs[1], xs[2], xs[3], ys[2], ys[3], k[0], k[1], s[0], s[1], pads[0], pads[1]), \
        dil, ends


@lowering("MaxPool", supports=lambda n: _pool_ok(n) and n.attrs.get("storage_order", 0) == 0)
def lower_maxpool(em: CudaEmitter, n: Node) -> None:
    geo, dil, _ = _pool_geometry(em, n)
    xv = em.read(n.inputs[0])
    em.call(_pool.maxpool2d, xv, em.write(n.outputs[0]), *em.sizes(geo + tuple(dil)))


@lowering("AveragePool", supports=lambda n: _pool_ok(n)
          and list(n.attrs.get("dilations", [1, 1])) == [1, 1])
def lower_avgpool(em: CudaEmitter, n: Node) -> None:
    geo, _, ends = _pool_geometry(em, n)
    xv = em.read(n.inputs[0])
    em.call(_pool.avgpool2d, xv, em.write(n.outputs[0]), *em.sizes(geo),
            bool(n.attrs.get("count_include_pad", 0)), em.size(ends[0]), em.size(ends[1]))


@lowering("GlobalAveragePool", "GlobalMaxPool", supports=lambda n: _is_float(n.inputs[0], n.outputs[0]))
def lower_global_pool(em: CudaEmitter, n: Node) -> None:
    xs = em.shape(n.inputs[0])
    if len(xs) < 3 or _prod(xs[2:]) == 0:
        raise Unlowerable(n, "global pooling needs N, C and non-empty spatial dims")
    kernel = _pool.global_avgpool if n.op_type == "GlobalAveragePool" else _pool.global_maxpool
    xv = em.read(n.inputs[0])
    em.call(kernel, xv, em.write(n.outputs[0]), em.size(xs[0] * xs[1]), em.size(_prod(xs[2:])))
