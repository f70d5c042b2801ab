"""Calibration of the CUDA launchers' choices (jitort/tuning_cuda.py, kernels/cuda/tunables.py):
the default rules are the launchers' rules before calibration, a GPU's decisions reach the
launchers (the recorded work changes, results do not), they live in a file of that GPU's own,
and calibration measures every candidate that can run a bucket.

On the simulator cuBLAS is the stand-in binding (tests/cuda/standin_cublas.py, the ``cublas``
fixture); timings there say nothing about a GPU, so the tests that calibrate slow candidates
down with ``JITORT_TUNE_SLOW`` to check what the decision follows, and that every candidate
ran."""
import dataclasses
import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
from onnx import helper

import jitort
from jitort import tuning
from jitort.kernels.cuda import blas, conv, dnn, gemm, tunables
from jitort.tuning_cuda import CONV_GRID, CUDA_CONV, CUDA_GEMM
from tests.cuda.conftest import SIMULATOR
from tests.cuda.test_cuda_blas import _conv_model, _kinds
from tests.cuda.test_cuda_models import _ort, _w
from tests.helpers import F32, make_model
from tests.test_tuning import ROOT

F32_DT = np.dtype(np.float32)


@pytest.fixture(autouse=True)
def fresh_decisions():
    """Decisions applied to the launchers are process-wide: none before or after each test."""
    def clear():
        tunables.PICKS.clear()
        tunables.DEMOTED.clear()
        tuning._applied.pop("cuda", None)
        tuning._loaded.pop("cuda", None)
    clear()
    yield
    clear()


def _write_cuda(picks: dict, machine=None, demoted=()) -> None:
    """A decision file of this GPU: ``picks`` {choice name: {bucket: candidate}}."""
    doc = {"format": tuning.FORMAT, "machine": machine or tuning.machine("cuda"), "written": 0,
           "choices": {}}
    for name, buckets in picks.items():
        choice = tuning.choices()[name]
        doc["choices"][name] = {
            "library": tuning.library_hash(choice), "demoted": list(demoted),
            "buckets": {tuning._bucket_text(k): {"pick": v, "times": {v: 1e-3}}
                        for k, v in buckets.items()}}
    path = tuning.decisions_path("cuda")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))


@pytest.mark.parametrize("choice", [CUDA_GEMM, CUDA_CONV], ids=lambda c: c.name)
def test_buckets_are_their_problems(cuda, choice):
    """Every bucket of the grid is the bucket of its own representative problem (so what is
    measured is what is decided), and none is listed twice."""
    grid = choice.grid()
    assert len(grid) == len(set(grid)) and grid
    for key in grid:
        assert choice.bucket(choice.problem(key)) == key


def test_cuda_choices_have_a_device_and_a_file_of_their_own(cuda, tune_dir):
    assert set(tuning.choices("cuda")) == {"cuda.gemm", "cuda.conv"}
    assert not any(name.startswith("cuda.") for name in tuning.choices("cpu"))
    ident = tuning.machine("cuda")
    assert ident["gpu"] and "cc" in ident and "tf32" in ident
    assert tuning.decisions_path("cuda").name.startswith("decisions-cuda-")
    assert tuning.decisions_path("cuda") != tuning.decisions_path()
    # the GPU's identity names what changes a winner: cuBLAS present, TF32 allowed
    assert tuning.machine_key(dict(ident, tf32=not ident["tf32"])) != tuning.machine_key(ident)


