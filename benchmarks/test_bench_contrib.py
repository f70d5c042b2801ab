"""bert after onnxruntime's transformer optimizer (``optimize_model(model_type="bert")``, its
com.microsoft EmbedLayerNormalization / Attention / SkipLayerNormalization / BiasGelu), jitort
against onnxruntime at 1 thread in one process (onnxruntime: ``SessionOptions()`` with only
``intra_op_num_threads`` set). The optimized model is made here with onnxruntime's tool.

``python -m pytest benchmarks/test_bench_contrib.py -q -s``: the conftest's table gives the
ratio (jitort median / onnxruntime median); this file prints the CPU with it."""
import platform
import statistics
import time

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import jitort
from benchmarks.test_bench_variants import optimized_bert_model
from tests.models import shared_feeds, shared_path

THREADS = 1
ROUNDS = 7


def _cpu_name() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


@pytest.fixture(scope="module")
def optimized_bert(tmp_path_factory):
    path = shared_path("bert")
    if not path.exists():
        pytest.skip(f"{path} is absent (the shared model corpus)")
    out = tmp_path_factory.mktemp("contrib") / "bert_opt.onnx"
    onnx.save(optimized_bert_model(), str(out))
    return out


def _median_s(fn, feeds, n=20):
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn(feeds)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


@pytest.mark.parametrize("seq", [128])
def test_bert_optimized_jitort_vs_ort(benchmark, optimized_bert, seq):
    feeds = shared_feeds("bert", batch=1, seq=seq)
    so = ort.SessionOptions()
    so.intra_op_num_threads = THREADS
    sess = ort.InferenceSession(str(optimized_bert), so, providers=["CPUExecutionProvider"])
    cm = jitort.compile(str(optimized_bert), threads=THREADS, strict=True)
    want = sess.run(None, feeds)
    np.testing.assert_allclose(cm.run(None, feeds)[0], want[0], rtol=1e-3, atol=1e-3)

    def run_ort(f):
        return sess.run(None, f)

    def run_jit(f):
        return cm.run(None, f)

    for fn in (run_ort, run_jit):  # warm both
        _median_s(fn, feeds, 5)
    ort_s = statistics.median(_median_s(run_ort, feeds) for _ in range(ROUNDS))
    benchmark.group = f"bert_optimized-S{seq}-{THREADS}t"
    benchmark.extra_info["ort_median_s"] = ort_s
    benchmark.extra_info["cpu"] = _cpu_name()
    benchmark.pedantic(run_jit, args=(feeds,), rounds=ROUNDS * 20, iterations=1)
    if benchmark.disabled:  # --benchmark-disable: one call, outputs checked above
        return
    ratio = benchmark.stats.stats.median / ort_s
    print(f"\n{_cpu_name()}, {THREADS} thread: bert optimized by onnxruntime (S={seq}) "
          f"jitort {benchmark.stats.stats.median * 1e3:.2f} ms, onnxruntime {ort_s * 1e3:.2f} ms, "
          f"ratio {ratio:.3f}")
    benchmark.extra_info["ratio"] = ratio
