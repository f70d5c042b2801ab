"""Per-machine calibration (jitort/tuning.py): decisions measured, persisted, applied, refused.

Every test points the kernel cache root (where decisions live) at its own folder and turns
calibration on (the suite runs with ``JITORT_TUNE=0``: tests/conftest.py).
"""
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from onnx import helper

import jitort
from jitort import tuning
from jitort.tuning_choices import GEMM_WEIGHTS

from .helpers import F32, kernels_called, make_model, run_onnxruntime, run_reference

ROOT = Path(__file__).resolve().parents[1]
# four buckets with enough work each (>= 20 us) for the demotion vote, small enough to
# measure in well under a second
SMALL_GRID = [(64, 256, 256, 0), (64, 1024, 256, 0), (16, 1024, 1024, 1), (256, 256, 256, 1)]


@pytest.fixture
def small_grid(monkeypatch):
    import dataclasses
    small = dataclasses.replace(GEMM_WEIGHTS, grid=lambda: list(SMALL_GRID))
    monkeypatch.setitem(tuning.CHOICES, "gemm.weights", small)
    return small


def _write(path: Path, picks: dict, machine=None, library=None, demoted=()):
    doc = {"format": tuning.FORMAT, "machine": machine or tuning.machine(), "written": 0,
           "choices": {"gemm.weights": {
               "library": library or tuning.library_hash(GEMM_WEIGHTS), "demoted": list(demoted),
               "buckets": {tuning._bucket_text(k): {"pick": v, "times": {"packed": 1e-3,
                                                                         "unpacked": 1e-3}}
                           for k, v in picks.items()}}}}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


def _matmul_model(k=512, n=300, seed=5):
    w = (np.random.default_rng(seed).standard_normal((k, n)) / 20).astype(np.float32)
    return make_model([helper.make_node("MatMul", ["x", "w"], ["z"])],
                      [("x", F32, ["N", k])], [("z", F32, None)], {"w": w})


def _write_picks(choice, picks: dict) -> None:
    """A decision file on which ``choice`` picks ``picks[key]`` in each bucket ``key``."""
    times = {c.name: 1 for c in choice.candidates}
    doc = {"format": tuning.FORMAT, "machine": tuning.machine(), "written": 0, "choices": {
        choice.name: {"library": tuning.library_hash(choice), "demoted": [],
                      "buckets": {tuning._bucket_text(k): {"pick": v, "times": times}
                                  for k, v in picks.items()}}}}
    p = tuning.decisions_path()
    p.parent.mkdir(parents=True)
    p.write_text(json.dumps(doc))


def _write_pick(choice, key: tuple, which: str) -> None:
    """A decision file on which ``choice`` picks ``which`` in bucket ``key``."""
    _write_picks(choice, {key: which})


def _calls(cm) -> list[str]:
    return [repr(k) for k in kernels_called(cm)]


def test_default_rule_before_calibration(tune_dir):
    assert not tuning.decisions_path().exists()
    # today's rule: packed from 128K multiply-adds, always with B stored transposed
    assert tuning.choose("gemm.weights", rows=64, k=512, n=300, trans=False) == "packed"
    assert tuning.choose("gemm.weights", rows=1, k=64, n=64, trans=False) == "unpacked"
    assert tuning.choose("gemm.weights", rows=1, k=64, n=64, trans=True) == "packed"


def test_calibrated_choice_is_applied(tune_dir):
    """A decision file that picks the per-call path for the bucket of a 40 x 512 x 300
    product: the generated driver calls the BLAS path, where the default rule packs B."""
    m = _matmul_model()
    x = np.random.default_rng(0).standard_normal((40, 512)).astype(np.float32)
    want = run_reference(m, {"x": x})[0]
    cm = jitort.compile(m, threads=1)
    np.testing.assert_allclose(cm(x)[0], want, rtol=1e-4, atol=1e-4)
    assert "gemm.matmul_packed" in _calls(cm)

    key = GEMM_WEIGHTS.bucket({"rows": 40, "k": 512, "n": 300, "trans": False})
    _write(tuning.decisions_path(), {key: "unpacked"})
    assert tuning.choose("gemm.weights", rows=40, k=512, n=300, trans=False) == "unpacked"
    cm2 = jitort.compile(m, threads=1)
    np.testing.assert_allclose(cm2(x)[0], want, rtol=1e-4, atol=1e-4)
    called = _calls(cm2)
    assert "gemm.matmul3d" in called and "gemm.matmul_packed" not in called


def test_decisions_reused_by_a_new_process(tune_dir):
    key = GEMM_WEIGHTS.bucket({"rows": 40, "k": 512, "n": 300, "trans": False})
    _write(tuning.decisions_path(), {key: "unpacked"})
    code = ("from jitort import tuning; "
            "print(tuning.choose('gemm.weights', rows=40, k=512, n=300, trans=False))")
    out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ), cwd=ROOT,
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "unpacked", out.stderr