@pytest.mark.parametrize("key,with_blas,want", [
    ((3, 1, 64, 64, 3136, 1), True, "cublas"),
    ((3, 1, 64, 64, 3136, 1), False, "tiled"),
    ((1, 1, 256, 64, 3136, 1), True, "cublas"),      # pointwise: no columns needed
    ((3, 1, 1, 1, 3136, 32), True, "direct"),        # depthwise: tiles would be padding
    ((3, 1, 4, 4, 3136, 32), True, "direct"),        # 4 output channels per group
    ((3, 1, 32, 32, 784, 4), True, "cublas"),        # grouped, 32 per group
])
def test_conv_default_rule_is_the_launchers_rule(cuda, request, key, with_blas, want):
    if with_blas:
        request.getfixturevalue("cublas")
    elif blas.library() is not None:
        pytest.skip("cuBLAS serves here")
    p = CUDA_CONV.problem(key)
    assert CUDA_CONV.default(p) == want
    # applicability: cuBLAS only where it serves and a group has enough output channels
    can = [c.name for c in CUDA_CONV.candidates if c.applies(p)]
    assert ("cublas" in can) == (with_blas and key[3] >= conv.TILED_MIN_KOUT)
    assert "direct" in can and "tiled" in can


def test_decide_follows_picks_applicability_and_demotions():
    tunables.set_decisions("x", {(1,): "b", (2,): "c"}, demoted=("a",))
    assert tunables.decide("x", (1,), ("a", "b"), "a") == "b"      # measured
    assert tunables.decide("x", (2,), ("a", "b"), "b") == "b"      # pick cannot run: default
    assert tunables.decide("x", (3,), ("a", "b"), "a") == "b"      # default demoted
    assert tunables.decide("x", (3,), ("a",), "a") == "a"          # ... but the only one
    assert tunables.decide("y", (1,), ("a", "b"), "a") == "a"      # nothing measured


def _conv_bucket_of(n, c, k, kh, side, **attrs):
    stride = attrs.get("strides", [1, 1])[0]
    return tunables.conv_bucket(n, c, k, kh, kh, side, side, stride, 1)


@pytest.mark.parametrize("pick", ["tiled", "direct", "cublas", "cudnn"])
def test_a_calibrated_convolution_pick_reaches_the_launcher(cublas, request, tune_dir, pick):
    """A decision file of this GPU picking ``pick`` for the convolution's bucket: the plan
    records that path (and only it); the result matches onnxruntime either way."""
    listed = request.getfixturevalue("cudnn") if pick == "cudnn" else None
    m = _conv_model(2, 8, 4, 3, True, pads=[1, 1, 1, 1])
    _write_cuda({"cuda.conv": {_conv_bucket_of(2, 4, 8, 3, 5): pick}})
    feeds = {"x": _w(2, 4, 5, 5), "z": _w(2, 8, 5, 5)}
    cm = jitort.compile(m, device="cuda")
    np.testing.assert_allclose(cm(*feeds.values())[0], _ort(m, feeds)[0], rtol=1e-5, atol=1e-5)
    want = {"tiled": [conv._KERNELS[F32_DT]], "direct": [conv._DIRECT[F32_DT]],
            "cublas": [conv._im2col_k, blas.gemm_strided, gemm.epilogue_kernel(np.float32)],
            "cudnn": [dnn.forward, gemm.epilogue_kernel(np.float32)]}
    assert _kinds(cm) == want[pick]
    assert bool(cublas.calls) == (pick == "cublas")
    assert listed is None or len(listed.calls) == 1


def test_a_pick_that_cannot_run_falls_back_to_the_rule(cublas, tune_dir):
    """cuBLAS picked for a depthwise convolution's bucket (no columns, one output channel per
    group): the launcher keeps its rule (the direct kernel)."""
    m = make_model([helper.make_node("Conv", ["x", "w"], ["y"], group=8, pads=[1, 1, 1, 1])],
                   [("x", F32, [2, 8, 5, 5])], [("y", F32, None)], {"w": _w(8, 1, 3, 3)})
    _write_cuda({"cuda.conv": {tunables.conv_bucket(2, 8, 8, 3, 3, 5, 5, 1, 8): "cublas"}})
    x = _w(2, 8, 5, 5)
    cm = jitort.compile(m, device="cuda")
    np.testing.assert_allclose(cm(x)[0], _ort(m, {"x": x})[0], rtol=1e-5, atol=1e-5)
    assert _kinds(cm) == [conv._DIRECT[F32_DT]] and cublas.calls == []


