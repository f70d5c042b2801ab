"""Per-call overhead: a 1-node Add model, jitort vs onnxruntime in the same run.

    python -m pytest benchmarks/test_bench_overhead.py --benchmark-only
"""
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import jitort


def _add_model(shape):
    vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in ("x", "y", "z")]
    g = helper.make_graph([helper.make_node("Add", ["x", "y"], ["z"])], "add", vi[:2], vi[2:])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


SHAPES = {"add_1x16": [1, 16], "add_64x1024": [64, 1024]}


@pytest.fixture(scope="module", params=sorted(SHAPES))
def case(request):
    shape = SHAPES[request.param]
    model = _add_model(shape)
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal(shape).astype(np.float32),
             "y": rng.standard_normal(shape).astype(np.float32)}
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    cm = jitort.compile(model, threads=1)
    assert cm.wait_compiled(), "the background compilation failed"
    np.testing.assert_allclose(cm.run(None, feeds)[0], sess.run(None, feeds)[0])
    return request.param, cm, sess, feeds


def test_jitort(benchmark, case):
    name, cm, _, feeds = case
    benchmark.group = name
    benchmark(cm.run, None, feeds)


def test_ort(benchmark, case):
    name, _, sess, feeds = case
    benchmark.group = name
    benchmark(sess.run, None, feeds)
