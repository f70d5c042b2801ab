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
convolution lowering picks without it (``direct``: im2col + gemm, the implicit gemms,
channels-last tiles: ``lowerings/conv.py``'s cascade). The lowering decides, so each
candidate is timed as a one-Conv model compiled by jitort with the choice forced
(``tuning.force``). Buckets: channels (the geometric mean of C and M: up to 48, 96, 192,
more) x output plane (up to 10, 20, 40, more a side), 16. Default rule:
``winograd.winograd_wins`` (Zen 5 sweeps).
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


def _prepare_conv(which: str):
    def prepare(p: dict):
        from onnx import TensorProto, helper, numpy_helper
        jit_compile = devices.factory("cpu")
        c, m, oh, ow = int(p["c"]), int(p["m"]), int(p["oh"]), int(p["ow"])
        rng = np.random.default_rng(0)
        w = (rng.standard_normal((m, c, 3, 3)) / (3 * c) ** 0.5).astype(np.float32)
        b = rng.standard_normal(m).astype(np.float32)
        g = helper.make_graph(
            [helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])], "conv",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, oh, ow])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
            [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
        model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        feeds = {"x": rng.standard_normal((1, c, oh, ow)).astype(np.float32)}
        with force("conv.winograd", which):
            cm = jit_compile(model, threads=1, tiered=False)
            cm.run(None, feeds)           # plans (lowers) and compiles here, inside force
        return lambda: cm.run(None, feeds)
    return prepare


CONV_WINOGRAD = register(Choice(
    name="conv.winograd",
    doc="group-1 3x3 stride-1 float32 convolutions over constant weights: Winograd, or the "
        "lowering's other paths (im2col, implicit gemms, channels-last)",
    candidates=(Candidate("winograd", _conv_applies, _prepare_conv("winograd")),
                Candidate("direct", _conv_applies, _prepare_conv("direct"))),
    bucket=_conv_bucket, grid=_conv_grid, problem=_conv_problem, default=_conv_default,
    modules=("winograd", "conv", "conv_cvec", "conv_implicit", "conv_nhwc", "gemm", "sgemm"),
    work=lambda p: 2.0 * p["c"] * p["m"] * 9 * p["oh"] * p["ow"]))
