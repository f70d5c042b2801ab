#!/usr/bin/env python
"""Run onnx's BackendTest (CPU cases) through jitort in strict mode and record what passes.

    python scripts/strict_backend.py [-n]      # -n: print the counts, write nothing

Strict mode (``JITORT_STRICT=1``) makes any node that would run in the fallback interpreter an
``UnsupportedOp`` error, so a case passes only when every node of its model ran compiled (or was
removed by the passes, or computed on the host at plan time). The names of the passing cases go
to ``tests/data/backend_strict_passing.txt``; ``tests/test_onnx_backend.py::
test_backend_strict_mode`` reruns exactly those and fails if one no longer passes or if the list
is shorter than its MIN_STRICT_PASSING.
"""
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIST = ROOT / "tests" / "data" / "backend_strict_passing.txt"


def main(argv) -> int:
    dry = "-n" in argv
    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "junit.xml"
        env = dict(os.environ, JITORT_STRICT="1")
        cmd = [sys.executable, "-m", "pytest", "tests/test_onnx_backend.py", "-q", "-m", "slow",
               "-p", "no:cacheprovider", f"--junitxml={xml}"]
        subprocess.run(cmd, cwd=ROOT, env=env, check=False)
        root = ET.parse(xml).getroot()
    passed, failed = [], {}
    for case in root.iter("testcase"):
        name = case.get("name")
        if "OnnxBackend" not in (case.get("classname") or ""):
            continue  # the module's own tests (test_backend_strict_mode itself), not cases
        bad = case.find("failure") if case.find("failure") is not None else case.find("error")
        if case.find("skipped") is not None:
            continue
        if bad is None:
            passed.append(name)
        else:
            failed[name] = (bad.get("message") or "").splitlines()[0][:160] if bad.get("message") else ""
    unsupported = sum("UnsupportedOp" in m or "strict mode" in m for m in failed.values())
    print(f"strict mode: {len(passed)} passed, {len(failed)} failed "
          f"({unsupported} of them with an interpreted node)")
    if not dry:
        LIST.parent.mkdir(parents=True, exist_ok=True)
        LIST.write_text("".join(f"{n}\n" for n in sorted(passed)))
        print(f"wrote {LIST}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