@pytest.mark.parametrize("slow", ["packed", "unpacked"])
def test_a_slowed_candidate_loses_and_is_demoted(tune_dir, small_grid, monkeypatch, slow):
    """Calibration measures both candidates on every bucket; one made 50x slower loses all of
    them and is demoted (the default rule then avoids it in unmeasured buckets too)."""
    monkeypatch.setenv("JITORT_TUNE_SLOW", f"{slow}:50")
    got = tuning.tune(only=["gemm.weights"], progress=False)["gemm.weights"]
    assert len(got["buckets"]) == len(SMALL_GRID)
    other = "unpacked" if slow == "packed" else "packed"
    for b in got["buckets"].values():
        assert set(b["times"]) == {"packed", "unpacked"}
        assert b["pick"] == other
    assert got["demoted"] == [slow]
    # persisted, and applied outside the measured buckets through the demotion
    assert tuning.decisions_path().exists()
    unmeasured = {"rows": 1, "k": 64, "n": 64, "trans": slow == "packed"}
    assert GEMM_WEIGHTS.default(unmeasured) == slow
    assert tuning.choose("gemm.weights", **unmeasured) == other
    assert f"DEMOTED on this machine: {slow}" in tuning.show()


def test_unslowed_calibration_measures_real_times(tune_dir, small_grid):
    got = tuning.tune(only=["gemm.weights"], progress=False)["gemm.weights"]
    assert len(got["buckets"]) == len(SMALL_GRID)   # else the loop below checks nothing
    for text, b in got["buckets"].items():
        assert set(b["times"]) == {"packed", "unpacked"}, b
        assert all(0 < t < 1.0 for t in b["times"].values()), b
        best = min(b["times"], key=b["times"].get)
        dflt = GEMM_WEIGHTS.default(GEMM_WEIGHTS.problem(tuning._bucket_key(text)))
        # the fastest, or the default rule's pick within KEEP_DEFAULT of it
        assert b["pick"] in (best, dflt), b
        assert b["times"][b["pick"]] <= tuning.KEEP_DEFAULT * b["times"][best], b
        assert all(g > 0 for g in b["gflops"].values())


def test_a_candidate_that_fails_is_left_unmeasured(caplog):
    """A candidate whose preparation or first run raises (a GPU library refusing the problem)
    is logged and left out of the bucket's times; the others are measured."""
    def broken(p):
        raise RuntimeError("refused")
    choice = tuning.Choice(
        name="test.fails", doc="", bucket=lambda p: (1,), grid=lambda: [(1,)],
        problem=lambda k: {}, default=lambda p: "ok",
        candidates=(tuning.Candidate("ok", lambda p: True, lambda p: (lambda: None)),
                    tuning.Candidate("bad", lambda p: True, broken),
                    tuning.Candidate("bad_run", lambda p: True, lambda p: broken)))
    with caplog.at_level("WARNING", logger="jitort.tuning"):
        times = tuning.measure_bucket(choice, (1,))
    assert set(times) == {"ok"}
    assert "candidate bad failed" in caplog.text and "candidate bad_run failed" in caplog.text


def test_near_ties_keep_the_default_rule():
    assert tuning._pick({"a": 1.0, "b": 1.04}, "b") == "b"
    assert tuning._pick({"a": 1.0, "b": 1.06}, "b") == "a"
    assert tuning._pick({"a": 1.0, "b": 0.5}, "b") == "b"
    assert tuning._pick({"a": 1.0}, "b") == "a"     # the default does not apply here


def test_corrupt_file_is_ignored_with_a_warning(tune_dir):
    p = tuning.decisions_path()
    p.parent.mkdir(parents=True)
    p.write_text('{"format": 1, "machine": {"vendor": "a')
    with pytest.warns(tuning.TuningWarning, match="cannot be read"):
        assert tuning.load() == {}
    assert tuning.choose("gemm.weights", rows=1, k=64, n=64, trans=False) == "unpacked"
    p.write_text(json.dumps({"format": 1, "machine": tuning.machine(), "choices": []}))
    with pytest.warns(tuning.TuningWarning, match="not a jitort decision file"):
        assert tuning.load() == {}


def test_foreign_machine_file_is_ignored_with_a_warning(tune_dir):
    key = GEMM_WEIGHTS.bucket({"rows": 1, "k": 64, "n": 64, "trans": False})
    other = dict(tuning.machine(), model="Intel(R) Xeon(R) Platinum 8488C", llvm_cpu="rocketlake",
                 vendor="intel")
    _write(tuning.decisions_path(), {key: "packed"}, machine=other)
    with pytest.warns(tuning.TuningWarning, match="another machine.*Xeon"):
        assert tuning.load() == {}
    assert tuning.choose("gemm.weights", rows=1, k=64, n=64, trans=False) == "unpacked"


def test_entries_of_other_kernel_sources_are_dropped(tune_dir):
    key = GEMM_WEIGHTS.bucket({"rows": 1, "k": 64, "n": 64, "trans": False})
    _write(tuning.decisions_path(), {key: "packed"}, library="0123456789abcdef")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tuning.load() == {}


def test_tune_off_ignores_decisions(tune_dir, monkeypatch):
    key = GEMM_WEIGHTS.bucket({"rows": 1, "k": 64, "n": 64, "trans": False})
    _write(tuning.decisions_path(), {key: "packed"})
    assert tuning.choose("gemm.weights", rows=1, k=64, n=64, trans=False) == "packed"
    monkeypatch.setenv("JITORT_TUNE", "0")
    assert tuning.choose("gemm.weights", rows=1, k=64, n=64, trans=False) == "unpacked"


def test_machine_identity_names_the_cpu():
    ident = tuning.machine()
    assert set(ident) >= {"vendor", "model", "llvm_cpu", "isa", "cores", "blas"}
    assert ident["cores"] >= 1 and ident["model"]
    assert tuning.machine_key(ident) == tuning.machine_key(dict(ident))
    assert tuning.machine_key(dict(ident, cores=ident["cores"] + 1)) != tuning.machine_key(ident)


