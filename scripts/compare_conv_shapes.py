#!/usr/bin/env python
"""A model's distinct Conv shapes, each alone, jitort against onnxruntime, calls interleaved.

    python scripts/compare_conv_shapes.py MODEL.onnx [--threads 1] [--runs 200] [--relu 1]
                                          [--only "EXPR"]

Every distinct Conv of MODEL (input shape after onnx shape inference, batch 0/unknown as 1;
weight shape, strides, pads, group, dilations) becomes a one-node Conv (+ Relu with
``--relu 1``, which both engines fuse) model with random weights, compiled by
``jitort.compile`` (tiering off) and run by onnxruntime at the same thread count (the session
of ``compare_model.py``); outputs are compared, then the two engines' calls alternate
(``compare_model.alternate``) and the medians are printed with GFLOP/s and their ratio, then
the totals weighted by how often each shape occurs in the model. ``--only`` keeps the cases
for which a Python expression over ``xs`` (input shape), ``ws`` (weight shape), ``st``
(strides), ``pd`` (pads), ``g`` (group) is true, e.g. ``--only "ws[2] == 1 and st[0] == 2"``.
In a model onnxruntime keeps its NCHWc layout between convolutions; alone, each of its calls
also reorders the input and the output, so the model's ratio is higher than these.
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_model import alternate, ort_session  # noqa: E402


def conv_cases(path):
    """{(xs, ws, strides, pads, group, dilations): count} of the model's Conv nodes."""
    import onnx
    from onnx import helper, numpy_helper, shape_inference
    m = shape_inference.infer_shapes(onnx.load(path))
    shapes = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim]
              for vi in list(m.graph.value_info) + list(m.graph.input) + list(m.graph.output)}
    inits = {i.name: numpy_helper.to_array(i).shape for i in m.graph.initializer}
    cases = {}
    for n in m.graph.node:
        if n.op_type != "Conv" or n.domain:
            continue
        at = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        xs = list(shapes.get(n.input[0]) or [])
        ws = tuple(inits.get(n.input[1]) or shapes.get(n.input[1]) or ())
        if len(xs) != 4 or len(ws) != 4 or 0 in xs[1:]:
            continue
        xs[0] = xs[0] or 1
        sp = len(xs) - 2
        key = (tuple(xs), ws, tuple(at.get("strides", [1] * sp)),
               tuple(at.get("pads", [0] * 2 * sp)), int(at.get("group", 1)),
               tuple(at.get("dilations", [1] * sp)))
        cases[key] = cases.get(key, 0) + 1
    return cases


def one_conv(xs, ws, st, pd, g, dl, relu):
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(1)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(xs))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    w = numpy_helper.from_array((rng.standard_normal(ws) * 0.1).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(ws[0]).astype(np.float32), "b")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c" if relu else "y"], group=g,
                              kernel_shape=list(ws[2:]), strides=list(st), pads=list(pd),
                              dilations=list(dl))]
    if relu:
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    return helper.make_model(helper.make_graph(nodes, "g", [x], [y], initializer=[w, b]),
                             opset_imports=[helper.make_opsetid("", 17)])


def time_conv(m, xs, threads, runs, tol):
    """Compile ``m`` (input "x" of shape ``xs``) with jitort (tiering off) and open it in
    onnxruntime at ``threads``; check jitort's output against onnxruntime's (rtol = atol =
    ``tol``), then alternate their calls (``runs`` pairs after 10 of warm-up): (jitort's
    median s, onnxruntime's, the output shape)."""
    import jitort
    cm = jitort.compile(m, threads=threads, tiered=False)
    sess = ort_session(m.SerializeToString(), threads)
    feeds = {"x": np.random.default_rng(0).standard_normal(xs).astype(np.float32)}
    want = sess.run(None, feeds)[0]
    np.testing.assert_allclose(cm.run(None, feeds)[0], want, rtol=tol, atol=tol)
    tj, to = alternate(lambda: cm.run(None, feeds), lambda: sess.run(None, feeds), runs, 10)
    return tj, to, want.shape


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--relu", type=int, default=1)
    ap.add_argument("--only", default=None)
    a = ap.parse_args()
    tj_all = to_all = 0.0
    for (xs, ws, st, pd, g, dl), cnt in conv_cases(a.model).items():
        if a.only and not eval(a.only, {}, dict(xs=xs, ws=ws, st=st, pd=pd, g=g)):
            continue
        tj, to, out_shape = time_conv(one_conv(xs, ws, st, pd, g, dl, a.relu), xs, a.threads,
                                      a.runs, 1e-3)
        flops = 2 * np.prod(ws) * xs[0] * np.prod(out_shape[2:])
        tj_all += cnt * tj
        to_all += cnt * to
        print(f"x{cnt} x{list(xs)} w{list(ws)} s{list(st)} p{list(pd)} g{g}: jitort "
              f"{tj * 1e6:8.1f} us ({flops / tj / 1e9:5.1f} GFLOP/s)  onnxruntime "
              f"{to * 1e6:8.1f} us  ratio {tj / to:.3f}", flush=True)
    if to_all:
        print(f"weighted by occurrence: jitort {tj_all * 1e3:.2f} ms  onnxruntime "
              f"{to_all * 1e3:.2f} ms  ratio {tj_all / to_all:.3f}")


if __name__ == "__main__":
    main()
