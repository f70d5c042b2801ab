"""skl2onnx's own test suite run unchanged on onnxruntime and on jitort.InferenceSession.

skl2onnx checks every converted model through ``onnxruntime.InferenceSession``. This script
downloads skl2onnx's sdist (tests included) into a scratch directory outside the repository,
installs scikit-learn and skl2onnx into a virtual environment there that sees this Python's
packages (jitort, onnxruntime, numba), and runs a subset of the test files twice:

- ``onnxruntime``: as published;
- ``jitort``: with a pytest plugin, written to the scratch directory, that replaces
  ``onnxruntime.InferenceSession`` by ``jitort.InferenceSession`` before any test module imports
  it (nothing in skl2onnx is edited).

It prints passed / failed / errors / skipped under each runtime and the tests whose outcome
differs. Usage::

    python scripts/client_tests.py [--workdir /tmp/jitort_client] [--all] [FILE ...]

``--all`` runs every test file (far longer than the default subset); FILE names test files of
skl2onnx's ``tests/`` directory.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tarfile
import time
import venv
import xml.etree.ElementTree as ET
from pathlib import Path

SKL2ONNX = "1.20.0"
#: linear models and ZipMap, trees and forests (ai.onnx.ml ops), scalers, encoders, pipelines,
#: neural nets, clustering, the algebra API, and the tests of error handling
SUBSET = [
    "test_sklearn_glm_classifier_converter.py", "test_sklearn_glm_regressor_converter.py",
    "test_sklearn_scaler_converter.py", "test_sklearn_decision_tree_converters.py",
    "test_sklearn_naive_bayes_converter.py", "test_sklearn_k_means_converter.py",
    "test_sklearn_pca_converter.py", "test_sklearn_one_hot_encoder_converter.py",
    "test_sklearn_pipeline.py", "test_sklearn_mlp_converter.py",
    "test_sklearn_normalizer_converter.py", "test_sklearn_imputer_converter.py",
    "test_sklearn_label_encoder_converter.py", "test_sklearn_binarizer_converter.py",
    "test_sklearn_polynomial_features_converter.py", "test_sklearn_feature_union.py",
    "test_algebra_onnx_operators.py", "test_validation_exceptions.py", "test_onnxruntime.py",
]

PLUGIN = '''"""pytest plugin: skl2onnx's tests get jitort.InferenceSession for onnxruntime's."""
import onnxruntime
import onnxruntime.capi.onnxruntime_inference_collection as _collection
import jitort

onnxruntime.InferenceSession = jitort.InferenceSession
_collection.InferenceSession = jitort.InferenceSession
'''


def sh(*cmd, **kw):
    print("+", " ".join(map(str, cmd)), flush=True)
    return subprocess.run([str(c) for c in cmd], check=True, **kw)


#: pytest-xdist's two workers: a test that kills its process (onnx's shape inference segfaults
#: on some converted models, see docs/session.md) counts as failed and the run goes on
def prepare(work: Path) -> tuple[Path, Path]:
    """The unpacked sdist's tests directory and the virtual environment's python."""
    work.mkdir(parents=True, exist_ok=True)
    src = work / f"skl2onnx-{SKL2ONNX}"
    if not src.is_dir():
        sh(sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
           f"skl2onnx=={SKL2ONNX}", "-d", work)
        with tarfile.open(work / f"skl2onnx-{SKL2ONNX}.tar.gz") as tar:
            tar.extractall(work, filter="data")
    py = work / "venv" / "bin" / "python"
    if not py.exists():
        venv.create(work / "venv", system_site_packages=True, with_pip=True)
        sh(py, "-m", "pip", "install", "-q", "scikit-learn", f"skl2onnx=={SKL2ONNX}",
           "pytest-xdist")
    (work / "plugin").mkdir(exist_ok=True)
    (work / "plugin" / "jitort_swap.py").write_text(PLUGIN)
    return src / "tests", py


def outcomes(xml: Path) -> dict[str, str]:
    """test id -> passed / failed / error / skipped, from pytest's JUnit XML."""
    result = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        tid = f"{case.get('classname')}::{case.get('name')}"
        kinds = [c.tag for c in case]
        result[tid] = ("failed" if "failure" in kinds else "error" if "error" in kinds
                       else "skipped" if "skipped" in kinds else "passed")
    return result


def run(tests: Path, py: Path, files: list[str], runtime: str, work: Path) -> dict[str, str]:
    xml = work / f"results_{runtime}.xml"
    cmd = [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}",
           "-o", "addopts=", "-n", "2", *files]
    env = None
    if runtime == "jitort":
        import os
        env = dict(os.environ, PYTHONPATH=str(work / "plugin"))
        cmd[3:3] = ["-p", "jitort_swap"]
    start = time.perf_counter()
    log = work / f"log_{runtime}.txt"
    with open(log, "w") as out:
        subprocess.run([str(c) for c in cmd], cwd=tests.parent, env=env, stdout=out,
                       stderr=subprocess.STDOUT)
    print(f"{runtime}: {time.perf_counter() - start:.0f} s (pytest's output: {log})", flush=True)
    if not xml.exists():
        raise SystemExit(f"pytest wrote no results under {runtime}; see {log}")
    return outcomes(xml)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/jitort_client"))
    ap.add_argument("--all", action="store_true", help="every test file of skl2onnx")
    ap.add_argument("files", nargs="*")
    args = ap.parse_args(argv)
    tests, py = prepare(args.workdir)
    files = (sorted(p.name for p in tests.glob("test_*.py")) if args.all
             else args.files or SUBSET)
    files = [f"tests/{f}" for f in files]
    results = {rt: run(tests, py, files, rt, args.workdir) for rt in ("onnxruntime", "jitort")}
    kinds = ("passed", "failed", "error", "skipped")
    print(f"skl2onnx {SKL2ONNX}, {len(files)} test files")
    for rt, res in results.items():
        counts = {k: sum(v == k for v in res.values()) for k in kinds}
        print(f"{rt:12s} " + "  ".join(f"{k} {n}" for k, n in counts.items()))
    ort, jit = results["onnxruntime"], results["jitort"]
    differ = sorted(t for t in ort.keys() | jit.keys() if ort.get(t) != jit.get(t))
    print(f"{len(differ)} test(s) with a different outcome (onnxruntime -> jitort):")
    for t in differ:
        print(f"  {t}: {ort.get(t)} -> {jit.get(t)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
