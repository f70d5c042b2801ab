"""float16 models, jitort vs onnxruntime in the same run, at 1 thread.

    python -m pytest benchmarks/test_bench_float16.py --benchmark-only -q

bert, resnet18, vit and gpt2 of ../shared/models (skipped when absent), converted by
onnxruntime's own tool (``convert_float_to_float16(model, keep_io_types=True)``: float32 feeds
and outputs, float16 weights and activations inside), at B=1 (text models S=128). Outputs are
checked against onnxruntime's (1e-2 of the largest magnitude) before timing.

onnxruntime: ``SessionOptions()`` with only ``intra_op_num_threads`` set; its CPU provider runs
ops without float16 kernels in float32 between Casts it inserts. jitort: ``jitort.compile(model,
threads=1)`` on the compiled program. The rounds follow benchmarks/test_bench_models.py's
protocol (blocks of onnxruntime calls in each round's untimed setup, idle gaps between the
engines); the table at the end of the session prints jitort / onnxruntime per model.
"""
import numpy as np
import onnx
import onnxruntime as ort
import pytest

import jitort
from benchmarks.test_bench_models import time_against_ort
from tests.models import shared_feeds, shared_path

ROUNDS = 15
MODELS = ["bert", "resnet18", "vit", "gpt2"]


def _prepared(name, threads):
    from onnxruntime.transformers.float16 import convert_float_to_float16
    path = shared_path(name)
    if not path.exists():
        pytest.skip("../shared/models not present")
    model = convert_float_to_float16(onnx.load(str(path)), keep_io_types=True)
    feeds = shared_feeds(name, 1, 128)
    cm = jitort.compile(model, threads=threads, strict=True)
    assert cm.wait_compiled(), "the background compilation failed"
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    got, want = cm.run(None, feeds)[0], sess.run(None, feeds)[0]
    err = float(np.abs(got.astype(np.float32) - want.astype(np.float32)).max())
    assert err <= 1e-2 * float(np.abs(want).max()), f"{name}: max error {err}"
    return cm, sess, feeds


@pytest.mark.parametrize("threads", [1])
@pytest.mark.parametrize("name", MODELS)
def test_float16_model(benchmark, name, threads):
    cm, sess, feeds = _prepared(name, threads)
    benchmark.group = f"{name} float16 t{threads}"
    time_against_ort(benchmark, lambda: cm.run(None, feeds), lambda: sess.run(None, feeds), ROUNDS)
