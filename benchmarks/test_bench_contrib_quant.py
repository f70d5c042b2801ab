"""Latency of models quantized by onnxruntime's own tools (com.microsoft quantized ops), jitort
vs onnxruntime at one thread in the same run.

    python -m pytest benchmarks/test_bench_contrib_quant.py --benchmark-only -q

Models (tests/test_contrib_quant.py makes them): bert with MatMulNBits (MatMulNBitsQuantizer,
4 bits, block 32) at S=1 (one row per product, as a decode step) and S=128; a stack of four
1024x1024 MatMulNBits layers at one row; resnet18 by quantize_static QOperator; bert by
quantize_dynamic then onnxruntime's fusion into DynamicQuantizeMatMul / MatMulIntegerToFloat.

onnxruntime: ``SessionOptions()`` with only ``intra_op_num_threads=1``; jitort:
``jitort.compile(model, threads=1, strict=True)``. Outputs are checked against onnxruntime's
first (dynamically quantized bert within 5e-2: see the test). Each round, in pytest-benchmark's untimed setup, runs BLOCK onnxruntime calls and times
the last, then BLOCK - 1 jitort calls; pytest-benchmark times the next jitort call. The
onnxruntime median goes to ``extra_info["ort_median_s"]``, jitort's median over it to
``extra_info["ratio"]``. The MatMulNBits models must stay within 1.25x of onnxruntime (their
weights are dequantized to float32 once at compile time and run on jitort's float gemm:
lowerings/contrib_quant.py).
"""
import time

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper, TensorProto

import jitort
from tests.helpers import assert_outputs_close
from tests.models import SHARED, shared_feeds
from tests.test_contrib_quant import dynamic_bert, int4_bert, qoperator_resnet18, resnet_feeds

ROUNDS = 30
BLOCK = 3
#: the task's bound for the int4 models, jitort's median over onnxruntime's (1 thread)
INT4_BOUND = 1.25


def int4_stack(layers=4, k=1024, block=32, seed=0):
    """``layers`` MatMulNBits (k x k, 4 bits, asymmetric) in a row."""
    rng = np.random.default_rng(seed)
    nblk = k // block
    nodes, inits, x = [], [], "x"
    for i in range(layers):
        b = rng.integers(0, 256, (k, nblk, block // 2)).astype(np.uint8)
        s = (rng.random(k * nblk) * 0.02).astype(np.float32)
        z = rng.integers(0, 256, (k * ((nblk + 1) // 2),)).astype(np.uint8)
        inits += [numpy_helper.from_array(b, f"b{i}"), numpy_helper.from_array(s, f"s{i}"),
                  numpy_helper.from_array(z, f"z{i}")]
        nodes.append(helper.make_node("MatMulNBits", [x, f"b{i}", f"s{i}", f"z{i}"], [f"y{i}"],
                                      domain="com.microsoft", K=k, N=k, bits=4,
                                      block_size=block))
        x = f"y{i}"
    g = helper.make_graph(nodes, "stack", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                          [1, k])],
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, k])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    return m


CASES = {
    "int4 bert S=1": (int4_bert, lambda: shared_feeds("bert", seq=1), True),
    "int4 bert S=128": (int4_bert, lambda: shared_feeds("bert", seq=128), True),
    "int4 stack 4x1024 M=1": (
        int4_stack, lambda: {"x": np.random.default_rng(1).standard_normal((1, 1024))
                             .astype(np.float32)}, True),
    "qoperator resnet18": (qoperator_resnet18, resnet_feeds, False),
    "dynamic bert S=128": (dynamic_bert, lambda: shared_feeds("bert", seq=128), False),
}


@pytest.mark.parametrize("case", list(CASES))
def test_contrib_quant_latency(benchmark, case):
    make, feeds_fn, bounded = CASES[case]
    benchmark.group = case
    if case != "int4 stack 4x1024 M=1" and not SHARED.is_dir():
        pytest.skip(f"no model corpus at {SHARED}")
    m, feeds = make(), feeds_fn()
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    cm = jitort.compile(m, threads=1, strict=True)
    # bert's activations are quantized per call: a last-bit difference upstream (LayerNorm)
    # can move a code by one, worth ~1e-3 per product, which the layers carry on
    atol = 5e-2 if case.startswith("dynamic") else 1e-4
    assert_outputs_close(cm.run(None, feeds), sess.run(None, feeds), rtol=1e-3, atol=atol)
    ort_times = []

    def setup():
        for _ in range(BLOCK):
            t = time.perf_counter()
            sess.run(None, feeds)
        ort_times.append(time.perf_counter() - t)
        for _ in range(BLOCK - 1):
            cm.run(None, feeds)

    benchmark.pedantic(lambda: cm.run(None, feeds), setup=setup, rounds=ROUNDS,
                       warmup_rounds=1)
    if benchmark.disabled:  # --benchmark-disable: one call, outputs checked above
        return
    ort_med = float(np.median(ort_times[1:]))
    ratio = benchmark.stats.stats.median / ort_med
    benchmark.extra_info.update(ort_median_s=ort_med, ratio=ratio, threads=1)
    if bounded:
        assert ratio <= INT4_BOUND, f"{case}: jitort {ratio:.2f}x onnxruntime at 1 thread"
