"""The choices calibration measures (``jitort.tuning``): candidates, buckets, default rules.

``gemm.activations``: a float32 product computed per call (B not a constant, untransposed:
attention's per-head products, convolutions' im2col row blocks, activations @ activations,
and the per-call path of ``gemm.weights``) runs either on jitort's gemm packing B per call
(``own``: ``gemm.ogemm``) or on the BLAS (``blas``: ``gemm.xgemm``). Decided inside the
compiled kernel (``gemm._own_per_call``) from ``kernels.cpu.tunables``, which
:func:`_apply_activations` fills. Buckets: rows x K x N classes as below. Default rule
(Zen 5, ``scripts/sweeps/sweep_sgemm.py``): own for 32-256 rows with K * N >= 48K.

``gemm.weights``: a float32 MatMul / Gemm whose B is a constant matrix (weights) runs either
on jitort's own gemm with B packed once at compile time (``packed``: ``gemm.matmul_packed`` /
``gemm.gemm_packed`` over ``sgemm.pack_b``'s panels) or on the per-call path (``unpacked``:
``gemm.matmul3d`` / ``gemm.gemm``: a matrix-vector stream at one row, else the BLAS, or
jitort's gemm packing B per call where ``gemm``'s activation rule says so). Buckets: A's rows
(1, 2-7, 8-31, 32-127, 128+), K and N (up to 128, 512, 2048, more) and whether B is stored
transposed (Gemm transB=1, a PyTorch Linear); each measured at its representative shape.
Default rule (measured on a Zen 5 with ``scripts/sweeps/sweep_sgemm.py``): packed from 128K
multiply-adds on, and always when B is stored transposed.

``conv.winograd``: a group-1 3x3 stride-1 float32 convolution with constant weights runs as
Winograd (``kernels.cpu.winograd``, weights transformed at compile time) or as whatever the
convolution lowering picks without it (``direct``: ``conv.algorithm``'s pick among im2col +
gemm, the implicit gemms, channels-last tiles). The lowering decides, so each
candidate is timed as a one-Conv model compiled by jitort with the choice forced
(``tuning.force``). Buckets: channels (the geometric mean of C and M: up to 48, 96, 192,
more) x output plane (up to 10, 20, 40, more a side), 16. Default rule:
``winograd.winograd_wins`` (Zen 5 sweeps).

``conv.algorithm``: the kernel of a float32 2-D convolution with constant weights that is not
a depthwise-staged one: ``im2col`` (``conv.conv2d``: im2col + gemm; a 1x1 stride-1 layer is a
gemm straight on its input) or, where ``conv.winograd`` (or the grouped Winograd rule) took
Winograd, ``winograd``; the implicit gemm (``implicit``: ``conv_implicit``, group 1, timed up
to C*KH*KW = 640); output channels across the vector lanes (``cvec``: ``conv_cvec``);
channels-last im2col per group (``grouped``: ``conv_group``, group > 1). Timed as
``conv.winograd`` is: one-Conv models compiled with the choice forced (and ``conv.winograd``
forced to the bucket's side for group-1 3x3 stride-1 ones). Buckets: kernel (1, up to 4 -> 3,
more -> 7) x stride (1, 2+) x channels per group in and out (up to 8, 22, 45, 90, 181, more)
x output side (up to 10, 20, 40, 80, more) x groups (1, 2-7, 8+) x whether Winograd is the
alternative; ``jitort tune`` measures the 19 of ``ALGO_GRID`` (stems, 1x1 projections, strided
3x3 downsampling, 3x3 on small planes, few-channel 3x3, grouped 3x3); a bucket not
measured follows the measured buckets of its kernel, stride, groups and Winograd class nearest
to it in channels and side (``tuning.nearest_pick``: at most two class steps away, the
majority), and where none is that near the default rule: the lowering's cascade before
calibration (Zen 5 sweeps):
``conv_implicit.implicit_wins`` decides whether the implicit gemm is the alternative, then
``conv_cvec.cvec_wins``, ``conv_group.grouped_wins``, the implicit gemm, Winograd / im2col.

The classical-ML choices (``trees.layout``, ``trees.bitvector``, ``linear.scores``) are in
``jitort.tuning_ml``.
"""
from __future__ import annotations

import math

import numpy as np

from . import devices
from .tuning import Candidate, Choice, choose, force, register

