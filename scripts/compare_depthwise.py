#!/usr/bin/env python
"""Depthwise convolutions, jitort against onnxruntime, calls interleaved in one process.

    python scripts/compare_depthwise.py [--threads 1] [--runs 300]

Each case is a one-node Conv model (group = channels, bias, "same" padding) compiled by
``jitort.compile`` (tiering off) and run by onnxruntime at the same thread count (the session
of ``compare_model.py``); outputs are compared, then the two engines' calls alternate
(``compare_model.alternate``, ``--runs`` pairs after 10 of warm-up) and the medians are
printed with their ratio. Interleaving keeps a shared host's slow phases from landing on one
engine only, which the pytest-benchmark sweep (one engine's rounds, then the other's) does
not.
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_model import alternate, ort_session  # noqa: E402

#: (channels, plane, kernel, stride): MobileNet / EfficientNet / ConvNeXt depthwise layers
CASES = [(96, 56, 7, 1), (384, 14, 7, 1), (32, 112, 5, 1), (144, 56, 5, 1), (240, 28, 5, 1),
         (144, 56, 5, 2), (32, 112, 5, 2), (144, 56, 3, 1), (32, 112, 3, 2)]


def _model(c, h, k, s):
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(1)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, h])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    w = numpy_helper.from_array(rng.standard_normal((c, 1, k, k)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "b")
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], group=c, kernel_shape=[k, k],
                            strides=[s, s], pads=[(k - 1) // 2] * 4)
    return helper.make_model(helper.make_graph([node], "g", [x], [y], initializer=[w, b]),
                             opset_imports=[helper.make_opsetid("", 17)])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=500)
    a = ap.parse_args()
    import jitort
    for c, h, k, s in CASES:
        m = _model(c, h, k, s)
        cm = jitort.compile(m, threads=a.threads, tiered=False)
        sess = ort_session(m.SerializeToString(), a.threads)
        feeds = {"x": np.random.default_rng(0).standard_normal((1, c, h, h)).astype(np.float32)}
        np.testing.assert_allclose(cm.run(None, feeds)[0], sess.run(None, feeds)[0],
                                   rtol=1e-4, atol=1e-4)
        tj, to = alternate(lambda: cm.run(None, feeds), lambda: sess.run(None, feeds),
                           a.runs, 10)
        print(f"depthwise {k}x{k}/{s} {c}ch {h}x{h}: jitort {tj * 1e6:8.1f} us  onnxruntime "
              f"{to * 1e6:8.1f} us  ratio {tj / to:.3f}", flush=True)

if __name__ == "__main__":
    main()
