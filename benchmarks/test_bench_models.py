"""Model latency, jitort vs onnxruntime (and OpenVINO when installed) in the same run, at 1 and
2 threads.

    python -m pytest benchmarks/test_bench_models.py --benchmark-only -q
    python scripts/bench_table.py        # runs the above and rewrites docs/performance.md's table

The ten models of ../shared/models (skipped when absent) at B=1 (text models S=128) and the
nine onnx "light" models (1x3x224x224). Every engine gets the same feeds; outputs are checked
against onnxruntime's before timing (rtol 1e-3, atol 1e-4; the light models' logits, see
``tests.models.without_final_softmax``).

Settings, each engine at its defaults except the thread count:

* onnxruntime: ``SessionOptions()`` with only ``intra_op_num_threads`` set to the thread count
  (CPUExecutionProvider). Everything else is the default: sequential execution (so
  ``inter_op_num_threads`` is unused), all graph optimizations, and pool spinning on
  (``session.intra_op.allow_spinning`` left at "1").
* OpenVINO (only when ``import openvino`` works, the optional ``bench`` extra; set
  ``JITORT_BENCH_OPENVINO=0`` to leave it out): ``Core().compile_model(path, "CPU",
  {INFERENCE_PRECISION_HINT: f32, PERFORMANCE_HINT: LATENCY, INFERENCE_NUM_THREADS: threads})``
  on the ONNX file as it is (no reshape to static shapes), one infer request, ``infer(feeds)``.
  A model it cannot read, compile or run, or whose output disagrees with onnxruntime's, gets no
  OpenVINO time (the reason goes to ``extra_info["openvino_error"]``); the jitort test does not
  fail for it.
* jitort: ``jitort.compile(path, threads=threads)``, timed on the compiled program.

Protocol, per pytest-benchmark round (ROUNDS rounds; everything but the last step happens in
pytest-benchmark's untimed ``setup``):

1. wait until the process is idle (``_settle``: at least GAP_S, then until no other thread of
   the process is running or runnable in two checks 1 ms apart, at most MAX_GAP_S), so the
   pool of the engine that ran last has stopped spinning: onnxruntime's 2-thread pool spins
   ~33 ms after a call on a 2-core AMD EPYC (Zen 4) host when nothing else runs (longer when the host
   is contended: its spin is a count of iterations), jitort's workers ~100 us, OpenVINO's a
   few ms (all measured there, resnet18 at 2 threads);
2. a block of BLOCK onnxruntime calls, the last one timed here (after an idle gap a 2-vCPU
   VM takes a few calls to give both threads a core of their own: each engine is timed at
   the third call after its gap);
3. ``_settle``, then a block of BLOCK OpenVINO calls likewise (when OpenVINO is timed);
4. ``_settle``, then BLOCK - 1 untimed jitort calls;
5. pytest-benchmark times one jitort call: the round.

So each engine runs the way a user calling it back to back sees it (onnxruntime spinning between
its own calls), and no engine's spinning threads take the core another engine's call needs.
Alternating at this grain (rather than every jitort round, then every onnxruntime round) keeps
both under the same machine state: this VM's speed drifts by tens of percent over minutes.
jitort's time is pytest-benchmark's stats; onnxruntime's median goes to
``extra_info["ort_median_s"]``, OpenVINO's to ``extra_info["openvino_median_s"]``
(``scripts/bench_table.py`` and ``benchmarks/conftest.py`` read them).
"""
import os
import threading
import time

import numpy as np
import onnxruntime as ort
import pytest

import jitort
from tests.models import (SHARED_MODELS, light_models, light_path, shared_feeds, shared_path,
                          without_final_softmax)

try:
    if os.environ.get("JITORT_BENCH_OPENVINO", "1") == "0":
        raise ImportError("JITORT_BENCH_OPENVINO=0")
    import openvino
    import openvino.properties as ov_props
    import openvino.properties.hint as ov_hints
except ImportError:
    openvino = None

ROUNDS = 15
BLOCK = 3          # calls per engine and round; each engine's last call of the block is timed
GAP_S = 0.005      # least idle time before each engine's calls
MAX_GAP_S = 0.25   # most (a thread that never goes idle must not stall the suite)
RTOL, ATOL = 1e-3, 1e-4
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


def _ort_session(model, threads):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads   # the only option set: the rest are onnxruntime's defaults
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


def _openvino_request(model, threads):
    """An infer request on OpenVINO's CPU plugin (it keeps its compiled model alive);
    ``model``: a path or ONNX bytes."""
    core = openvino.Core()
    if isinstance(model, bytes):
        model = core.read_model(model)
    compiled = core.compile_model(model, "CPU", {
        ov_hints.inference_precision: openvino.Type.f32,
        ov_hints.performance_mode: ov_hints.PerformanceMode.LATENCY,
        ov_props.inference_num_threads: threads})
    return compiled.create_infer_request()


def _openvino_first(request, feeds):
    return next(iter(request.infer(feeds).values()))


def _openvino(path, logits, feeds, threads, want):
    """(infer request, None) when OpenVINO runs the model and agrees with onnxruntime's output
    ``want``, else (None, reason)."""
    try:
        request = _openvino_request(str(path), threads)
        check = request if logits is None else \
            _openvino_request(logits.SerializeToString(), threads)
        np.testing.assert_allclose(_openvino_first(check, feeds), want, rtol=RTOL, atol=ATOL)
        return request, None
    except Exception as e:  # noqa: BLE001: OpenVINO's failures never fail the jitort test
        return None, f"{type(e).__name__}: {str(e).strip()[:500]}"


