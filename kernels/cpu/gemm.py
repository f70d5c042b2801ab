"""Matrix multiplication kernels (MatMul, Gemm, MatMul + bias + activation).

All arrays are C-contiguous float32 or float64 (one dtype per call). The heavy lifting is
``np.dot`` on 2-D contiguous (or transposed-view) operands, which Numba lowers to BLAS
gemm; BLAS threads itself, so these kernels are not ``parallel=True``.
Activation codes are those of ``epilogue`` (0 none, 1 relu, 2 gelu, 3 sigmoid, 4 tanh,
5 leaky_relu(alpha_act), 6 clip(alpha_act, beta_act)).
"""
import numpy as np
from numba import njit

from .epilogue import (ACT_CLIP, ACT_GELU, ACT_LEAKY_RELU, ACT_NONE, ACT_RELU,  # noqa: F401
                       ACT_SIGMOID, ACT_TANH, bias_act_2d)

# Output elements per row block of the fused epilogue (~256 KB of float32, stays in L2).
_EPI_BLOCK_ELEMS = 65536
_EPI_MIN_ROWS = 64


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _dot2d(a2, b2, out2):
    """out2 (M, N) = a2 (M, K) @ b2 (K, N); any of M, N, K may be 0."""
    m, n = out2.shape
    if m == 0 or n == 0:
        return
    if a2.shape[1] == 0:
        out2[:, :] = 0
        return
    np.dot(a2, b2, out2)


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def matmul3d(a, b, out):
    """Batched matmul: out[i] = a[i or 0] @ b[i or 0].

    a (Ba, M, K), b (Bb, K, N), out (Bo, M, N) with Ba in {1, Bo} and Bb in {1, Bo}.
    When Ba == Bo and Bb == 1 a single (Bo*M, K) @ (K, N) GEMM is issued.
    """
    bo, m, n = out.shape
    ba = a.shape[0]
    bb = b.shape[0]
    k = a.shape[2]
    if bo == 0:
        return
    if bb == 1 and ba == bo:
        _dot2d(a.reshape(bo * m, k), b[0], out.reshape(bo * m, n))
        return
    for i in range(bo):
        ia = 0 if ba == 1 else i
        ib = 0 if bb == 1 else i
        _dot2d(a[ia], b[ib], out[i])


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _dot_bias_act_2d(a2, b2, bias, out2, act, alpha_act, beta_act):
    """out2 = act(a2 @ b2 + bias), computed in row blocks so the epilogue hits cache."""
    m, n = out2.shape
    if m == 0 or n == 0:
        return
    rb = max(_EPI_MIN_ROWS, _EPI_BLOCK_ELEMS // n)
    for r0 in range(0, m, rb):
        r1 = min(m, r0 + rb)
        ob = out2[r0:r1]
        _dot2d(a2[r0:r1], b2, ob)
        if bias.shape[0] > 0 or act != ACT_NONE:
            bias_act_2d(ob, bias, act, alpha_act, beta_act)


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def matmul3d_bias_act(a, b, bias, out, act, alpha_act, beta_act):
    """out[i] = act(a[i or 0] @ b[i or 0] + bias).

    Shapes as ``matmul3d``; ``bias`` is 1-D (N,) or length 0 for no bias. ``act`` is an
    activation code (module docstring); ``alpha_act``/``beta_act`` are its float params
    (leaky slope; clip min/max), ignored by other codes.
    """
    bo, m, n = out.shape
    ba = a.shape[0]
    bb = b.shape[0]
    k = a.shape[2]
    if bo == 0:
        return
    if bb == 1 and ba == bo:
        _dot_bias_act_2d(a.reshape(bo * m, k), b[0], bias, out.reshape(bo * m, n),
                         act, alpha_act, beta_act)
        return
    for i in range(bo):
        ia = 0 if ba == 1 else i
        ib = 0 if bb == 1 else i
        _dot_bias_act_2d(a[ia], b[ib], bias, out[i], act, alpha_act, beta_act)


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _gemm_dot(a, b, out, trans_a, trans_b):
    """out = op(a) @ op(b) with transposes passed to BLAS as views (K > 0, M, N > 0)."""
    if trans_a and trans_b:
        np.dot(a.T, b.T, out)
    elif trans_a:
        np.dot(a.T, b, out)
    elif trans_b:
        np.dot(a, b.T, out)
    else:
        np.dot(a, b, out)


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def gemm(a, b, c, out, alpha, beta, trans_a, trans_b, has_c):
    """ONNX Gemm: out (M, N) = alpha * op(a) @ op(b) + beta * c.

    a is (M, K), or (K, M) when trans_a; b is (K, N), or (N, K) when trans_b.
    c is 2-D (Mc, Nc) with Mc in {1, M}, Nc in {1, N} (broadcast); ignored unless has_c
    (pass a (1, 1) dummy then). alpha, beta are floats; trans_a, trans_b, has_c bools/ints.
    """
    m, n = out.shape
    k = a.shape[0] if trans_a else a.shape[1]
    if m == 0 or n == 0:
        return
    t = out.dtype.type
    al = t(alpha)
    be = t(beta)
    if k == 0:
        out[:, :] = 0
    else:
        _gemm_dot(a, b, out, trans_a, trans_b)
    use_c = has_c and be != 0
    if al == 1 and not use_c:
        return
    mc, nc = c.shape
    for i in range(m):
        row = out[i]
        if al != 1:
            for j in range(n):
                row[j] *= al
        if use_c:
            crow = c[0] if mc == 1 else c[i]
            if nc == 1:
                cv = be * crow[0]
                for j in range(n):
                    row[j] += cv
            else:
                for j in range(n):
                    row[j] += be * crow[j]
