"""Batched GEMM for MatMul, MatMulBias and Gemm: cuBLAS where it serves, else jitort's own.

Operands are addressed through strides, so a transposed or batch-broadcast operand needs no
copy (a batch stride of 0 broadcasts; Gemm's C broadcasts with strides of 0). Where cuBLAS
serves (a real GPU with CuPy; kernels/cuda/blas.py) the product, alpha included, is one
strided-batched cuBLAS call and one elementwise kernel applies C, the bias and the activation;
otherwise one kernel of 16x16 tiles staged through shared memory does all of it. Where both
serve, the choice ``cuda.gemm`` (:func:`algorithm`) says which: calibrated per shape bucket on
the GPU (``jitort tune --device cuda``), else cuBLAS.
"""
import numpy as np
from numba import cuda

from . import blas, tunables
from .launch import call, launch
from .mathfn import act_for, compute_type, grid1

TILE = 16


def _make(dt):
    """The kernel for one dtype (shared arrays need a dtype known when the kernel compiles;
    float16 operands are staged and accumulated in float32)."""
    dt = compute_type(dt)
    act = act_for(dt)
    zero = dt(0)  # the accumulator's start, typed (an int would promote it to float64)

    @cuda.jit
    def kern(a, ao, sab, asi, asp, b, bo, sbb, bsp, bsj, c, co, csi, csj, bias, bio,
             y, yo, m, n, k, alpha, beta, has_c, has_bias, code, act_alpha, act_beta):
        # one allocation per line: the simulator tells shared arrays apart by source line
        sa = cuda.shared.array((TILE, TILE), dtype=dt)
        sb = cuda.shared.array((TILE, TILE), dtype=dt)
        v = _product(a, ao, sab, asi, asp, b, bo, sbb, bsp, bsj, c, co, csi, csj, bias, bio,
                     m, n, k, alpha, beta, has_c, has_bias, sa, sb, zero)
        i = cuda.blockIdx.y * TILE + cuda.threadIdx.y
        j = cuda.blockIdx.x * TILE + cuda.threadIdx.x
        if i < m and j < n:
            y[yo + (cuda.blockIdx.z * m + i) * n + j] = act(v, code, act_alpha, act_beta)
    return kern


@cuda.jit(device=True)
def _product(a, ao, sab, asi, asp, b, bo, sbb, bsp, bsj, c, co, csi, csj, bias, bio,
             m, n, k, alpha, beta, has_c, has_bias, sa, sb, zero):
    """``alpha * (A @ B) + beta * C + bias`` at this thread's (i, j) of batch ``blockIdx.z``
    (the bare accumulator outside the matrix), accumulated from ``zero`` (its type the compute
    type); every thread reaches every ``syncthreads``."""
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    j = cuda.blockIdx.x * TILE + tx
    i = cuda.blockIdx.y * TILE + ty
    z = cuda.blockIdx.z
    abase, bbase = ao + z * sab, bo + z * sbb
    acc = zero
    for t0 in range(0, k, TILE):
        p = t0 + tx
        sa[ty, tx] = a[abase + i * asi + p * asp] if (i < m and p < k) else zero
        p = t0 + ty
        sb[ty, tx] = b[bbase + p * bsp + j * bsj] if (p < k and j < n) else zero
        cuda.syncthreads()
        for q in range(TILE):
            acc += sa[ty, q] * sb[q, tx]
        cuda.syncthreads()
    if i >= m or j >= n:
        return acc
    v = alpha * acc
    if has_c:
        v += beta * c[co + i * csi + j * csj]
    if has_bias:
        v += bias[bio + j]
    return v


EPI_BLOCK = 128


