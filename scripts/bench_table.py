#!/usr/bin/env python
"""Run the model benchmarks and rewrite the model table in docs/performance.md.

    python scripts/bench_table.py [--keep RUN.json] [extra pytest args, e.g. -k "bert or resnet"]
    python scripts/bench_table.py --from-json RUN.json   # the table of a saved
        # `pytest benchmarks/test_bench_models.py --benchmark-only --benchmark-json=RUN.json`

Every number in the table is a median from one pytest-benchmark run in which the engines
alternate in blocks, each round a block of onnxruntime calls, one of OpenVINO's when it is
installed, then jitort's call, with idle gaps between (``benchmarks/test_bench_models.py``,
whose docstring gives the protocol and each engine's settings: onnxruntime at its defaults
but for the thread count, spinning on), so the ratio columns are what to trust (the machine is
shared and noisy; absolute times move between runs). The OpenVINO columns (ms, OpenVINO/ORT)
appear when the run timed OpenVINO (``pip install jitort[bench]``). The table itself is made by
``scripts/perf_tables.py`` (between ``<!-- table:models -->`` and ``<!-- /table:models -->``),
which names the CPU, the date and the commit of the run.
"""
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import perf_tables  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def main(argv):
    if argv[:1] == ["--from-json"]:  # the table of an earlier run's --benchmark-json file
        return perf_tables.main([argv[1], "--table", "models"])
    keep = None
    if argv[:1] == ["--keep"]:
        keep, argv = Path(argv[1]), argv[2:]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "models.json"
        cmd = [sys.executable, "-m", "pytest", "benchmarks/test_bench_models.py",
               "--benchmark-only", "-q", f"--benchmark-json={out}", *argv]
        subprocess.run(cmd, cwd=ROOT, check=False)
        if keep is not None:
            shutil.copyfile(out, keep)
        return perf_tables.main([str(out), "--table", "models"])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