def test_first_use_starts_one_background_calibration(tune_dir, monkeypatch):
    started = []
    monkeypatch.setenv("JITORT_TUNE_BACKGROUND", "1")
    monkeypatch.setattr(tuning, "_started", {})
    monkeypatch.setattr(tuning.subprocess, "Popen", lambda cmd, **kw: started.append((cmd, kw)))
    tuning.ensure_background()
    tuning.ensure_background()
    assert len(started) == 1
    cmd, kw = started[0]
    assert cmd[1:] == ["-m", "jitort", "tune", "--background", "--quiet"]
    assert kw["start_new_session"] and kw["stdin"] == subprocess.DEVNULL
    assert tuning.decisions_path().with_suffix(".running").exists()
    # while that one runs (its lock is fresh) no other starts
    monkeypatch.setattr(tuning, "_started", {})
    tuning.ensure_background()
    assert len(started) == 1
    # it ended, leaving decisions for some choices only (or a kernel a choice measured
    # changed since): another one starts
    tuning.decisions_path().with_suffix(".running").unlink()
    monkeypatch.setattr(tuning, "_started", {})
    _write(tuning.decisions_path(), {})
    tuning.ensure_background()
    assert len(started) == 2
    # a machine with decisions for every choice starts none
    monkeypatch.setattr(tuning, "_started", {})
    doc = json.loads(tuning.decisions_path().read_text())
    for name, choice in tuning.choices().items():
        doc["choices"][name] = {"library": tuning.library_hash(choice), "demoted": [],
                                "buckets": {}}
    tuning.decisions_path().write_text(json.dumps(doc))
    tuning.ensure_background()
    assert len(started) == 2
    # one whose last run was cut by its budget before it reached all its buckets: go on
    some = next(iter(doc["choices"]))
    doc["choices"][some]["complete"] = False
    tuning.decisions_path().write_text(json.dumps(doc))
    tuning.decisions_path().with_suffix(".running").unlink()   # the last one ended
    monkeypatch.setattr(tuning, "_started", {})
    tuning.ensure_background()
    assert len(started) == 3


def test_a_run_cut_by_its_budget_is_marked_incomplete(tune_dir, small_grid):
    """Buckets left when the budget runs out mark their choice incomplete (the background
    calibration of the next process goes on from there); a full run marks every choice
    complete."""
    cut = tuning.tune(only=["gemm.weights"], budget_s=0.0, progress=False)
    assert cut["gemm.weights"]["complete"] is False and not cut["gemm.weights"]["buckets"]
    assert "cut short by the budget" in tuning.show()
    full = tuning.tune(only=["gemm.weights"], budget_s=600.0, progress=False)
    assert full["gemm.weights"]["complete"] is True
    assert len(full["gemm.weights"]["buckets"]) == len(SMALL_GRID)
    assert "cut short" not in tuning.show()


def test_cli_tune_show(tune_dir):
    key = GEMM_WEIGHTS.bucket({"rows": 64, "k": 256, "n": 256, "trans": False})
    _write(tuning.decisions_path(), {key: "unpacked"})
    out = subprocess.run([sys.executable, "-m", "jitort", "tune", "--show"], cwd=ROOT,
                         env=dict(os.environ), capture_output=True, text=True, check=True).stdout
    assert "gemm.weights" in out and "64x256x256x0" in out and "unpacked" in out
    assert "1 buckets measured, 1 differ from the default rule" in out


_READ_DECISIONS = """
from numba import njit
from jitort.kernels.cpu import gemm, tunables

@njit
def own(rows, k, n):
    return gemm._own_per_call(rows, k, n)

@njit
def read(slot):
    return tunables.read(slot)

slot = tunables.GEMM_OWN + tunables.gemm_bucket_py(64, 256, 1024)
seen = []
assert own(64, 256, 1024) and not own(8, 256, 1024)         # the rule: 32-256 rows
for value in (0, 1, -1):
    tunables.set_values(slot, [value])
    seen.append([int(read(slot)), bool(own(64, 256, 1024)), bool(own(100, 300, 600)),
                 bool(own(8, 256, 1024))])
print(seen)
"""


