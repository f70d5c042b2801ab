#!/usr/bin/env python
"""Depthwise convolutions, jitort against onnxruntime, calls interleaved in one process.

    python scripts/sweeps/compare_depthwise.py [--threads 1] [--runs 300]

Each case is a one-node Conv model (group = channels, bias, "same" padding;
``compare_conv_shapes.one_conv``) compiled by ``jitort.compile`` (tiering off) and run by
onnxruntime at the same thread count (``compare_conv_shapes.time_conv``); outputs are
compared, then the two engines' calls alternate (``compare_model.alternate``, ``--runs`` pairs
after 10 of warm-up) and the medians are printed with their ratio. Interleaving keeps a shared host's slow phases from landing on one
engine only, which the pytest-benchmark sweep (one engine's rounds, then the other's) does
not.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # scripts/: compare_model, compare_conv_shapes
from compare_conv_shapes import one_conv, time_conv  # noqa: E402

#: (channels, plane, kernel, stride): MobileNet / EfficientNet / ConvNeXt depthwise layers
CASES = [(96, 56, 7, 1), (384, 14, 7, 1), (32, 112, 5, 1), (144, 56, 5, 1), (240, 28, 5, 1),
         (144, 56, 5, 2), (32, 112, 5, 2), (144, 56, 3, 1), (32, 112, 3, 2)]


def _model(c, h, k, s):
    """One depthwise Conv (bias, "same" padding) on a (1, c, h, h) input."""
    return one_conv((1, c, h, h), (c, 1, k, k), (s, s), [(k - 1) // 2] * 4, c, (1, 1), 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=500)
    a = ap.parse_args()
    for c, h, k, s in CASES:
        tj, to, _ = time_conv(_model(c, h, k, s), (1, c, h, h), a.threads, a.runs, 1e-4)
        print(f"depthwise {k}x{k}/{s} {c}ch {h}x{h}: jitort {tj * 1e6:8.1f} us  onnxruntime "
              f"{to * 1e6:8.1f} us  ratio {tj / to:.3f}", flush=True)


if __name__ == "__main__":
    main()
