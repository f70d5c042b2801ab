"""Model latency, jitort vs onnxruntime in the same run, at 1 and 2 threads.

    python -m pytest benchmarks/test_bench_models.py --benchmark-only -q
    python scripts/bench_table.py        # runs the above and rewrites benchmarks/README.md's table

The ten models of ../shared/models (skipped when absent) at B=1 (text models S=128) and the
nine onnx "light" models (1x3x224x224). Both runtimes get the same feeds; outputs are checked
to agree before timing.
"""
import time

import numpy as np
import onnxruntime as ort
import pytest

import jitort
from tests.models import (SHARED_MODELS, light_models, light_path, shared_feeds, shared_path,
                          without_final_softmax)

ROUNDS = 15
CASES = [("shared", n) for n in SHARED_MODELS] + \
        [("light", n) for n in light_models()]


def _load(kind, name):
    if kind == "shared":
        path = shared_path(name)
        if not path.exists():
            pytest.skip("../shared/models not present")
        return path, shared_feeds(name, 1, 128)
    path = light_path(name)
    model = jitort.compile(path)
    feeds = {model.input_names[0]: np.random.default_rng(0).standard_normal((1, 3, 224, 224))
             .astype(np.float32)}
    return path, feeds


_cache = {}


def _prepared(kind, name, threads):
    key = (kind, name, threads)
    if key not in _cache:
        path, feeds = _load(kind, name)
        cm = jitort.compile(path, threads=threads)
        # timed on the compiled program, not the interpreter tier a cold cache starts on
        assert cm.wait_compiled(), "the background compilation failed"
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        # the engines alternate call by call (test_model): onnxruntime's pool spinning after its
        # call would take the core jitort's next call needs (a cost neither pays when run alone)
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        logits = without_final_softmax(path) if kind == "light" else None
        if logits is not None:  # constant weights: equal logits (see without_final_softmax)
            lcm = jitort.compile(logits, threads=threads)
            lsess = ort.InferenceSession(logits.SerializeToString(), so,
                                         providers=["CPUExecutionProvider"])
            got, want = lcm.run(None, feeds), lsess.run(None, feeds)
        else:
            got, want = cm.run(None, feeds), sess.run(None, feeds)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-3, atol=1e-4)
        _cache[key] = cm, sess, feeds
    return _cache[key]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("kind,name", CASES, ids=[n for _, n in CASES])
def test_model(benchmark, kind, name, threads):
    """jitort's latency (pytest-benchmark's stats) with onnxruntime's interleaved: before every
    timed jitort round, onnxruntime runs once untimed by pytest-benchmark and timed here, so
    both engines see the same machine state (this VM's speed drifts by tens of percent over
    minutes; separate blocks of rounds made single ratios swing by +-30 %). onnxruntime's
    median goes to ``extra_info`` (``scripts/bench_table.py`` reads it)."""
    cm, sess, feeds = _prepared(kind, name, threads)
    benchmark.group = f"{name} t{threads}"
    ort_times = []

    def run_ort_then_jitort():
        t = time.perf_counter()
        sess.run(None, feeds)
        ort_times.append(time.perf_counter() - t)
        return (None, feeds), {}

    benchmark.pedantic(cm.run, setup=run_ort_then_jitort, rounds=ROUNDS, warmup_rounds=1)
    benchmark.extra_info["ort_median_s"] = float(np.median(ort_times[1:] or ort_times))
    benchmark.extra_info["ort_rounds"] = len(ort_times)