def test_kernels_read_runtime_decisions():
    """gemm._own_per_call (compiled) reads its bucket's slot of kernels.cpu.tunables: -1 its
    built-in rule, 0 the BLAS, 1 jitort's gemm; decisions change without recompiling. In a
    fresh process: the table is process-wide state (the rest of the suite writes it too)."""
    out = subprocess.run([sys.executable, "-c", _READ_DECISIONS], cwd=ROOT, env=dict(os.environ),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    # [value the kernel reads, own(64x256x1024), own(100x300x600) (same bucket), own(8x256x1024)
    # (another bucket: the rule, BLAS)]
    assert json.loads(out.stdout.strip().splitlines()[-1].lower()) == [
        [0, False, False, False], [1, True, True, False], [-1, True, True, False]]


def test_bucket_classes_agree_between_kernels_and_tuning():
    from jitort.kernels.cpu import tunables
    from jitort.tuning_choices import GEMM_ACTIVATIONS
    slots = {tunables.gemm_bucket_py(*key) for key in GEMM_ACTIVATIONS.grid()}
    assert slots == set(range(tunables.GEMM_OWN_SLOTS))
    for rows, k, n in [(1, 1, 1), (7, 129, 513), (31, 512, 2048), (127, 2049, 9999),
                       (5000, 64, 64)]:
        key = GEMM_ACTIVATIONS.bucket({"rows": rows, "k": k, "n": n})
        assert tunables.gemm_bucket_py(rows, k, n) == tunables.gemm_bucket_py(*key)


def test_activation_decisions_reach_the_kernels(tune_dir):
    """Calibrated per-call picks are written into the kernels' table by apply_runtime()
    (compile() calls it); with calibration off the kernels keep their rule."""
    from jitort.kernels.cpu import tunables
    from jitort.tuning_choices import GEMM_ACTIVATIONS
    lib = tuning.library_hash(GEMM_ACTIVATIONS)
    k_own, k_blas = (64, 256, 256), (256, 1024, 1024)   # default rule: own, own
    doc = {"format": tuning.FORMAT, "machine": tuning.machine(), "written": 0, "choices": {
        "gemm.activations": {"library": lib, "demoted": [], "buckets": {
            tuning._bucket_text(k_own): {"pick": "own", "times": {"own": 1, "blas": 2}},
            tuning._bucket_text(k_blas): {"pick": "blas", "times": {"own": 2, "blas": 1}}}}}}
    p = tuning.decisions_path()
    p.parent.mkdir(parents=True)
    p.write_text(json.dumps(doc))
    saved = tunables.values(0, tunables.SIZE)
    try:
        tuning.apply_runtime()
        flags = tunables.values(tunables.GEMM_OWN, tunables.GEMM_OWN_SLOTS)
        assert flags[tunables.gemm_bucket_py(*k_own)] == 1
        assert flags[tunables.gemm_bucket_py(*k_blas)] == 0
        # unmeasured buckets follow the default rule, written out
        assert flags[tunables.gemm_bucket_py(4, 64, 64)] == 0
        assert flags[tunables.gemm_bucket_py(64, 1024, 1024)] == 1
        assert (flags >= 0).all()
    finally:
        tunables.set_values(0, saved)


def _conv_model(c=32, size=14):
    rng = np.random.default_rng(1)
    w = (rng.standard_normal((c, c, 3, 3)) / (3 * c) ** 0.5).astype(np.float32)
    return make_model([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])],
                      [("x", F32, [1, c, size, size])], [("y", F32, None)], {"w": w})


@pytest.mark.parametrize("which", ["winograd", "direct"])
def test_forced_and_calibrated_convolution_path(tune_dir, which):
    """conv.winograd, a choice the lowering makes: forced (as calibration times it) or
    calibrated, the generated driver calls Winograd or not, and the output is right."""
    from jitort.tuning_choices import CONV_WINOGRAD
    m = _conv_model()
    x = np.random.default_rng(0).standard_normal((1, 32, 14, 14)).astype(np.float32)
    want = run_reference(m, {"x": x})[0]
    with tuning.force("conv.winograd", which):
        cm = jitort.compile(m, threads=1)
        np.testing.assert_allclose(cm(x)[0], want, rtol=1e-4, atol=1e-4)
    assert ("winograd.conv3x3_winograd" in _calls(cm)) == (which == "winograd")
    assert "conv.winograd" not in tuning._forced
    _write_pick(CONV_WINOGRAD, CONV_WINOGRAD.bucket({"c": 32, "m": 32, "oh": 14, "ow": 14}),
                which)
    cm2 = jitort.compile(m, threads=1)
    np.testing.assert_allclose(cm2(x)[0], want, rtol=1e-4, atol=1e-4)
    assert ("winograd.conv3x3_winograd" in _calls(cm2)) == (which == "winograd")


def test_conv_choice_measures_both_paths(tune_dir, monkeypatch):
    """Calibrating conv.winograd compiles the one-Conv model each way and times it."""
    import dataclasses
    from jitort.tuning_choices import CONV_WINOGRAD
    small = dataclasses.replace(CONV_WINOGRAD, grid=lambda: [(32, 14)])
    monkeypatch.setitem(tuning.CHOICES, "conv.winograd", small)
    monkeypatch.setenv("JITORT_TUNE_SLOW", "winograd:20")
    got = tuning.tune(only=["conv.winograd"], progress=False)["conv.winograd"]
    (b,) = got["buckets"].values()
    assert set(b["times"]) == {"winograd", "direct"} and b["pick"] == "direct"


def test_budget_cut_runs_add_up(tune_dir, small_grid):
    """A run with no budget measures nothing new; the next one measures the buckets never
    measured first."""
    first = tuning.tune(only=["gemm.weights"], progress=False, budget_s=0)["gemm.weights"]
    assert first["buckets"] == {}
    got = tuning.tune(only=["gemm.weights"], progress=False)["gemm.weights"]
    assert len(got["buckets"]) == len(SMALL_GRID)
    assert all("at" in b for b in got["buckets"].values())


# conv.algorithm: the kernel of a float32 convolution, chosen at lowering
#: the kernel each candidate lowers to (``kernels_called``'s module.function, FusedConv forms
#: included: a Conv with a bias may be fused into one)
CONV_KERNELS = {"im2col": ("conv.conv2d", "conv.conv2d_bias_act"),
                "winograd": ("winograd.conv3x3_winograd",),
                "implicit": ("conv_implicit.conv2d_implicit",),
                "cvec": ("conv_cvec.conv2d_cvec",), "grouped": ("conv_group.conv2d_grouped",)}