ROWS = (1, 4, 16, 64, 256)          # representative rows of kernels.cpu.tunables' row classes
DIMS = (64, 256, 1024, 4096)        # representative K / N of its dimension classes
PACKED_MIN_MACS = 1 << 17


def _act_bucket(p: dict) -> tuple:
    from .kernels.cpu import tunables   # the classes the compiled kernels bucket by
    return (ROWS[tunables.row_class.py_func(int(p["rows"]))],
            DIMS[tunables.dim_class.py_func(int(p["k"]))],
            DIMS[tunables.dim_class.py_func(int(p["n"]))])


def _act_grid() -> list:
    return [(r, k, n) for r in ROWS for k in DIMS for n in DIMS]


def _act_problem(key: tuple) -> dict:
    r, k, n = key
    return {"rows": r, "k": k, "n": n, "dtype": "float32"}


def _gemm_bucket(p: dict) -> tuple:
    return _act_bucket(p) + (int(bool(p.get("trans"))),)


def _gemm_grid() -> list:
    return [key + (t,) for t in (0, 1) for key in _act_grid()]


def _gemm_problem(key: tuple) -> dict:
    return dict(_act_problem(key[:3]), trans=bool(key[3]))


def _gemm_default(p: dict) -> str:
    if p.get("trans"):
        return "packed"
    return "unpacked" if int(p["rows"]) * int(p["k"]) * int(p["n"]) < PACKED_MIN_MACS \
        else "packed"


def _is_f32(p: dict) -> bool:
    return p.get("dtype", "float32") == "float32" and int(p["k"]) > 0 and int(p["n"]) > 0


def _operands(p: dict):
    rng = np.random.default_rng(0)
    r, k, n = int(p["rows"]), int(p["k"]), int(p["n"])
    a = rng.standard_normal((r, k)).astype(np.float32)
    w = rng.standard_normal((n, k) if p.get("trans") else (k, n)).astype(np.float32)
    return a, w, np.empty((r, n), np.float32)


def _prepare_packed(p: dict):
    from .kernels.cpu import gemm
    from .kernels.cpu.sgemm import pack_b
    a, w, y = _operands(p)
    pk = pack_b(w.T if p.get("trans") else w)
    if p.get("trans"):
        c = np.zeros((1, 1), np.float32)
        one = np.float32(1.0)
        return lambda: gemm.gemm_packed(a, pk, c, y, one, one, False, False)
    a3, y3 = a[None], y[None]
    z = np.zeros(0, np.float32)
    return lambda: gemm.matmul_packed(a3, pk, z, y3, 0, 0.0, 0.0)


def _prepare_unpacked(p: dict):
    from .kernels.cpu import gemm
    a, w, y = _operands(p)
    if p.get("trans"):
        c = np.zeros((1, 1), np.float32)
        one = np.float32(1.0)
        return lambda: gemm.gemm(a, w, c, y, one, one, False, True, False)
    a3, w3, y3 = a[None], w[None], y[None]
    return lambda: gemm.matmul3d(a3, w3, y3)


def _act_default(p: dict) -> str:
    from .kernels.cpu import gemm      # the rule the kernel applies without a decision
    r, k, n = int(p["rows"]), int(p["k"]), int(p["n"])
    return "own" if gemm._OWN_MIN_ROWS <= r <= gemm._OWN_MAX_ROWS and \
        k * n >= gemm._OWN_MIN_KN else "blas"


_per_call = {}


def _per_call_kernels():
    """Two small jitted callers of ``gemm.ogemm`` / ``gemm.xgemm`` (compiled once per
    process: they are calibration's, not the library's)."""
    if not _per_call:
        from numba import njit
        from .kernels.cpu import gemm as G

        @njit
        def own(m, n, k, a, b, c):
            G.ogemm(0, 0, m, n, k, 1.0, a, 0, k, b, 0, n, 0.0, c, 0, n)

        @njit
        def blas_(m, n, k, a, b, c):
            G.xgemm(0, 0, m, n, k, 1.0, a, 0, k, b, 0, n, 0.0, c, 0, n)
        _per_call.update(own=own, blas=blas_)
    return _per_call


def _prepare_per_call(which: str):
    def prepare(p: dict):
        fn = _per_call_kernels()[which]
        a, w, y = _operands(dict(p, trans=False))
        m, k, n = int(p["rows"]), int(p["k"]), int(p["n"])
        return lambda: fn(m, n, k, a, w, y)
    return prepare


