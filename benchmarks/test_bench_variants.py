"""The models users hold, made from ../shared/models by onnxruntime's own tools, jitort vs
onnxruntime at 1 thread in the same run (issue 44's table).

    python -m pytest benchmarks/test_bench_variants.py --benchmark-only -q

Variants (B=1; text models S=128):

* ``bert-int8-dynamic``: ``quantize_dynamic`` (DynamicQuantizeLinear + MatMulInteger);
* ``resnet18-int8-qdq``: ``quant_pre_process`` then ``quantize_static(QuantFormat.QDQ)``,
  calibrated on three random batches;
* ``bert-fp16``, ``resnet18-fp16``, ``vit-fp16``, ``gpt2-fp16``:
  ``convert_float_to_float16(keep_io_types=True)``;
* ``bert-optimized``: ``optimize_model(model_type="bert", opt_level=0)`` (EmbedLayerNormalization,
  Attention, SkipLayerNormalization, BiasGelu);
* ``bert-int4``: ``MatMulNBitsQuantizer`` (4 bits, block 32).

Every variant compiles with ``strict=True`` (no node left to the interpreter) and is checked
against onnxruntime before timing: float16 within 1e-2 of the largest output magnitude, the
dynamically quantized model within 5e-2 (activation codes can move by one after a last-bit
difference upstream), the others within 1e-3 relative / 1e-4 absolute. onnxruntime:
``SessionOptions()`` with only ``intra_op_num_threads=1``. Rounds follow
benchmarks/test_bench_models.py's protocol (a block of onnxruntime calls in each round's untimed
setup, idle gaps between engines); onnxruntime's median goes to ``extra_info["ort_median_s"]``
and the session summary prints each ratio and the geomean. Issue 44's bar: each within 1.25x of
onnxruntime, geomean at most 1.0.
"""
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import jitort
from benchmarks.test_bench_models import time_against_ort
from tests.models import SHARED, shared_feeds, shared_path
from tests.test_contrib_quant import int4_bert, resnet_feeds, static_resnet18

ROUNDS = 15


def _fp16(name):
    from onnxruntime.transformers.float16 import convert_float_to_float16
    return convert_float_to_float16(onnx.load(str(shared_path(name))), keep_io_types=True)


def _dynamic_int8():
    from onnxruntime.quantization import quantize_dynamic
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "q.onnx"
        quantize_dynamic(str(shared_path("bert")), str(out))
        return onnx.load(str(out))


def optimized_bert_model() -> onnx.ModelProto:
    """bert through onnxruntime's transformer optimizer (its Python fusions)."""
    from onnxruntime.transformers.optimizer import optimize_model
    # opt_level=0: the Python fusions only (the onnxruntime pre-pass of levels >= 1 needs torch)
    opt = optimize_model(str(shared_path("bert")), model_type="bert", num_heads=4,
                         hidden_size=256, opt_level=0)
    with tempfile.TemporaryDirectory() as d:  # saving adds the com.microsoft opset import
        out = Path(d) / "opt.onnx"
        opt.save_model_to_file(str(out))
        return onnx.load(str(out))


#: variant -> (make the model, its feeds, tolerance kind)
VARIANTS = {
    "bert-int8-dynamic": (_dynamic_int8, lambda: shared_feeds("bert", 1, 128), "int8"),
    "resnet18-int8-qdq": (lambda: static_resnet18("QDQ"), resnet_feeds, "int8"),
    "bert-fp16": (lambda: _fp16("bert"), lambda: shared_feeds("bert", 1, 128), "fp16"),
    "resnet18-fp16": (lambda: _fp16("resnet18"), lambda: shared_feeds("resnet18", 1, 128),
                      "fp16"),
    "vit-fp16": (lambda: _fp16("vit"), lambda: shared_feeds("vit", 1, 128), "fp16"),
    "gpt2-fp16": (lambda: _fp16("gpt2"), lambda: shared_feeds("gpt2", 1, 128), "fp16"),
    "bert-optimized": (optimized_bert_model, lambda: shared_feeds("bert", 1, 128), "exact"),
    "bert-int4": (int4_bert, lambda: shared_feeds("bert", 1, 128), "exact"),
}


def _check(got, want, kind):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
        assert g.shape == w.shape
        err = float(np.abs(g - w).max())
        if kind == "fp16":
            assert err <= 1e-2 * float(np.abs(w).max()), err
        elif kind == "int8":
            assert err <= 5e-2, err
        else:
            np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_variant(benchmark, variant):
    if not SHARED.is_dir():
        pytest.skip(f"no model corpus at {SHARED}")
    make, feeds_fn, kind = VARIANTS[variant]
    model, feeds = make(), feeds_fn()
    cm = jitort.compile(model, threads=1, strict=True)
    assert cm.fallback_nodes() == []
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    _check(cm.run(None, feeds), sess.run(None, feeds), kind)
    benchmark.group = f"{variant} t1"
    time_against_ort(benchmark, lambda: cm.run(None, feeds), lambda: sess.run(None, feeds), ROUNDS)
