"""The choices the CUDA launchers make (``jitort.tuning``, device ``cuda``): candidates, buckets,
default rules, measured per GPU by ``jitort tune --device cuda``.

``cuda.gemm``: a float32 product (MatMul, MatMulBias, Gemm, an LSTM's input projection) runs
either as one strided-batched cuBLAS call followed by the epilogue kernel where there is one
(``cublas``) or as jitort's 16x16-tile kernel with the epilogue fused (``tiled``: one launch,
no round trip of the product through memory). Buckets: rows (1, 2-7, 8-31, 32-127, 128-1023,
more) x K x N (up to 128, 512, 2048, more) x batch (one product, several); the grid is every
single product (96) and attention's batched shapes (12). Each bucket's problem is a MatMulBias
(bias row, no activation) for a single product, a plain batched MatMul for several. Default
rule: cuBLAS wherever it serves (never measured on a GPU before this table existed).

``cuda.conv``: a float32 2-D convolution runs through cuDNN (``cudnn``: its heuristics' algorithm,
exact float32) or as im2col columns times the weight through cuBLAS (``cublas``), each followed
by the epilogue kernel, as jitort's tiled implicit GEMM (``tiled``) or as its direct kernel
(``direct``, one thread per output). Buckets (``kernels.cuda.tunables``): kernel
side x stride x channels per group in and out x images times output plane x groups; the grid
is :data:`CONV_GRID` (stems, 3x3 and 1x1 layers of ResNet-like networks at batch 1 and 8,
strided downsampling, few channels, grouped, depthwise), the other buckets follow the default
rule: the launcher's rule before calibration (``conv.default_algorithm``: tiles where each
output sums at least 16 products and a group has at least 8 output channels, cuDNN or cuBLAS
where they serve, else the tiled kernel; the direct kernel below that).

Both are decided by the launchers when a plan's work is recorded (``kernels.cuda.tunables``,
written by :func:`_apply`), so a calibration reaches the next plans bound without recompiling.
A candidate is timed as its launcher's work, recorded once and replayed on a stream of its
own -- captured as a CUDA graph where the GPU allows, as a plan's calls are -- many times back
to back per timed call, waited for once: what a captured plan pays for it on the GPU, without
the host's cost of a call.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from .kernels.cuda.tunables import CONV_ALGORITHMS, GEMM_ALGORITHMS
from .tuning import Candidate, Choice, _bucket_key, register

#: a timed call replays a candidate's work until it lasts about this long (kernels of a few
#: microseconds are replayed hundreds of times: the host's cost of a call stays out of it)
MIN_CALL_S = 2e-3
#: replays per timed call at most
MAX_REPS = 500
_MODULES = ("blas", "conv", "gemm", "launch", "mathfn", "tunables")


def _replayer(record: Callable[[], None]) -> Callable[[], None]:
    """A no-argument callable that runs the work ``record()`` starts (recorded once, replayed:
    compiled by a first replay, then captured as a CUDA graph where the GPU allows) ``reps``
    times on a stream of its own and waits for it; ``reps`` (an attribute of the callable:
    ``tuning.measure_bucket`` divides by it) makes a call last about :data:`MIN_CALL_S`."""
    import time

    from numba import cuda

    from .cuda_replay import Graph, Launches, graph_support
    from .kernels.cuda.launch import recording
    stream = cuda.stream()
    with recording() as work:
        record()
    engine = Launches(work, stream)
    engine()                       # compiles and loads the kernels
    stream.synchronize()
    if graph_support(stream) is None:
        try:
            engine = Graph(engine, stream)
        except Exception:  # noqa: BLE001 - record by record then, as a plan would run
            pass
    t0 = time.perf_counter()
    engine()
    stream.synchronize()
    once = max(time.perf_counter() - t0, 1e-7)
    reps = int(min(MAX_REPS, max(1, math.ceil(MIN_CALL_S / once))))
    if "simulator" in type(stream).__module__:
        reps = 1                   # the simulator runs kernels as Python threads: once is plenty

    def run():
        for _ in range(reps):
            engine()
        stream.synchronize()
    run.reps = reps
    return run


_VALUES = (np.random.default_rng(0).random(4093) * 2 - 1).astype(np.float32)


def _device(*shape):
    """A float32 device array of ``shape`` elements, values in [-1, 1) (a random block
    repeated: the biggest problems' operands hold tens of millions)."""
    from numba import cuda
    return cuda.to_device(np.resize(_VALUES, int(np.prod(shape))))


# --- cuda.gemm --------------------------------------------------------------------------------

def _gemm_problem(key: tuple) -> dict:
    m, k, n, nb = key
    return {"nb": nb, "m": m, "k": k, "n": n}


def _gemm_bucket(p: dict) -> tuple:
    from .kernels.cuda import tunables
    return tunables.gemm_bucket(p["nb"], p["m"], p["n"], p["k"])


def _gemm_grid() -> list:
    from .kernels.cuda import tunables as t
    single = [(m, k, n, 1) for m in t.ROWS for k in t.DIMS for n in t.DIMS]
    attention = [(m, k, n, 16) for m in (16, 64, 256) for k in (64, 256) for n in (64, 256)]
    return single + attention


def _cublas_serves() -> bool:
    from .kernels.cuda import blas
    return blas.library() is not None


def _gemm_default(p: dict) -> str:
    return "cublas" if _cublas_serves() else "tiled"


def _gemm_prepare(which: str):
    def prepare(p: dict):
        from .kernels.cuda import gemm
        nb, m, k, n = p["nb"], p["m"], p["k"], p["n"]
        a, b, y = _device(nb, m, k), _device(nb if nb > 1 else 1, k, n), _device(nb, m, n)
        if nb == 1:     # a Linear layer: MatMulBias, bias row, no activation
            bias = _device(n)
            return _replayer(lambda: gemm.matmul3d_bias_act(
                a, 0, 0, b, 0, 0, bias, 0, y, 0, 1, m, n, k, 0, 0.0, algo=which))
        return _replayer(lambda: gemm.matmul3d(a, 0, m * k, b, 0, k * n, y, 0, nb, m, n, k,
                                               algo=which))
    return prepare


def _apply(name: str):
    def apply(decisions: dict) -> None:
        from .kernels.cuda import tunables
        entry = decisions.get(name) or {}
        picks = {_bucket_key(text): b["pick"] for text, b in entry.get("buckets", {}).items()}
        tunables.set_decisions(name, picks, entry.get("demoted", ()))
    return apply


CUDA_GEMM = register(Choice(
    name="cuda.gemm",
    doc="float32 product on the GPU: cuBLAS then the epilogue / jitort's tiled kernel, "
        "epilogue fused",
    candidates=tuple(Candidate(name, (lambda p, name=name: name != "cublas" or _cublas_serves()),
                               _gemm_prepare(name)) for name in GEMM_ALGORITHMS),
    bucket=_gemm_bucket, grid=_gemm_grid, problem=_gemm_problem, default=_gemm_default,
    modules=_MODULES, work=lambda p: 2.0 * p["nb"] * p["m"] * p["k"] * p["n"],
    apply=_apply("cuda.gemm"), device="cuda"))


# --- cuda.conv --------------------------------------------------------------------------------

#: (kernel side, stride, channels per group in, out, images x output plane, groups): the
#: buckets ``jitort tune --device cuda`` measures (values: ``kernels.cuda.tunables``' classes)
CONV_GRID = [
    (7, 2, 4, 64, 12544, 1), (7, 2, 4, 64, 50176, 1),              # stems, batch 1 and 8
    (3, 1, 64, 64, 3136, 1), (3, 1, 64, 64, 50176, 1),             # 3x3, 56x56 planes
    (3, 1, 128, 128, 784, 1), (3, 1, 128, 128, 12544, 1),          # 28x28
    (3, 1, 256, 256, 196, 1), (3, 1, 256, 256, 3136, 1),           # 14x14
    (3, 1, 256, 256, 49, 1), (3, 1, 256, 256, 784, 1),             # 7x7
    (1, 1, 64, 256, 3136, 1), (1, 1, 256, 64, 3136, 1),            # 1x1 projections
    (1, 1, 256, 256, 196, 1), (1, 1, 256, 256, 49, 1), (1, 1, 32, 128, 784, 1),
    (1, 2, 64, 128, 784, 1), (3, 2, 64, 128, 784, 1),              # strided downsampling
    (3, 1, 16, 16, 12544, 1),                                      # few channels
    (3, 1, 4, 4, 3136, 32), (3, 1, 32, 32, 784, 4),                # grouped
    (3, 1, 1, 1, 3136, 32), (3, 2, 1, 1, 784, 32), (3, 1, 1, 1, 196, 32),  # depthwise
]


def _conv_problem(key: tuple) -> dict:
    """The bucket's representative convolution: one image, a square output plane of the
    positions' class, padding k // 2 (the output side = the input side / stride)."""
    k, s, cin_g, kout_g, pos, groups = key
    side = max(1, round(math.sqrt(pos)))
    return {"n": 1, "c": cin_g * groups, "kout": kout_g * groups, "k": k, "s": s,
            "h": side * s, "oh": side, "group": groups}


def _conv_geometry(p: dict) -> tuple:
    """(n, c, h, wd, kout, kh, kw, oh, ow, sh, sw, ph, pw) of a problem."""
    k, pad = p["k"], p["k"] // 2
    return (p["n"], p["c"], p["h"], p["h"], p["kout"], k, k, p["oh"], p["oh"], p["s"], p["s"],
            pad, pad)


def _conv_bucket(p: dict) -> tuple:
    from .kernels.cuda import tunables
    n, c, _, _, kout, kh, kw, oh, ow, sh, _, _, _ = _conv_geometry(p)
    return tunables.conv_bucket(n, c, kout, kh, kw, oh, ow, sh, p["group"])


def _conv_applicable(p: dict) -> tuple:
    from .codegen.cuda_ops.conv import MIN_GROUP_KOUT
    from .kernels.cuda import conv
    n, c, h, wd, kout, kh, kw, oh, ow, sh, sw, ph, pw = _conv_geometry(p)
    f32 = np.empty(0, np.float32)
    # the lowering's rule for scratch (columns): not pointwise, and enough channels per group
    col = None if (conv.pointwise(h, wd, kh, kw, oh, ow, sh, sw, ph, pw)
                   or kout // p["group"] < MIN_GROUP_KOUT) else f32
    return conv.algorithms(f32, f32, f32, c, h, wd, kout, kh, kw, oh, ow, sh, sw, ph, pw,
                           p["group"], col, n=n)


def _conv_default(p: dict) -> str:
    from .kernels.cuda import conv
    return conv.default_algorithm(_conv_applicable(p), p["c"], p["kout"], p["k"], p["k"],
                                  p["group"])


def _conv_prepare(which: str):
    def prepare(p: dict):
        from .codegen.cuda_ops.conv import col_images
        from .kernels.cuda import conv
        n, c, h, wd, kout, kh, kw, oh, ow, sh, sw, ph, pw = _conv_geometry(p)
        g = p["group"]
        x, w, b = _device(n, c, h, wd), _device(kout, c // g, kh, kw), _device(kout)
        y = _device(n, kout, oh, ow)
        col, imgs = None, 1
        if which == "cublas" and not conv.pointwise(h, wd, kh, kw, oh, ow, sh, sw, ph, pw):
            per_img = c * kh * kw * oh * ow
            imgs = col_images(n, per_img)
            col = _device(per_img * imgs)
        # a FusedConv's work: bias and ReLU in the epilogue
        return _replayer(lambda: conv.conv2d_bias_add_act(
            x, 0, w, 0, b, 0, y, 0, y, 0, n, c, h, wd, kout, kh, kw, oh, ow, sh, sw, ph, pw, 1,
            1, g, True, False, 1, 0.0, 0.0, col, 0, imgs, algo=which))
    return prepare


def _conv_work(p: dict) -> float:
    return 2.0 * p["n"] * p["kout"] * p["oh"] ** 2 * (p["c"] // p["group"]) * p["k"] ** 2


CUDA_CONV = register(Choice(
    name="cuda.conv",
    doc="float32 convolution on the GPU: cuDNN / im2col + cuBLAS / tiled implicit GEMM / direct",
    candidates=tuple(Candidate(name, (lambda p, name=name: name in _conv_applicable(p)),
                               _conv_prepare(name)) for name in CONV_ALGORITHMS),
    bucket=_conv_bucket, grid=lambda: list(CONV_GRID), problem=_conv_problem,
    default=_conv_default, modules=_MODULES, work=_conv_work, apply=_apply("cuda.conv"),
    device="cuda"))