def _apply_activations(decisions: dict) -> None:
    from .kernels.cpu import tunables
    flags = np.full(tunables.GEMM_OWN_SLOTS, tunables.DEFAULT, np.int64)
    if decisions.get("gemm.activations"):
        for key in _act_grid():
            p = _act_problem(key)
            slot = tunables.gemm_bucket_py(p["rows"], p["k"], p["n"])
            flags[slot] = int(choose("gemm.activations", decisions, **p) == "own")
    tunables.set_values(tunables.GEMM_OWN, flags)


GEMM_ACTIVATIONS = register(Choice(
    name="gemm.activations",
    doc="float32 products computed per call (B not constant): jitort's gemm packing B per "
        "call, or the BLAS",
    candidates=(Candidate("own", _is_f32, _prepare_per_call("own")),
                Candidate("blas", _is_f32, _prepare_per_call("blas"))),
    bucket=_act_bucket, grid=_act_grid, problem=_act_problem, default=_act_default,
    modules=("gemm", "sgemm", "blas", "tunables"),
    work=lambda p: 2.0 * p["rows"] * p["k"] * p["n"], apply=_apply_activations))


GEMM_WEIGHTS = register(Choice(
    name="gemm.weights",
    doc="float32 MatMul/Gemm over constant weights: B prepacked for jitort's gemm, or "
        "the per-call path (BLAS)",
    candidates=(Candidate("packed", _is_f32, _prepare_packed),
                Candidate("unpacked", _is_f32, _prepare_unpacked)),
    bucket=_gemm_bucket, grid=_gemm_grid, problem=_gemm_problem, default=_gemm_default,
    modules=("gemm", "sgemm", "blas"),
    work=lambda p: 2.0 * p["rows"] * p["k"] * p["n"]))


CHANNELS = (32, 64, 128, 256)
PLANES = (7, 14, 28, 56)


def _chan_class(c: float) -> int:
    return CHANNELS[0 if c <= 48 else 1 if c <= 96 else 2 if c <= 192 else 3]


def _plane_class(s: int) -> int:
    return PLANES[0 if s <= 10 else 1 if s <= 20 else 2 if s <= 40 else 3]


def _conv_bucket(p: dict) -> tuple:
    return (_chan_class(math.sqrt(int(p["c"]) * int(p["m"]))),
            _plane_class(max(int(p["oh"]), int(p["ow"]))))


def _conv_grid() -> list:
    return [(c, s) for c in CHANNELS for s in PLANES]


def _conv_problem(key: tuple) -> dict:
    c, s = key
    return {"c": c, "m": c, "oh": s, "ow": s, "dtype": "float32"}


def _conv_default(p: dict) -> str:
    from .kernels.cpu.winograd import winograd_wins
    return "winograd" if winograd_wins(int(p["c"]), int(p["m"]), int(p["oh"]), int(p["ow"])) \
        else "direct"


def _conv_applies(p: dict) -> bool:
    return p.get("dtype", "float32") == "float32"


