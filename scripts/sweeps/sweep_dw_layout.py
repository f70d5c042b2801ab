#!/usr/bin/env python
"""The sweep behind ``layout.DW_MAX_PLANE`` / ``DW_MIN_CHANNELS``: one-depthwise models (bias,
"same" padding) compiled twice, the depthwise convolution channels-last (with its two layout
transposes) and NCHW, on 28x28 and 56x56 outputs.

    python scripts/sweeps/sweep_dw_layout.py [--threads 1] [--calls 400]

Per shape both models are compiled in this process (``layout.DW_MAX_PLANE`` set before each
compile: 0 keeps the convolution NCHW, 10**9 with no channel condition lets the pass take
it), then timed twice each in
turn (median of ``--calls`` calls, the best of the two rounds); prints nhwc / nchw and what
the committed rule picks. The sixth session's ``scripts/sweeps/compare_conv_layouts.py`` times the
kernels alone, without the transposes.
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # scripts/: compare_model, compare_conv_shapes
from compare_conv_shapes import one_conv  # noqa: E402

#: (channels, input plane, kernel, stride)
CASES = [(16, 28, 3, 1), (32, 28, 3, 1), (48, 28, 3, 1), (72, 28, 3, 1), (72, 28, 5, 1),
         (96, 28, 5, 1), (144, 28, 3, 1), (192, 28, 3, 1), (240, 28, 5, 1),
         (32, 56, 3, 2), (64, 56, 3, 2), (72, 56, 3, 2), (96, 56, 5, 2), (144, 56, 3, 2),
         (144, 56, 5, 2), (240, 56, 5, 2),
         (48, 56, 3, 1), (96, 56, 3, 1), (144, 56, 5, 1)]


def _time(cm, feeds, calls):
    for _ in range(20):
        cm.run(None, feeds)
    ts = []
    for _ in range(calls):
        t = time.perf_counter()
        cm.run(None, feeds)
        ts.append(time.perf_counter() - t)
    return float(np.median(ts))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--calls", type=int, default=400)
    a = ap.parse_args()
    import jitort
    from jitort.passes import layout
    rule = (layout.DW_MAX_PLANE, layout.DW_MIN_CHANNELS, layout.DW_LANES)
    for c, h, k, s in CASES:
        m = one_conv((1, c, h, h), (c, 1, k, k), (s, s), [(k - 1) // 2] * 4, c, (1, 1), 0)
        x = np.random.default_rng(0).standard_normal((1, c, h, h)).astype(np.float32)
        cms = {}
        for mode, limit in (("nchw", 0), ("nhwc", 10 ** 9)):
            layout.DW_MAX_PLANE = limit           # (nhwc: any channel count, any stride)
            layout.DW_MIN_CHANNELS, layout.DW_LANES = ({1: 1, 2: 1}, 1) if limit else rule[1:]
            cms[mode] = jitort.compile(m, threads=a.threads, tiered=False)
        layout.DW_MAX_PLANE, layout.DW_MIN_CHANNELS, layout.DW_LANES = rule
        feeds = {cms["nchw"].input_names[0]: x}
        best = {k_: min(_time(cm, feeds, a.calls) for _ in range(2)) for k_, cm in cms.items()}
        oh = (h + 2 * ((k - 1) // 2) - k) // s + 1
        print(f"{c:4d}ch {h}x{h} {k}x{k}/{s} -> {oh}x{oh}: nchw {best['nchw'] * 1e6:7.1f} us  "
              f"nhwc {best['nhwc'] * 1e6:7.1f} us  nhwc/nchw {best['nhwc'] / best['nchw']:.2f}"
              f"  rule: {_picks(layout, c, oh, s)}", flush=True)


def _picks(layout, c, oh, s):
    """What the committed rule does with this depthwise layer (plane above MAX_PLANE)."""
    if oh * oh <= layout.MAX_PLANE:
        return "nhwc"
    need = layout.DW_MIN_CHANNELS.get(s)
    ok = (oh * oh <= layout.DW_MAX_PLANE and need is not None and c >= need
          and c % layout.DW_LANES == 0)
    return "nhwc" if ok else "nchw"


if __name__ == "__main__":
    main()
