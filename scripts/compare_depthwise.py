#!/usr/bin/env python
"""Depthwise convolutions, jitort against onnxruntime, calls interleaved in one process.

    python scripts/compare_depthwise.py [--threads 1] [--runs 300]

Each case is a one-node Conv model (group = channels, bias, "same" padding) compiled by
``jitort.compile`` (tiering off) and run by onnxruntime at the same thread count; outputs are
compared, then the two engines' calls alternate in two rounds of ``--runs`` each (jitort,
onnxruntime, jitort, onnxruntime) and the better median of each engine is printed with the
ratio. Interleaving keeps a shared host's slow phases from landing on one engine only, which
the pytest-benchmark sweep (one engine's rounds, then the other's) does not.
"""
import argparse
import time

import numpy as np

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


def _median_us(f, n):
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    return float(np.median(ts)) * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=300)
    a = ap.parse_args()
    import onnxruntime as ort

    import jitort
    for c, h, k, s in CASES:
        m = _model(c, h, k, s)
        cm = jitort.compile(m, threads=a.threads, tiered=False)
        so = ort.SessionOptions()
        so.intra_op_num_threads = a.threads
        so.inter_op_num_threads = 1
        sess = ort.InferenceSession(m.SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])
        feeds = {"x": np.random.default_rng(0).standard_normal((1, c, h, h)).astype(np.float32)}
        np.testing.assert_allclose(cm.run(None, feeds)[0], sess.run(None, feeds)[0],
                                   rtol=1e-4, atol=1e-4)
        t = [_median_us(f, a.runs) for f in (lambda: cm.run(None, feeds),
                                              lambda: sess.run(None, feeds))] * 1
        t += [_median_us(f, a.runs) for f in (lambda: cm.run(None, feeds),
                                               lambda: sess.run(None, feeds))]
        tj, to = min(t[0], t[2]), min(t[1], t[3])
        print(f"depthwise {k}x{k}/{s} {c}ch {h}x{h}: jitort {tj:8.1f} us  onnxruntime "
              f"{to:8.1f} us  ratio {tj / to:.3f}", flush=True)


if __name__ == "__main__":
    main()