_cache = {}


def _prepared(kind, name, threads):
    key = (kind, name, threads)
    if key not in _cache:
        path, feeds = _load(kind, name)
        cm = jitort.compile(path, threads=threads)
        # timed on the compiled program, not the interpreter tier a cold cache starts on
        assert cm.wait_compiled(), "the background compilation failed"
        sess = _ort_session(str(path), threads)
        logits = without_final_softmax(path) if kind == "light" else None
        if logits is not None:  # constant weights: equal logits (see without_final_softmax)
            lcm = jitort.compile(logits, threads=threads)
            lsess = _ort_session(logits.SerializeToString(), threads)
            got, want = lcm.run(None, feeds), lsess.run(None, feeds)
        else:
            got, want = cm.run(None, feeds), sess.run(None, feeds)
        np.testing.assert_allclose(got[0], want[0], rtol=RTOL, atol=ATOL)
        ov_request, ov_error = (None, None) if openvino is None else \
            _openvino(path, logits, feeds, threads, want[0])
        _cache[key] = cm, sess, ov_request, ov_error, feeds
    return _cache[key]


def _running_threads():
    """How many threads of this process besides the caller are running or runnable (state R
    in /proc/self/task/*/stat: a thread spinning in its pool stays R even while the host has
    it descheduled, one asleep on a futex is S); None without Linux's /proc."""
    me = threading.get_native_id()
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return None
    n = 0
    for tid in tids:
        if int(tid) == me:
            continue
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:   # the thread has ended
            continue
        n += stat[stat.rindex(")") + 2] == "R"
    return n


def _settle() -> float:
    """Sleep until no other thread of this process runs: at least GAP_S, then until two checks
    1 ms apart find none running (``_running_threads``; without /proc: until two 1 ms windows
    in which the process used under 5 % of a core), at most MAX_GAP_S. Returns the seconds
    slept."""
    start = time.perf_counter()
    time.sleep(GAP_S)
    quiet = 0
    while quiet < 2 and time.perf_counter() - start < MAX_GAP_S:
        wall, cpu = time.perf_counter(), time.process_time()
        time.sleep(0.001)
        running = _running_threads()
        if running is None:
            running = (time.process_time() - cpu) / (time.perf_counter() - wall) >= 0.05
        quiet = 0 if running else quiet + 1
    return time.perf_counter() - start


def _block(fn, times):
    """BLOCK calls of ``fn`` back to back; the last one's time appended to ``times``."""
    for _ in range(BLOCK - 1):
        fn()
    t = time.perf_counter()
    fn()
    times.append(time.perf_counter() - t)


def time_against_ort(benchmark, jitort_call, ort_call, rounds: int) -> None:
    """Time ``jitort_call`` against ``ort_call`` by this module's protocol without OpenVINO:
    each round's untimed setup settles, runs a block of ``ort_call`` (the last call timed),
    settles, runs BLOCK - 1 untimed ``jitort_call``; pytest-benchmark times the next one.
    onnxruntime's median goes to ``extra_info["ort_median_s"]`` (not under
    ``--benchmark-disable``, which runs each call once)."""
    ort_times = []

    def blocks_then_jitort():
        _settle()
        _block(ort_call, ort_times)
        _settle()
        for _ in range(BLOCK - 1):
            jitort_call()
        return (), {}

    benchmark.pedantic(jitort_call, setup=blocks_then_jitort, rounds=rounds, warmup_rounds=0)
    if not benchmark.disabled:
        benchmark.extra_info["ort_median_s"] = float(np.median(ort_times))
        benchmark.extra_info["ort_rounds"] = len(ort_times)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("kind,name", CASES, ids=[n for _, n in CASES])
def test_model(benchmark, kind, name, threads):
    """jitort's latency (pytest-benchmark's stats), with onnxruntime's and OpenVINO's measured
    in blocks in each round's setup (the module docstring's protocol)."""
    cm, sess, ov_request, ov_error, feeds = _prepared(kind, name, threads)
    benchmark.group = f"{name} t{threads}"
    ort_times, ov_times, ort_gaps = [], [], []

    def blocks_then_jitort():
        _settle()
        _block(lambda: sess.run(None, feeds), ort_times)
        ort_gaps.append(_settle())
        if ov_request is not None:
            _block(lambda: ov_request.infer(feeds), ov_times)
            _settle()
        for _ in range(BLOCK - 1):   # untimed: jitort's timed call is its block's last, too
            cm.run(None, feeds)
        return (), {}

    def jit_call():
        cm.run(None, feeds)   # dropped at once, as the other engines' results are: pedantic
        # would hold each round's result through the next round's calls

    benchmark.pedantic(jit_call, setup=blocks_then_jitort, rounds=ROUNDS, warmup_rounds=0)
    # each case runs once: free its engines (three copies of vgg19's 550 MB weights) now
    _cache.pop((kind, name, threads), None)
    benchmark.extra_info["ort_median_s"] = float(np.median(ort_times))
    benchmark.extra_info["ort_rounds"] = len(ort_times)   # calls recorded
    # how long onnxruntime's pool took to go idle after its blocks (its spinning)
    benchmark.extra_info["gap_after_ort_median_s"] = float(np.median(ort_gaps))
    if ov_times:
        benchmark.extra_info["openvino_median_s"] = float(np.median(ov_times))
        benchmark.extra_info["openvino_rounds"] = len(ov_times)   # calls recorded
    if ov_error is not None:
        benchmark.extra_info["openvino_error"] = ov_error