#: (c, m, k, stride, output side, group, Winograd): a stem-like 3x3 stride-2 layer, a few-channel
#: 3x3 stride-1 one with Winograd the alternative, a grouped one
CONV_CASES = [(3, 32, 3, 2, 28, 1, False), (16, 32, 3, 1, 28, 1, True),
              (64, 64, 3, 2, 7, 4, False)]


def _old_conv_rule(p: dict) -> str:
    """The lowering's cascade before conv.algorithm (float32, constant weights)."""
    from jitort.kernels.cpu.conv_cvec import cvec_wins
    from jitort.kernels.cpu.conv_group import grouped_wins
    from jitort.kernels.cpu.conv_implicit import implicit_wins
    c, m, k, s, side, g, w = (p[x] for x in ("c", "m", "kh", "sh", "oh", "group", "winograd"))
    implicit = g == 1 and implicit_wins(c, k, k, side, side, winograd_alt=w)
    if cvec_wins(c, m, k, k, side, side, s, s, winograd_alt=w, implicit_alt=implicit, group=g):
        return "cvec"
    if not w and grouped_wins(c, m, side, side, g):
        return "grouped"
    return "implicit" if implicit else "winograd" if w else "im2col"


def _conv_problem(c, m, k, s, side, g, w):
    return {"c": c, "m": m, "kh": k, "kw": k, "oh": side, "ow": side, "sh": s, "sw": s,
            "group": g, "winograd": w, "dtype": "float32"}


def test_conv_algorithm_buckets_and_default_rule(tune_dir):
    """Buckets: every grid bucket's representative problem falls in it, and the grouped ones
    agree with the Winograd rule the lowering applies to grouped layers (their candidates
    depend on it); before calibration the choice answers the old cascade."""
    from jitort.kernels.cpu.winograd import winograd_grouped_wins, winograd_wins
    from jitort.tuning_choices import CONV_ALGORITHM as A
    grid = A.grid()
    assert 10 <= len(grid) <= 24 and len(set(grid)) == len(grid)
    for key in grid:
        p = A.problem(key)
        assert A.bucket(p) == key
        assert any(c.applies(p) for c in A.candidates if c.name == A.default(p))
        cg, mg, side, g = p["c"] // p["group"], p["m"] // p["group"], p["oh"], p["group"]
        if g > 1 and (p["kh"], p["sh"]) == (3, 1):
            assert p["winograd"] == (winograd_wins(cg, mg, side, side)
                                     and winograd_grouped_wins(cg, mg, side, side)), key
    assert A.bucket(_conv_problem(3, 64, 7, 2, 112, 1, False)) == (7, 2, 3, 64, 112, 1, 0)
    assert A.bucket(_conv_problem(2048, 512, 1, 1, 7, 1, False)) == (1, 1, 256, 256, 7, 1, 0)
    assert A.bucket(_conv_problem(512, 512, 3, 1, 7, 16, False)) == (3, 1, 32, 32, 7, 16, 0)
    seen = set()
    for c in (3, 8, 16, 24, 64, 256):
        for m in (8, 16, 32, 64, 512):
            for k, s in ((1, 1), (1, 2), (3, 1), (3, 2), (5, 1), (7, 2)):
                for side in (7, 14, 28, 56, 112):
                    for g in (1, 2, 8):
                        for w in ((False, True) if (k, s) == (3, 1) else (False,)):
                            if c % g or m % g:
                                continue
                            p = _conv_problem(c, m, k, s, side, g, w)
                            got = tuning.choose("conv.algorithm", **p)
                            assert got == _old_conv_rule(p), p
                            seen.add(got)
    assert seen == set(CONV_KERNELS)
    # hand-checked picks of the old rules: a 7x7 RGB stem, few-channel 3x3 layers with and
    # without Winograd the alternative, a 64-channel one with it, a 2-channel strided one, a
    # grouped one with few output channels per group
    assert tuning.choose("conv.algorithm", **_conv_problem(3, 64, 7, 2, 112, 1, False)) == "cvec"
    assert tuning.choose("conv.algorithm", **_conv_problem(16, 16, 3, 1, 56, 1, True)) \
        == "implicit"
    assert tuning.choose("conv.algorithm", **_conv_problem(16, 16, 3, 1, 56, 1, False)) \
        == "implicit"
    assert tuning.choose("conv.algorithm", **_conv_problem(64, 64, 3, 1, 56, 1, True)) \
        == "winograd"
    assert tuning.choose("conv.algorithm", **_conv_problem(2, 8, 3, 2, 56, 1, False)) \
        == "im2col"
    assert tuning.choose("conv.algorithm", **_conv_problem(256, 8, 3, 2, 7, 2, False)) \
        == "grouped"


