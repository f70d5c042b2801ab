"""The command line: run, explain, warmup, bench, cache (in-process, on a small model)."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from jitort.apps import cli

from .helpers import numba_cache_beside_generated_code
from .test_concurrency import _mlp

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def mlp_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli") / "mlp.onnx"
    onnx.save(_mlp(), str(path))
    return str(path)


def test_parse_shapes():
    assert cli.parse_shapes([]) == [{}]
    assert cli.parse_shapes(["ids=1x128", "mask=1x128"]) == [{"ids": (1, 128), "mask": (1, 128)}]
    assert cli.parse_shapes(["ids=1x128", "ids=8x64", "m=2"]) == [{"ids": (1, 128), "m": (2,)},
                                                                  {"ids": (8, 64), "m": (2,)}]
    with pytest.raises(SystemExit):
        cli.parse_shapes(["ids"])
    with pytest.raises(SystemExit):
        cli.parse_shapes(["ids=1xA"])


def test_run_with_input_file_and_shape(mlp_file, tmp_path, capsys):
    x = np.random.default_rng(0).standard_normal((5, 32)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    assert cli.main(["run", mlp_file, "--input", f"x={tmp_path / 'x.npy'}"]) == 0
    assert "y: float32[5, 32]" in capsys.readouterr().out
    assert cli.main(["run", mlp_file, "--shape", "x=3x32"]) == 0
    assert "y: float32[3, 32]" in capsys.readouterr().out


def test_run_profile_writes_a_trace(mlp_file, tmp_path, capsys):
    trace = tmp_path / "t.json"
    assert cli.main(["run", mlp_file, "--profile", str(trace)]) == 0
    assert trace.exists() and f"profile: {trace}" in capsys.readouterr().out


def test_explain_reports_everything_the_issue_asks_for(mlp_file, tmp_path, capsys):
    trace = tmp_path / "explain.json"
    assert cli.main(["explain", mlp_file, "--repeat", "3", "--trace", str(trace)]) == 0
    out = capsys.readouterr().out
    assert "passes applied: fuse_matmul_add x1" in out
    assert "interpreted nodes (0): none" in out
    assert "source: " in out and "workspace" in out and "liveness lower bound" in out
    assert "machine peak" in out and "GFLOP/s" in out
    table = out[out.index("kernel "):]
    for op in ("MatMulBias", "Tanh", "MatMul", "Add", "LayerNormalization"):
        assert op in table
    assert "total: " in out and "of peak" in out
    assert trace.exists()


def test_warmup_fills_the_cache_and_reports_it(mlp_file, tmp_path, monkeypatch, capsys):
    # a fresh process: this one has the model's modules in memory already
    monkeypatch.setenv("JITORT_CACHE_DIR", str(tmp_path / "cache"))
    numba_cache_beside_generated_code(monkeypatch)
    p = subprocess.run([sys.executable, "-m", "jitort", "warmup", mlp_file, "--shape", "x=2x32",
                        "--shape", "x=7x32", "-q"], cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "mlp:" in p.stdout and "kernels compiled" in p.stdout and "from cache" in p.stdout
    assert list((tmp_path / "cache").glob("gen-*/jitort_gen/driver_*.py"))
    assert list((tmp_path / "cache").glob("gen-*/jitort_gen/__pycache__/*.nbc"))
    assert cli.main(["cache", "info"]) == 0
    info = capsys.readouterr().out
    assert "generated modules" in info and "(current)" in info
    assert cli.main(["cache", "clear"]) == 0
    assert not (tmp_path / "cache").exists()


def test_cache_prune_removes_only_the_folders_of_other_sources(tmp_path, monkeypatch, capsys):
    from jitort.codegen.module import gen_hash
    from jitort.kernels import _cache
    monkeypatch.setenv("JITORT_CACHE_DIR", str(tmp_path / "gen"))
    monkeypatch.setenv("JITORT_KERNEL_CACHE_DIR", str(tmp_path / "lib"))
    keep = [tmp_path / "gen" / f"gen-{gen_hash()}", tmp_path / "lib" / "kernels" /
            _cache.folder("conv")]
    drop = [tmp_path / "gen" / "gen-0000000000000000", tmp_path / "lib" / "kernels-00000000",
            tmp_path / "lib" / "kernels" / "conv-0000000000000000"]
    for d in keep + drop:
        d.mkdir(parents=True)
        (d / "x.nbc").write_bytes(b"0" * 10)
    assert cli.main(["cache", "info"]) == 0
    info = capsys.readouterr().out
    assert "1 of " in info and "3 stale folders" in info
    assert cli.main(["cache", "prune"]) == 0
    assert all(d.exists() for d in keep) and not any(d.exists() for d in drop)


def test_bench_prints_a_table_against_onnxruntime(mlp_file, capsys):
    pytest.importorskip("onnxruntime")
    assert cli.main(["bench", mlp_file, "--repeat", "3"]) == 0
    out = capsys.readouterr().out
    assert "jitort ms" in out and "ort ms" in out
    row = next(line for line in out.splitlines() if line.startswith("mlp"))
    assert "nan" not in row
    assert "geomean jitort/ort" in out


def test_module_and_script_entry_points():
    for cmd in ([sys.executable, "-m", "jitort", "--help"],
                [sys.executable, "scripts/warmup.py", "--help"]):
        p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        assert "warmup" in p.stdout


def test_memory_writes_the_plan_png(mlp_file, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    png = tmp_path / "plan.png"
    assert cli.main(["memory", mlp_file, "--shape", "x=5x32", "--png", str(png)]) == 0
    out = capsys.readouterr().out
    assert "workspace" in out and "lower bound" in out and "(1.000x)" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
