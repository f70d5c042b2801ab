#!/usr/bin/env python
"""The shape sweep behind ``kernels/cpu/conv_implicit.py``'s rule (``implicit_wins``): each
convolution (float32, batch 1, bias + Relu) timed as the implicit gemm and as im2col + BLAS
(``conv.conv2d_bias_act``, what it replaces), alternating in one process; prints each case's
taps per output K = C*KH*KW and the time ratio. ``--winograd``: 3x3 stride-1 layers against
``winograd.conv3x3_winograd`` instead.

    NUMBA_NUM_THREADS=1 python scripts/sweeps/compare_conv_implicit.py [--reps 5] [--winograd]
"""
import argparse
import time

import numba
import numpy as np

from jitort.kernels.cpu import conv as CV
from jitort.kernels.cpu import conv_implicit as CI
from jitort.kernels.cpu import winograd as WG

# (C, M, K, stride, pad, plane): stems (3 channels, 3x3-7x7, stride 2), small-channel layers,
# and layers with many taps where im2col should keep winning
CASES = [(3, 64, 3, 2, 1, 224), (3, 32, 3, 2, 1, 224), (3, 64, 7, 2, 3, 224),
         (3, 24, 3, 2, 1, 224), (3, 16, 3, 1, 1, 112), (1, 32, 3, 1, 1, 64),
         (4, 32, 3, 2, 1, 112), (8, 32, 3, 1, 1, 56), (3, 64, 3, 2, 0, 224),
         (16, 64, 3, 1, 1, 55), (8, 16, 3, 2, 1, 112), (3, 96, 7, 2, 0, 224),
         (3, 32, 5, 2, 2, 224), (32, 64, 3, 2, 1, 56), (64, 128, 3, 2, 1, 28),
         (16, 16, 3, 1, 1, 112)]
# 3x3 stride-1 pad-1 layers Winograd takes: (C, M, plane)
WINO_CASES = [(16, 64, 55), (32, 128, 27), (48, 192, 13), (64, 256, 13), (8, 32, 56),
              (16, 16, 112), (24, 24, 56), (16, 48, 28)]


def _time(runs, reps):
    best = {name: [] for name in runs}
    for _ in range(reps):
        for name, f in runs.items():
            ts = []
            for _ in range(10):
                t = time.perf_counter()
                f()
                ts.append(time.perf_counter() - t)
            best[name].append(np.median(ts))
    return {name: min(v) * 1e6 for name, v in best.items()}


def winograd_sweep(reps):
    rng = np.random.default_rng(0)
    for c, m, h in WINO_CASES:
        x = rng.standard_normal((1, c, h, h)).astype(np.float32)
        w = rng.standard_normal((m, c, 3, 3)).astype(np.float32)
        b = rng.standard_normal(m).astype(np.float32)
        y1 = np.empty((1, m, h, h), np.float32)
        y2 = np.empty_like(y1)
        tile = WG.winograd_tile(c, m, h, h)
        u = WG.winograd_weights(w, tile)
        s1 = np.empty(WG.winograd_scratch_elems(c, m, h, h, 1, tile), np.float32)
        s2 = np.empty(CI.implicit_scratch_elems(1, c, h, h, 3, 3, h, h, 1, 1, 1, 1), np.float32)
        pk = CI.pack_weights(w)
        runs = {
            "winograd": lambda: WG.conv3x3_winograd(x, u, b, y1, y1, s1, 1, 1, True, False, 1,
                                                    0.0, 0.0),
            "implicit": lambda: CI.conv2d_implicit(x, pk, 3, 3, b, y2, y2, s2, 1, 1, 1, 1, 1, 1,
                                                   True, False, 1, 0.0, 0.0),
        }
        for f in runs.values():
            f()
        np.testing.assert_allclose(y2, y1, rtol=1e-3, atol=1e-3)
        t = _time(runs, reps)
        print(f"C {c:3d} M {m:3d} 3x3/1 {h}x{h}  K {9 * c:4d}  winograd F{tile} "
              f"{t['winograd']:8.0f} us  implicit {t['implicit']:8.0f} us  implicit/winograd "
              f"{t['implicit'] / t['winograd']:5.2f}  rule: "
              f"{'implicit' if CI.implicit_wins(c, 3, 3, h, h, True) else 'winograd'}",
              flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--winograd", action="store_true", help="3x3 stride-1 layers vs Winograd")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    nt = numba.get_num_threads()
    print(f"{nt} thread(s); min over {args.reps} alternating rounds of the median of 10 calls")
    if args.winograd:
        winograd_sweep(args.reps)
        return
    for c, m, k, s, p, h in CASES:
        x = rng.standard_normal((1, c, h, h)).astype(np.float32)
        w = rng.standard_normal((m, c, k, k)).astype(np.float32)
        b = rng.standard_normal(m).astype(np.float32)
        oh = (h + 2 * p - k) // s + 1
        y1 = np.empty((1, m, oh, oh), np.float32)
        y2 = np.empty_like(y1)
        col = np.empty(CV.conv2d_scratch_elems(c, k, k, oh, oh, 1, nt), np.float32)
        scr = np.empty(CI.implicit_scratch_elems(1, c, h, h, k, k, oh, oh, s, s, 1, 1),
                       np.float32)
        pk = CI.pack_weights(w)
        runs = {
            "im2col": lambda: CV.conv2d_bias_act(x, w, b, y1, col, s, s, p, p, 1, 1, 1, True,
                                                 1, 0.0, 0.0),
            "implicit": lambda: CI.conv2d_implicit(x, pk, k, k, b, y2, y2, scr, s, s, p, p, 1,
                                                   1, True, False, 1, 0.0, 0.0),
        }
        for f in runs.values():
            f()
        np.testing.assert_allclose(y2, y1, rtol=2e-4, atol=2e-4)
        t = _time(runs, args.reps)
        a, i = t["im2col"], t["implicit"]
        print(f"C {c:3d} M {m:3d} {k}x{k}/{s} pad {p} {h}x{h}  K {c * k * k:4d}  "
              f"im2col {a:8.0f} us  implicit {i:8.0f} us  implicit/im2col {i / a:5.2f}  "
              f"rule: {'implicit' if CI.implicit_wins(c, k, k, oh, oh) else 'im2col'}",
              flush=True)


if __name__ == "__main__":
    main()