def _conv_case_model(c, m, k, s, side, g):
    rng = np.random.default_rng(2)
    w = (rng.standard_normal((m, c // g, k, k)) / (k * k * c / g) ** 0.5).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    h = (side - 1) * s + 1
    m_ = make_model([helper.make_node("Conv", ["x", "w", "b"], ["y"], group=g, strides=[s, s],
                                      pads=[k // 2] * 4)],
                    [("x", F32, [1, c, h, h])], [("y", F32, None)], {"w": w, "b": b})
    x = rng.standard_normal((1, c, h, h)).astype(np.float32)
    return m_, x


def _conv_kernels(cm) -> list[str]:
    return [n for n in _calls(cm) if n.startswith(("conv.", "conv_", "winograd."))]


@pytest.mark.parametrize("case", CONV_CASES, ids=["stem", "winograd-alt", "grouped"])
def test_forced_convolution_algorithm(tune_dir, case):
    """Forcing each applicable candidate (as calibration times it) lowers the node to that
    kernel, and the output stays onnxruntime's; a calibrated decision for the bucket is
    applied the same way."""
    from jitort.tuning_choices import CONV_ALGORITHM as A
    c, m, k, s, side, g, w = case
    model, x = _conv_case_model(c, m, k, s, side, g)
    want = run_onnxruntime(model, {"x": x})[0]
    p = _conv_problem(*case)
    cands = [cand.name for cand in A.candidates if cand.applies(p)]
    assert len(cands) == 3, cands
    wino = ("conv.winograd", "winograd" if w else "direct")
    for which in cands:
        with tuning.force("conv.algorithm", which), tuning.force(*wino):
            cm = jitort.compile(model, threads=1)
            np.testing.assert_allclose(cm(x)[0], want, rtol=1e-4, atol=1e-4, err_msg=which)
        assert _conv_kernels(cm) in ([kn] for kn in CONV_KERNELS[which]), (which, _calls(cm))
    assert not tuning._forced
    other = next(n for n in cands if n != A.default(p))
    _write_pick(A, A.bucket(p), other)
    assert tuning.choose("conv.algorithm", **p) == other
    cm = jitort.compile(model, threads=1)    # conv.winograd's default rule: as forced above
    np.testing.assert_allclose(cm(x)[0], want, rtol=1e-4, atol=1e-4)
    assert _conv_kernels(cm) in ([kn] for kn in CONV_KERNELS[other]), (other, _calls(cm))


def test_conv_algorithm_calibration_measures_every_candidate(tune_dir, monkeypatch):
    """Calibrating conv.algorithm compiles the one-Conv model with each applicable candidate
    forced and times it; a slowed candidate loses."""
    import dataclasses
    from jitort.tuning_choices import CONV_ALGORITHM as A
    key = A.bucket(_conv_problem(*CONV_CASES[2]))
    monkeypatch.setitem(tuning.CHOICES, "conv.algorithm",
                        dataclasses.replace(A, grid=lambda: [key]))
    monkeypatch.setenv("JITORT_TUNE_SLOW", "cvec:20")
    got = tuning.tune(only=["conv.algorithm"], progress=False)["conv.algorithm"]
    (b,) = got["buckets"].values()
    assert set(b["times"]) == {"im2col", "cvec", "grouped"}
    assert all(0 < t < 1.0 for t in b["times"].values()) and b["pick"] != "cvec"


def test_unmeasured_conv_bucket_follows_its_nearest_measured_neighbours(tune_dir):
    """A conv.algorithm bucket the grid does not measure takes the majority pick of the
    measured buckets of its kind (kernel, stride, groups, Winograd) nearest to it in channel
    and side classes, at most NEAREST_MAX class steps away; a tie keeps the default rule's pick
    when it is tied, a pick that cannot run the problem does not vote, and a bucket with no
    measured neighbour that near, or of another kind, follows the default rule. The compiled
    layer runs the neighbours' kernel and matches onnxruntime."""
    from jitort.tuning_choices import CONV_ALGORITHM as A
    assert tuning.NEAREST_MAX == 2
    _write_picks(A, {(1, 1, 256, 64, 56, 1, 0): "im2col", (1, 1, 256, 128, 28, 1, 0): "im2col",
                     (1, 1, 256, 256, 14, 1, 0): "cvec", (3, 2, 64, 128, 28, 1, 0): "implicit"})

    def pick(c, m, k, s, side):
        p = _conv_problem(c, m, k, s, side, 1, False)
        return tuning.choose("conv.algorithm", **p), A.default(p)

    assert pick(256, 128, 1, 1, 56) == ("im2col", "cvec")  # two neighbours one step away agree
    assert pick(512, 256, 1, 1, 28) == ("cvec", "cvec")    # one each way: the rule's is tied
    assert pick(128, 128, 1, 1, 56) == ("im2col", "cvec")  # the nearest (two steps) agree
    assert pick(64, 64, 1, 1, 7) == ("cvec", "cvec")       # nothing within two steps
    got, rule = pick(256, 128, 1, 2, 56)                   # another kind: stride 2
    assert got == rule
    assert pick(64, 128, 3, 2, 56)[0] == "implicit"        # C * 9 <= 640: implicit runs it
    got, rule = pick(128, 128, 3, 2, 28)                   # C * 9 > 640: implicit cannot
    assert got == rule != "implicit"

    model, x = _conv_case_model(256, 128, 1, 1, 56, 1)
    cm = jitort.compile(model, threads=1)
    np.testing.assert_allclose(cm(x)[0], run_onnxruntime(model, {"x": x})[0], rtol=1e-4,
                               atol=1e-4)
    assert _conv_kernels(cm) in ([kn] for kn in CONV_KERNELS["im2col"]), _calls(cm)
    assert "nearest listed" in tuning.show()


# trees.layout: the complete-tree layout or the node arrays, chosen at lowering
def test_trees_layout_buckets_and_default_rule():
    """The default rule is the lowering's before calibration (complete up to
    COMPLETE_MAX_DEPTH levels and COMPLETE_MAX_STEPS padding); the complete layout never
    applies past its depth limit or where the ensemble cannot take it."""
    from jitort.codegen.lowerings.trees import COMPLETE_LIMIT, COMPLETE_MAX_DEPTH, COMPLETE_MAX_STEPS
    from jitort.tuning_ml import TREES_LAYOUT as T
    assert T.bucket({"depth": 3, "steps": 1.0}) == (4, 100)
    assert T.bucket({"depth": 7, "steps": 1.6}) == (8, 150)
    assert T.bucket({"depth": 12, "steps": 3.0}) == (10, 250)
    for key in T.grid():
        p = T.problem(key)
        assert T.bucket(p) == key
        assert T.default(p) == ("complete" if key[0] <= COMPLETE_MAX_DEPTH
                                and key[1] / 100 <= COMPLETE_MAX_STEPS else "nodes")
    complete = T.candidate("complete")
    assert not complete.applies({"depth": COMPLETE_LIMIT + 1, "steps": 1.0, "complete": True})
    assert not complete.applies({"depth": 3, "steps": 1.0, "complete": False})
    assert tuning.choose("trees.layout", depth=3, steps=1.0, complete=True) == "complete"
    assert tuning.choose("trees.layout", depth=3, steps=3.0, complete=True) == "nodes"


@pytest.mark.parametrize("depth,steps", [(3, 1.0), (6, 2.5)])
def test_synthetic_trees_match_onnxruntime_and_their_bucket(depth, steps):
    """The ensemble calibration times: its flattened depth and padding fall in the bucket it
    stands for, and it computes what onnxruntime computes."""
    from jitort.codegen.tree_tables import flatten_v3
    from jitort.importer import import_model
    from jitort.tuning_ml import TREES_LAYOUT as T
    from jitort.tuning_ml import _synthetic_trees
    m = _synthetic_trees(depth, steps)
    (node,) = import_model(m).nodes
    flat = flatten_v3(node, "target")
    got_steps = len(flat.roots) * int(flat.depth.max()) / int(flat.depth.sum())
    assert T.bucket({"depth": int(flat.depth.max()), "steps": got_steps}) == \
        T.bucket({"depth": depth, "steps": steps})
    x = np.random.default_rng(2).standard_normal((33, 20)).astype(np.float32)
    np.testing.assert_allclose(jitort.compile(m, threads=1, tiered=False)(x)[0],
                               run_onnxruntime(m, {"X": x})[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("which", ["complete", "nodes"])
def test_forced_and_calibrated_tree_layout(tune_dir, which):
    """trees.layout forced (as calibration times it) or calibrated: the driver calls the
    complete-tree walk or the node walk, with the same output."""
    from jitort.tuning_ml import TREES_LAYOUT as T
    from jitort.tuning_ml import _synthetic_trees
    _forced_then_calibrated(T, which, _synthetic_trees(4, 1.0), {"depth": 4, "steps": 1.0},
                            "trees.walk_complete", which == "complete")


def _forced_then_calibrated(choice, which, model, problem, kernel, called):
    """A choice the lowering makes, forced to ``which`` then picked by a decision file for
    ``problem``'s bucket: onnxruntime's output both times, ``kernel`` called iff ``called``."""
    x = np.random.default_rng(3).standard_normal((40, 20)).astype(np.float32)
    want = run_onnxruntime(model, {"X": x})[0]
    with tuning.force(choice.name, which):
        cm = jitort.compile(model, threads=1, tiered=False)
        np.testing.assert_allclose(cm(x)[0], want, rtol=1e-5, atol=1e-5)
    assert (kernel in _calls(cm)) == called
    _write_pick(choice, choice.bucket(problem), which)
    cm2 = jitort.compile(model, threads=1, tiered=False)
    np.testing.assert_allclose(cm2(x)[0], want, rtol=1e-5, atol=1e-5)
    assert (kernel in _calls(cm2)) == called


def _calibration_measures_both(monkeypatch, choice, key, slowed):
    """Calibrating ``choice`` on the one bucket ``key`` with candidate ``slowed`` slowed 20x:
    both timed, the other picked."""
    import dataclasses
    monkeypatch.setitem(tuning.CHOICES, choice.name,
                        dataclasses.replace(choice, grid=lambda: [key]))
    monkeypatch.setenv("JITORT_TUNE_SLOW", f"{slowed}:20")
    got = tuning.tune(only=[choice.name], progress=False)[choice.name]
    (b,) = got["buckets"].values()
    names = {c.name for c in choice.candidates}
    assert set(b["times"]) == names and b["pick"] == (names - {slowed}).pop()
    assert all(0 < t < 1.0 for t in b["times"].values())


def test_trees_layout_calibration_measures_both(tune_dir, monkeypatch):
    """Calibrating trees.layout compiles the synthetic ensemble each way and times it; a
    slowed candidate loses."""
    from jitort.tuning_ml import TREES_LAYOUT as T
    _calibration_measures_both(monkeypatch, T, (4, 100), "complete")


# linear.scores: a float32 linear model's scores a row or a tile of rows at a time
def test_linear_scores_buckets_and_default_rule():
    """Buckets: features x score columns, each grid key its own problem's bucket; the default
    rule is TILES_MAX_FEATURES (tiles up to 16 features with one column, 32 with 2-4
    classes, always with more)."""
    from jitort.codegen.lowerings.ml import TILES_MAX_FEATURES
    from jitort.tuning_ml import LINEAR_SCORES as L
    assert L.bucket({"features": 20, "classes": 3}) == (24, 3)
    assert L.bucket({"features": 25, "classes": 3}) == (32, 3)
    assert L.bucket({"features": 1000, "classes": 1}) == (128, 1)
    assert L.bucket({"features": 3, "classes": 30}) == (4, 8)
    for key in L.grid():
        p = L.problem(key)
        assert L.bucket(p) == key
        f, nt = key
        assert L.default(p) == ("tiles" if nt > 4 or f <= TILES_MAX_FEATURES[nt > 1]
                                else "rows")
    assert tuning.choose("linear.scores", features=20, classes=3) == "tiles"
    assert tuning.choose("linear.scores", features=200, classes=1) == "rows"


@pytest.mark.parametrize("which", ["rows", "tiles"])
def test_forced_and_calibrated_linear_scores(tune_dir, which):
    """linear.scores forced (as calibration times it) or calibrated: the driver calls the
    row or the tile kernel, with onnxruntime's output."""
    from jitort.tuning_ml import LINEAR_SCORES as L
    from jitort.tuning_ml import _synthetic_linear
    m = _synthetic_linear(20, 3)
    x = np.random.default_rng(3).standard_normal((40, 20)).astype(np.float32)
    want = run_onnxruntime(m, {"X": x})
    with tuning.force("linear.scores", which):
        cm = jitort.compile(m, threads=1, tiered=False)
        got = cm(x)
    assert _calls(cm) == [f"ml.linear_{which}_f32"]
    _write_pick(L, L.bucket({"features": 20, "classes": 3}), which)
    cm2 = jitort.compile(m, threads=1, tiered=False)
    for out in (got, cm2(x)):
        np.testing.assert_array_equal(out[0], want[0])
        np.testing.assert_allclose(out[1], want[1], rtol=1e-5, atol=1e-5)
    assert _calls(cm2) == [f"ml.linear_{which}_f32"]


def test_linear_scores_calibration_measures_both(tune_dir, monkeypatch):
    """Calibrating linear.scores compiles the synthetic classifier each way and times it; a
    slowed candidate loses."""
    from jitort.tuning_ml import LINEAR_SCORES as L
    _calibration_measures_both(monkeypatch, L, (8, 3), "tiles")


# trees.bitvector: the bitvector walk or the walk trees.layout picks
def test_trees_bitvector_buckets_and_default_rule():
    """Buckets: interior nodes over depth (percent classes) x depth class, each grid key its
    own problem's bucket (trees of at most 64 leaves: infeasible keys left out); the default
    rule is BITVECTOR_MIN_DEPTH / BITVECTOR_MAX_RATIO."""
    from jitort.codegen.lowerings.trees import BITVECTOR_MAX_RATIO, BITVECTOR_MIN_DEPTH
    from jitort.tuning_ml import TREES_BITVECTOR as B
    assert B.bucket({"nodes": 28.2, "depth": 10.7}) == (250, 11)    # HistGB's 31 leaves
    assert B.bucket({"nodes": 7, "depth": 3}) == (250, 3)           # depth-3 boosting
    assert B.bucket({"nodes": 63, "depth": 6}) == (600, 6)          # complete, 64 leaves
    grid = B.grid()
    assert (600, 3) not in grid and len(grid) == 18
    for key in grid:
        p = B.problem(key)
        assert B.bucket(p) == key and p["nodes"] <= 63
        r, d = p["nodes"] / p["depth"], p["depth"]
        assert B.default(p) == ("bitvector" if d >= BITVECTOR_MIN_DEPTH
                                and r <= BITVECTOR_MAX_RATIO[d > 8] else "walk")
    assert tuning.choose("trees.bitvector", nodes=28.2, depth=10.7) == "bitvector"
    assert tuning.choose("trees.bitvector", nodes=7, depth=3) == "walk"


def test_synthetic_bitvector_trees_have_their_shape():
    """The ensemble calibration times: every tree of the asked leaves and depth, so the
    ensemble falls in the bucket it stands for; it computes what onnxruntime computes."""
    from jitort.codegen.tree_tables import flatten_v3
    from jitort.importer import import_model
    from jitort.tuning_ml import TREES_BITVECTOR as B
    from jitort.tuning_ml import _synthetic_bits
    m = _synthetic_bits(19, 6)
    (node,) = import_model(m).nodes
    flat = flatten_v3(node, "target")
    assert set(flat.leaves) == {19} and set(flat.depth) == {6} and flat.leq == 2
    assert B.bucket({"nodes": 18, "depth": 6}) == (300, 6)
    x = np.random.default_rng(2).standard_normal((33, 20)).astype(np.float32)
    x[::4, 0] = np.nan
    np.testing.assert_allclose(jitort.compile(m, threads=1, tiered=False)(x)[0],
                               run_onnxruntime(m, {"X": x})[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("which", ["bitvector", "walk"])
def test_forced_and_calibrated_trees_bitvector(tune_dir, which):
    """trees.bitvector forced (as calibration times it) or calibrated: the driver calls the
    bitvector walk or a tree walk, with the same output."""
    from jitort.tuning_ml import TREES_BITVECTOR as B
    from jitort.tuning_ml import _synthetic_bits
    _forced_then_calibrated(B, which, _synthetic_bits(19, 6), {"nodes": 18, "depth": 6},
                            "tree_bits.walk_bits", which == "bitvector")


def test_trees_bitvector_calibration_measures_both(tune_dir, monkeypatch):
    """Calibrating trees.bitvector compiles the synthetic ensemble each way and times it; a
    slowed candidate loses."""
    from jitort.tuning_ml import TREES_BITVECTOR as B
    _calibration_measures_both(monkeypatch, B, (150, 6), "bitvector")