@pytest.mark.parametrize("pick", ["tiled", "cublas"])
def test_a_calibrated_product_pick_reaches_the_launcher(cublas, tune_dir, pick):
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("Add", ["h", "b"], ["y"])]
    m = make_model(nodes, [("x", F32, ["B", 6])], [("y", F32, ["B", 5])],
                   {"w": _w(6, 5), "b": _w(5)})
    _write_cuda({"cuda.gemm": {tunables.gemm_bucket(1, 3, 5, 6): pick}})
    x = _w(3, 6)
    cm = jitort.compile(m, device="cuda")
    np.testing.assert_allclose(cm(x)[0], _ort(m, {"x": x})[0], rtol=1e-5, atol=1e-6)
    want = {"tiled": [gemm._KERNELS[F32_DT]],
            "cublas": [blas.gemm_strided, gemm.epilogue_kernel(np.float32)]}
    assert _kinds(cm) == want[pick]
    # another shape class (8 rows, not 2-7) is not that bucket: the rule (cuBLAS) again
    cm8 = jitort.compile(m, device="cuda")
    cm8(_w(8, 6))
    assert _kinds(cm8)[0] is blas.gemm_strided


def test_explain_lines_name_the_gpu_choices(cuda, tune_dir):
    lines = tuning.summary_lines("cuda")
    assert [line.split(":")[0] for line in lines] == ["cuda.gemm", "cuda.conv"]
    assert all("default rule" in line for line in lines)
    _write_cuda({"cuda.gemm": {tunables.gemm_bucket(1, 3, 5, 6): "tiled"}})
    assert "calibrated here (1 buckets)" in tuning.summary_lines("cuda")[0]


def test_decisions_of_another_gpu_are_ignored(cublas, tune_dir):
    other = dict(tuning.machine("cuda"), gpu="Some Other GPU")
    _write_cuda({"cuda.gemm": {tunables.gemm_bucket(1, 3, 5, 6): "tiled"}}, machine=other)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert tuning.load(device="cuda") == {}
    assert any("Some Other GPU" in str(w.message) for w in seen)


def _tiny(choice, key, problem):
    """``choice`` measuring one bucket, ``key``, on a problem small enough for the simulator."""
    return dataclasses.replace(choice, grid=lambda: [key], problem=lambda k: dict(problem))


def test_conv_calibration_measures_every_candidate(cublas, tune_dir, monkeypatch):
    """Every candidate that can run the bucket is timed (its recorded work replayed); the
    decision follows the times (here: the rule's cuBLAS and the direct kernel slowed down, the
    tiled kernel wins), lands in this GPU's file and reaches the launchers."""
    slow, want = "cublas:1e9,direct:1e9", "tiled"
    p = {"n": 1, "c": 2, "kout": 8, "k": 3, "s": 1, "h": 3, "oh": 3, "group": 1}
    key = CUDA_CONV.bucket(p)
    monkeypatch.setitem(tuning.CHOICES, "cuda.conv", _tiny(CUDA_CONV, key, p))
    monkeypatch.setenv("JITORT_TUNE_SLOW", slow)
    got = tuning.tune(only=["cuda.conv"], progress=False, device="cuda")["cuda.conv"]
    (bucket,) = got["buckets"].values()
    assert set(bucket["times"]) == {"cublas", "tiled", "direct"} and bucket["pick"] == want
    doc = json.loads(tuning.decisions_path("cuda").read_text())
    assert doc["machine"] == tuning.machine("cuda") and "cuda.conv" in doc["choices"]
    assert not tuning.decisions_path().exists()      # the CPU's file is another one
    tuning.apply_runtime("cuda")
    assert tunables.PICKS["cuda.conv"] == {key: want}


