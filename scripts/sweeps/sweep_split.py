#!/usr/bin/env python
"""The size sweeps behind two "split over the threads from N elements" rules: each kernel run
on one thread (its serial entry) and split (its ``_par`` entry, Numba at 2 threads),
alternating in one process; prints the times, split/serial, and what the rule picks.

* DynamicQuantizeLinear (``jitort/codegen/lowerings/quant.py``, ``_DYN_PAR_ELEMS``):
  ``quant.dynamic_quantize`` vs ``dynamic_quantize_par`` over 16K-256K floats;
* Transpose of the last two axes (``jitort/codegen/lowerings/data.py``,
  ``_TRANSPOSE_PAR_ELEMS``): ``transpose.transpose_last2`` vs ``transpose_last2_par`` over
  (rows, columns) shapes of 24K-800K floats, NCHW <-> NHWC and K^T forms.

    python scripts/sweeps/sweep_split.py [--reps 5]
"""
import argparse

import numba
import numpy as np

from jitort.codegen.lowerings.data import _TRANSPOSE_PAR_ELEMS
from jitort.codegen.lowerings.quant import _DYN_PAR_ELEMS
from jitort.kernels.cpu import quant as Q
from jitort.kernels.cpu import transpose as T

# (scripts/ is the script's directory on sys.path: the timing loop of the conv sweep)
from compare_conv_implicit import _time

DQL_SIZES = [1 << 14, 24576, 1 << 15, 49152, 1 << 16, 98304, 1 << 17, 1 << 18]
TRANSPOSE_SHAPES = [(4, 128, 64), (1, 196, 160), (1, 64, 784), (12, 128, 64), (1, 196, 480),
                    (1, 480, 196), (1, 64, 3136), (1, 3136, 64),
                    (1, 96, 3136), (1, 3136, 96), (1, 256, 784), (1, 1024, 768)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
    rng = np.random.default_rng(0)
    print(f"{numba.get_num_threads()} threads")
    for n in DQL_SIZES:
        x = rng.standard_normal(n).astype(np.float32)
        outs = [(np.empty(n, np.uint8), np.empty(1, np.float32), np.empty(1, np.uint8))
                for _ in range(2)]
        runs = {"serial": lambda: Q.dynamic_quantize(x, *outs[0]),
                "split": lambda: Q.dynamic_quantize_par(x, *outs[1])}
        t = _time(runs, args.reps)
        assert all(np.array_equal(a, b) for a, b in zip(*outs))
        print(f"DynamicQuantizeLinear {n:7d}  serial {t['serial']:7.1f} us  split "
              f"{t['split']:7.1f} us  split/serial {t['split'] / t['serial']:4.2f}  rule: "
              f"{'split' if n >= _DYN_PAR_ELEMS else 'serial'}", flush=True)
    for shape in TRANSPOSE_SHAPES:
        x = rng.standard_normal(shape).astype(np.float32)
        ys = [np.empty((shape[0], shape[2], shape[1]), np.float32) for _ in range(2)]
        runs = {"serial": lambda: T.transpose_last2(x, ys[0]),
                "split": lambda: T.transpose_last2_par(x, ys[1])}
        t = _time(runs, args.reps)
        assert np.array_equal(ys[0], ys[1])
        print(f"Transpose {str(shape):16s} {x.size:7d}  serial {t['serial']:7.1f} us  split "
              f"{t['split']:7.1f} us  split/serial {t['split'] / t['serial']:4.2f}  rule: "
              f"{'split' if x.size >= _TRANSPOSE_PAR_ELEMS else 'serial'}", flush=True)


if __name__ == "__main__":
    main()
