"""ONNX LSTM on the GPU (gates i, o, f, c; activations sigmoid, tanh, tanh; layout 0), so a
model's recurrent layers (a CRNN's bidirectional LSTMs) run between its other GPU kernels
without a copy to the host and back.

One launch runs every direction: one block per (direction, batch element) walks the time
steps in order (backwards for a reverse direction; ``Y[t]`` is written at the original ``t``).
Each step has two phases separated by ``syncthreads``: the block's threads stride over the 4H
gate rows, each computing one pre-activation, ``Wb + Rb + W[row] . x[t] + R[row] . h``, into
shared memory; then thread ``j < H`` updates hidden unit ``j`` (its cell state ``c`` stays in
that thread's register for the whole sequence) and writes ``h`` to shared memory and ``Y``.

The input projection ``W x_t`` of every step may come precomputed (``g``: one GEMM over all
steps before the recurrence, which then only adds ``R h`` per step on its sequential path);
without ``g`` the recurrence computes it. ``h`` and the gate row live in shared memory,
whose size is fixed when the kernel compiles: hence the :data:`HMAX` bound on the hidden
size (the lowering leaves larger LSTMs to the CPU backend). Blocks have at least ``H``
threads, so each hidden unit has its own thread.
"""
import math

import numpy as np
from numba import cuda

from .launch import launch

#: the largest hidden size (shared memory, float64: 5 * HMAX * 8 bytes = 20 KiB per block)
HMAX = 512
#: the gate rows' shared buffer: 4 * HMAX
GMAX = 4 * HMAX
#: threads per block at most (>= HMAX: one thread per hidden unit)
MAX_BLOCK = 512


@cuda.jit(device=True)
def _pre(x, xb, w, wb, r, rb, hs, nin, hd, acc):
    """``acc + w[wb:wb+nin] . x[xb:xb+nin] + r[rb:rb+hd] . hs[:hd]``: one gate row."""
    for k in range(nin):
        acc += w[wb + k] * x[xb + k]
    for k in range(hd):
        acc += r[rb + k] * hs[k]
    return acc


def _make(dt):
    """The kernel for one dtype (shared arrays need a dtype known when the kernel compiles)."""
    @cuda.jit
    def kern(x, xo, w, wo, r, ro, bias, bo, h0, h0o, c0, c0o, y, yo, yh, yho, yc, yco, g, go,
             seq, batch, nin, hd, nd, reverse, has_b, has_h0, has_c0, has_y, has_yh, has_yc,
             has_g):
        # one allocation per line: the simulator tells shared arrays apart by source line
        gs = cuda.shared.array(GMAX, dtype=dt)
        hs = cuda.shared.array(HMAX, dtype=dt)
        tid, nt = cuda.threadIdx.x, cuda.blockDim.x
        d = cuda.blockIdx.x // batch
        b = cuda.blockIdx.x - d * batch
        rev = reverse or d == 1
        g4 = 4 * hd
        st = (d * batch + b) * hd  # this (direction, batch) row of h0, c0, Y_h, Y_c
        zero, one = dt(0), dt(1)
        cj = zero
        if tid < hd:
            hs[tid] = h0[h0o + st + tid] if has_h0 else zero
            cj = c0[c0o + st + tid] if has_c0 else zero
        cuda.syncthreads()
        for s in range(seq):
            t = seq - 1 - s if rev else s
            xb = xo + (t * batch + b) * nin
            gb = go + ((d * seq + t) * batch + b) * g4  # this step's row of g
            for q in range(tid, g4, nt):
                acc = zero
                if has_b:
                    acc = bias[bo + d * 2 * g4 + q] + bias[bo + d * 2 * g4 + g4 + q]
                if has_g:
                    acc += g[gb + q]
                gs[q] = _pre(x, xb, w, wo + (d * g4 + q) * nin, r, ro + (d * g4 + q) * hd,
                             hs, 0 if has_g else nin, hd, acc)
            cuda.syncthreads()
            if tid < hd:
                ig = one / (one + math.exp(-gs[tid]))
                og = one / (one + math.exp(-gs[hd + tid]))
                fg = one / (one + math.exp(-gs[2 * hd + tid]))
                cj = fg * cj + ig * math.tanh(gs[3 * hd + tid])
                hj = og * math.tanh(cj)
                hs[tid] = hj
                if has_y:
                    y[yo + ((t * nd + d) * batch + b) * hd + tid] = hj
            cuda.syncthreads()
        if tid < hd:
            if has_yh:
                yh[yho + st + tid] = hs[tid]
            if has_yc:
                yc[yco + st + tid] = cj
    return kern


_KERNELS = {np.dtype(t): _make(t) for t in (np.float32, np.float64)}


def block_for(hd: int) -> int:
    """Threads per block for hidden size ``hd``: a power of two >= 32, >= 4H up to
    :data:`MAX_BLOCK` (one thread per gate row where it fits), never below ``hd``."""
    nt = 32
    while nt < 4 * hd and nt < MAX_BLOCK:
        nt *= 2
    return nt


def lstm(x, xo, w, wo, r, ro, bias, bo, h0, h0o, c0, c0o, y, yo, yh, yho, yc, yco,
         seq, batch, nin, hd, nd, reverse, has_b, has_h0, has_c0, has_y, has_yh, has_yc,
         g=None, go=0):
    """ONNX LSTM, layout 0, default activations, no clip, peepholes or sequence_lens.

    x (seq, batch, nin); w (nd, 4hd, nin); r (nd, 4hd, hd); bias (nd, 8hd) = Wb then Rb;
    h0, c0 (nd, batch, hd); y (seq, nd, batch, hd); yh, yc (nd, batch, hd). ``nd`` 2:
    bidirectional (direction 1 runs backwards); ``reverse``: a one-direction LSTM running
    backwards. An absent operand or output (``has_*`` False) may be any array of the dtype;
    it is not touched. ``g`` (nd, seq, batch, 4hd), when given: ``x @ w[d].T`` for every
    direction, computed before (the recurrence then reads it instead of ``w`` and ``x``).
    Needs ``hd <= HMAX``."""
    if not (has_y or has_yh or has_yc) or nd * batch * hd == 0:
        return
    if hd > HMAX:
        raise ValueError(f"LSTM hidden size {hd} > {HMAX}")
    launch(_KERNELS[x.dtype], nd * batch, block_for(hd), x, xo, w, wo, r, ro, bias, bo,
           h0, h0o, c0, c0o, y, yo, yh, yho, yc, yco, x if g is None else g, go, seq, batch,
           nin, hd, nd, bool(reverse), bool(has_b), bool(has_h0), bool(has_c0), bool(has_y),
           bool(has_yh), bool(has_yc), g is not None)