def test_conv_calibration_times_cudnn_where_it_serves(cudnn, tune_dir, monkeypatch):
    """With cuDNN installed it is a candidate of its own, and the default rule's pick for a
    dense convolution; slowed down, another candidate wins the bucket."""
    p = {"n": 1, "c": 2, "kout": 8, "k": 3, "s": 1, "h": 3, "oh": 3, "group": 1}
    key = CUDA_CONV.bucket(p)
    assert CUDA_CONV.default(p) == "cudnn"
    monkeypatch.setitem(tuning.CHOICES, "cuda.conv", _tiny(CUDA_CONV, key, p))
    monkeypatch.setenv("JITORT_TUNE_SLOW", "cudnn:1e9,direct:1e9,tiled:1e9")
    got = tuning.tune(only=["cuda.conv"], progress=False, device="cuda")["cuda.conv"]
    (bucket,) = got["buckets"].values()
    assert set(bucket["times"]) == {"cudnn", "cublas", "tiled", "direct"}
    assert bucket["pick"] == "cublas" and cudnn.calls


def test_gemm_calibration_measures_both(cublas, tune_dir, monkeypatch):
    p = {"nb": 2, "m": 3, "k": 4, "n": 5}
    monkeypatch.setitem(tuning.CHOICES, "cuda.gemm", _tiny(CUDA_GEMM, CUDA_GEMM.bucket(p), p))
    monkeypatch.setenv("JITORT_TUNE_SLOW", "cublas:1e9")
    got = tuning.tune(only=["cuda.gemm"], progress=False, device="cuda")["cuda.gemm"]
    (bucket,) = got["buckets"].values()
    assert set(bucket["times"]) == {"cublas", "tiled"} and bucket["pick"] == "tiled"
    assert "cuda.gemm" in tuning.show(device="cuda") and "GPU:" in tuning.show(device="cuda")


def test_no_background_calibration_on_the_simulator(cuda, tune_dir, monkeypatch):
    """A ``device="cuda"`` compile starts the GPU's calibration on a real GPU only: the
    simulator's timings would decide nothing a GPU could use."""
    started = []
    monkeypatch.setenv("JITORT_TUNE_BACKGROUND", "1")
    monkeypatch.setattr(tuning, "_started", {})
    monkeypatch.setattr(tuning.subprocess, "Popen", lambda cmd, **kw: started.append(cmd))
    tuning.ensure_background("cuda")
    if SIMULATOR:
        assert started == []
    else:
        assert started and started[0][-2:] == ["--device", "cuda"]


def test_cli_tune_show_for_the_gpu(cuda, tune_dir):
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1" if SIMULATOR else "0")
    out = subprocess.run([sys.executable, "-m", "jitort", "tune", "--device", "cuda", "--show"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "GPU:" in out.stdout and "cuda.conv" in out.stdout and "cuda.gemm" in out.stdout
    assert "jitort tune --device cuda" in out.stdout     # not calibrated: how to


def test_conv_grid_covers_the_candidates(cuda, cublas):
    """The measured buckets include ones where each candidate is the rule's pick and ones
    where cuBLAS cannot run (depthwise), so calibration can move each way."""
    defaults = {CUDA_CONV.default(CUDA_CONV.problem(k)) for k in CONV_GRID}
    assert defaults == {"cublas", "direct"}
    assert any(not CUDA_CONV.candidate("cublas").applies(CUDA_CONV.problem(k))
               for k in CONV_GRID)


def test_cli_tune_refuses_to_calibrate_the_simulator(cuda, tune_dir):
    if not SIMULATOR:
        pytest.skip("a GPU: jitort tune --device cuda measures it")
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    out = subprocess.run([sys.executable, "-m", "jitort", "tune", "--device", "cuda"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 1 and "simulator" in out.stdout
    assert not tuning.decisions_path("cuda").exists()