def _make_epilogue(ft):
    act = act_for(ft)

    @cuda.jit
    def _epilogue_k(y, yo, c, co, csb, csi, csj, bias, bio, m, n, total, alpha, beta, has_c,
                    has_bias, bias_rows, code, act_alpha, act_beta):
        """``y = act(alpha * y + beta * C + bias)`` over (batches, m, n), after cuBLAS's
        product (the same order of operations as the tiled kernel's store); C's batch stride
        ``csb``; the bias indexed by column (a GEMM's) or by row (``bias_rows``: a
        convolution's channels). Scalars in the compute type (float32 for a float16 ``y``:
        one rounding, at the store)."""
        i = cuda.grid(1)
        if i >= total:
            return
        j = i % n
        row = (i // n) % m
        v = alpha * y[yo + i]
        if has_c:
            v += beta * c[co + (i // (m * n)) * csb + row * csi + j * csj]
        if has_bias:
            v += bias[bio + (row if bias_rows else j)]
        y[yo + i] = act(v, code, act_alpha, act_beta)
    return _epilogue_k


#: the epilogue kernel per compute type
_EPILOGUES = {np.dtype(t): _make_epilogue(t) for t in (np.float32, np.float64)}


def epilogue_kernel(dtype):
    """The epilogue kernel a ``dtype`` output runs (float16 computes in float32)."""
    return _EPILOGUES[np.dtype(compute_type(dtype))]


def epilogue(y, yo, c, co, csb, csi, csj, bias, bio, nb, m, n, alpha, beta, has_c, has_bias,
             bias_rows, code, act_alpha, act_beta):
    """The elementwise epilogue of a cuBLAS product (see ``_make_epilogue``); nothing when it
    would change nothing."""
    total = nb * m * n
    if total and (has_c or has_bias or code or alpha != 1):
        dt = compute_type(y.dtype)
        launch(epilogue_kernel(y.dtype), grid1(total, EPI_BLOCK), EPI_BLOCK, y, yo, c, co, csb,
               csi, csj, bias, bio, m, n, total, dt(alpha), dt(beta), has_c, has_bias,
               bias_rows, code, dt(act_alpha), dt(act_beta))


ALGORITHMS = tunables.GEMM_ALGORITHMS


def algorithm(dtype, nb, m, n, k, blas_args) -> str:
    """The choice ``cuda.gemm`` for ``nb`` products of (m, k) @ (k, n): ``cublas`` (one
    strided-batched cuBLAS call, then the epilogue kernel where there is one) where cuBLAS can
    take the operands (``blas_args`` not None), or ``tiled`` (jitort's kernel, epilogue fused):
    calibrated on the GPU for float32 (``kernels.cuda.tunables``), else cuBLAS wherever it
    serves."""
    can = ALGORITHMS if blas_args is not None else ("tiled",)
    if dtype != np.float32:
        return can[0]
    return tunables.decide("cuda.gemm", tunables.gemm_bucket(nb, m, n, k), can, can[0])


def _run(a, ao, sab, asi, asp, b, bo, sbb, bsp, bsj, c, co, csi, csj, bias, bio,
         y, yo, nb, m, n, k, alpha, beta, has_c, has_bias, code, act_alpha, act_beta=0.0,
         algo=None):
    if nb * m * n == 0:
        return
    dt = compute_type(y.dtype)
    args = None
    if blas.library() is not None:
        args = blas.strided(a, ao, sab, asi, asp, b, bo, sbb, bsp, bsj, y, yo, nb, m, n, k, alpha)
    if algo is None:
        algo = algorithm(y.dtype, nb, m, n, k, args)
    if algo == "cublas":
        if args is None:
            raise ValueError("cuBLAS cannot take this product here")
        call(blas.gemm_strided, *args)
        epilogue(y, yo, c, co, 0, csi, csj, bias, bio, nb, m, n, 1.0, beta, has_c, has_bias,
                 False, code, act_alpha, act_beta)
        return
    if algo != "tiled":
        raise ValueError(f"unknown product algorithm {algo!r}; known: {ALGORITHMS}")
    grid = ((n + TILE - 1) // TILE, (m + TILE - 1) // TILE, nb)
    launch(_KERNELS[y.dtype], grid, (TILE, TILE), a, ao, sab, asi, asp, b, bo, sbb, bsp, bsj, c,
           co, csi, csj, bias, bio, y, yo, m, n, k, dt(alpha), dt(beta), has_c, has_bias, code,
           dt(act_alpha), dt(act_beta))


def matmul3d(a, ao, sab, b, bo, sbb, y, yo, nb, m, n, k, algo=None):
    """``y[z] = a[z] @ b[z]`` for row-major (m, k) and (k, n) matrices; ``sab``/``sbb`` are the
    batch strides in elements (0: the same matrix for every batch). ``algo``: one of
    :data:`ALGORITHMS` (calibration names it), else :func:`algorithm`'s pick."""
    _run(a, ao, sab, k, 1, b, bo, sbb, n, 1, y, 0, 0, 0, y, 0, y, yo, nb, m, n, k,
         1.0, 0.0, False, False, 0, 0.0, algo=algo)


def matmul3d_bias_act(a, ao, sab, b, bo, sbb, bias, bio, y, yo, nb, m, n, k, code, act_alpha,
                      act_beta=0.0, algo=None):
    """``matmul3d`` plus a bias row and an activation (codes and params: the ``act`` of
    ``mathfn.activations``)."""
    _run(a, ao, sab, k, 1, b, bo, sbb, n, 1, y, 0, 0, 0, bias, bio, y, yo, nb, m, n, k,
         1.0, 0.0, False, True, code, act_alpha, act_beta, algo=algo)


def gemm(a, ao, b, bo, c, co, csi, csj, y, yo, m, n, k, alpha, beta, trans_a, trans_b, has_c):
    """ONNX Gemm: ``alpha * op(a) @ op(b) + beta * c`` with c broadcast through its strides."""
    asi, asp = (1, m) if trans_a else (k, 1)
    bsp, bsj = (1, k) if trans_b else (n, 1)
    _run(a, ao, 0, asi, asp, b, bo, 0, bsp, bsj, c, co, csi, csj, y, 0, y, yo, 1, m, n, k,
         alpha, beta, has_c, False, 0, 0.0)


_KERNELS = {np.dtype(t): _make(t) for t in (np.float16, np.float32, np.float64)}