def _one_conv(p: dict, forced: tuple):
    """A no-argument callable running a one-Conv model of problem ``p`` (padded to keep the
    plane at stride 1), compiled by jitort at one thread with the ``(choice, candidate)`` pairs
    of ``forced`` forced (``tuning.force``): the lowering's choices are timed end to end."""
    from contextlib import ExitStack

    from onnx import TensorProto, helper, numpy_helper
    jit_compile = devices.factory("cpu")
    c, m, g = int(p["c"]), int(p["m"]), int(p.get("group", 1))
    kh, kw, sh, sw = (int(p.get(k, d)) for k, d in (("kh", 3), ("kw", 3), ("sh", 1), ("sw", 1)))
    oh, ow = int(p["oh"]), int(p["ow"])
    h, w_ = (oh - 1) * sh + kh - 2 * (kh // 2), (ow - 1) * sw + kw - 2 * (kw // 2)
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((m, c // g, kh, kw)) / (kh * kw * c / g) ** 0.5).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], group=g, strides=[sh, sw],
                            pads=[kh // 2, kw // 2, kh // 2, kw // 2])
    graph = helper.make_graph(
        [node], "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, w_])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    feeds = {"x": rng.standard_normal((1, c, h, w_)).astype(np.float32)}
    with ExitStack() as stack:
        for name, which in forced:
            stack.enter_context(force(name, which))
        cm = jit_compile(model, threads=1, tiered=False)
        cm.run(None, feeds)           # plans (lowers) and compiles here, inside force
    return lambda: cm.run(None, feeds)


def _prepare_conv(which: str):
    return lambda p: _one_conv(p, (("conv.winograd", which),))


CONV_WINOGRAD = register(Choice(
    name="conv.winograd",
    doc="group-1 3x3 stride-1 float32 convolutions over constant weights: Winograd, or the "
        "lowering's other paths (im2col, implicit gemms, channels-last)",
    candidates=(Candidate("winograd", _conv_applies, _prepare_conv("winograd")),
                Candidate("direct", _conv_applies, _prepare_conv("direct"))),
    bucket=_conv_bucket, grid=_conv_grid, problem=_conv_problem, default=_conv_default,
    modules=("winograd", "conv", "conv_cvec", "conv_implicit", "conv_nhwc", "gemm", "sgemm"),
    work=lambda p: 2.0 * p["c"] * p["m"] * 9 * p["oh"] * p["ow"]))


# conv.algorithm: the kernel of a float32 2-D convolution with constant weights
ALGO_CHANNELS = (3, 16, 32, 64, 128, 256)
ALGO_SIDES = (7, 14, 28, 56, 112)
#: group count classes: 1, 2-7, 8 and more
ALGO_GROUPS = (1, 4, 16)
#: the implicit gemm is timed up to this many multiply-adds per output (C * KH * KW): 4x its
#: rule's bound (``conv_implicit.IMPLICIT_MAX_K``); past it, its few-taps design cannot compete
IMPLICIT_MAX_TIMED_K = 640


def _algo_chan(c: int) -> int:
    bounds = (8, 22, 45, 90, 181)
    return ALGO_CHANNELS[sum(c > x for x in bounds)]


def _algo_side(s: int) -> int:
    return ALGO_SIDES[sum(s > x for x in (10, 20, 40, 80))]


def _algo_dims(p: dict) -> tuple:
    return tuple(int(p.get(k, d)) for k, d in (("c", 0), ("m", 0), ("kh", 1), ("kw", 1),
                                               ("oh", 1), ("ow", 1), ("sh", 1), ("sw", 1),
                                               ("group", 1)))


def _algo_bucket(p: dict) -> tuple:
    """(kernel 1 / 3 / 7, stride 1 / 2, channels per group in and out, output side, groups 1 /
    4 / 16, Winograd the alternative 0 / 1)."""
    c, m, kh, kw, oh, ow, sh, sw, g = _algo_dims(p)
    k = max(kh, kw)
    return (1 if k == 1 else 3 if k <= 4 else 7, 1 if max(sh, sw) == 1 else 2,
            _algo_chan(c // g), _algo_chan(m // g), _algo_side(max(oh, ow)),
            ALGO_GROUPS[(g > 1) + (g > 7)], int(bool(p.get("winograd"))))


def _algo_place(key: tuple) -> tuple:
    """Kind (kernel, stride, groups, Winograd) and position (the class indices of the channels
    in and out and of the output side) of a bucket, for ``tuning.nearest_pick``."""
    k, s, cg, mg, side, g, wino = key
    if cg not in ALGO_CHANNELS or mg not in ALGO_CHANNELS or side not in ALGO_SIDES:
        return ("unknown",) + tuple(key), ()      # another version's classes: no neighbours
    return (k, s, g, wino), (ALGO_CHANNELS.index(cg), ALGO_CHANNELS.index(mg),
                             ALGO_SIDES.index(side))


def _algo_problem(key: tuple) -> dict:
    k, s, cg, mg, side, g, wino = key
    return {"c": cg * g, "m": mg * g, "kh": k, "kw": k, "oh": side, "ow": side, "sh": s,
            "sw": s, "group": g, "winograd": bool(wino), "dtype": "float32"}


#: the buckets ``jitort tune`` measures (kernel, stride, channels in / out per group, output
#: side, groups, Winograd): the layer classes of image CNNs -- stems, 1x1 projections, strided
#: 3x3 downsampling, 3x3 layers where Winograd is not taken (small planes) and few-channel ones
#: where it is, grouped 3x3. No strided 1x1 bucket: the CPU pipeline turns an unpadded strided
#: 1x1 layer into a subsampling Slice and a stride-1 layer on the output's plane
#: (``passes.patterns.subsample_strided_pointwise``), whose bucket is a stride-1 one. Buckets
#: not listed follow their nearest listed ones, else the default rule (``tuning.nearest_pick``).
ALGO_GRID = (
    (7, 2, 3, 64, 112, 1, 0), (3, 2, 3, 32, 112, 1, 0),
    (1, 1, 64, 256, 56, 1, 0), (1, 1, 256, 64, 56, 1, 0), (1, 1, 256, 128, 28, 1, 0),
    (1, 1, 128, 256, 28, 1, 0), (1, 1, 256, 256, 14, 1, 0), (1, 1, 256, 256, 7, 1, 0),
    (1, 1, 64, 128, 28, 1, 0), (1, 1, 128, 256, 14, 1, 0), (1, 1, 64, 64, 56, 1, 0),
    (3, 2, 64, 128, 28, 1, 0), (3, 2, 128, 256, 14, 1, 0), (3, 2, 256, 256, 7, 1, 0),
    (3, 1, 256, 256, 7, 1, 0), (3, 1, 16, 64, 56, 1, 1),
    (3, 1, 32, 32, 28, 4, 1), (3, 2, 32, 32, 14, 16, 0), (3, 1, 32, 32, 7, 16, 0),
)


def _algo_grid() -> list:
    return list(ALGO_GRID)


def _algo_default(p: dict) -> str:
    """The shape rules measured on a Zen 5 (``implicit_wins``, ``cvec_wins``, ``grouped_wins``),
    in the order the lowering applied them before calibration."""
    from .kernels.cpu.conv_cvec import cvec_wins
    from .kernels.cpu.conv_group import grouped_wins
    from .kernels.cpu.conv_implicit import implicit_wins
    c, m, kh, kw, oh, ow, sh, sw, g = _algo_dims(p)
    wino = bool(p.get("winograd"))
    implicit = g == 1 and implicit_wins(c, kh, kw, oh, ow, winograd_alt=wino)
    if cvec_wins(c, m, kh, kw, oh, ow, sh, sw, winograd_alt=wino, implicit_alt=implicit,
                 group=g):
        return "cvec"
    if not wino and grouped_wins(c, m, oh, ow, g):
        return "grouped"
    if implicit:
        return "implicit"
    return "winograd" if wino else "im2col"


def _algo_applies(which: str):
    def applies(p: dict) -> bool:
        c, m, kh, kw, oh, ow, sh, sw, g = _algo_dims(p)
        if p.get("dtype", "float32") != "float32" or g < 1 or c % g or m % g:
            return False
        wino = bool(p.get("winograd"))
        return {"im2col": not wino, "winograd": wino, "cvec": True, "grouped": g > 1,
                "implicit": g == 1 and kh * kw > 1 and c * kh * kw <= IMPLICIT_MAX_TIMED_K}[which]
    return applies


def _prepare_algo(which: str):
    def prepare(p: dict):
        c, m, kh, kw, oh, ow, sh, sw, g = _algo_dims(p)
        forced = (("conv.algorithm", which),)
        if g == 1 and (kh, kw, sh, sw) == (3, 3, 1, 1):    # Winograd the alternative or not
            forced += (("conv.winograd", "winograd" if p.get("winograd") else "direct"),)
        return _one_conv(p, forced)
    return prepare


CONV_ALGORITHM = register(Choice(
    name="conv.algorithm",
    doc="float32 2-D convolutions over constant weights (not depthwise-staged): im2col + gemm "
        "(or Winograd where conv.winograd took it), the implicit gemm, the channel-vector "
        "kernel, or channels-last im2col per group",
    candidates=tuple(Candidate(w, _algo_applies(w), _prepare_algo(w))
                     for w in ("im2col", "winograd", "implicit", "cvec", "grouped")),
    bucket=_algo_bucket, grid=_algo_grid, problem=_algo_problem, default=_algo_default,
    place=_algo_place,
    modules=("conv", "winograd", "conv_cvec", "conv_implicit", "conv_group", "gemm", "sgemm"),
    work=lambda p: 2.0 * p["c"] * p["m"] / p["group"] * p["kh"] * p["kw"] * p["oh"] * p["ow"]))
