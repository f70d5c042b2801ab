"""Benchmarks run with pytest-benchmark; every group pairs jitort with onnxruntime in one run.

At the end of the session a table of ratios (jitort median / onnxruntime median, per group) is
printed: the number every performance claim in this project quotes.
"""
import math
import os
import sys
from pathlib import Path

# benchmarks time the compiled program: no interpreter tier (jitort/tiering.py)
os.environ.setdefault("JITORT_TIERED", "0")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def pytest_terminal_summary(terminalreporter, config):
    session = getattr(config, "_benchmarksession", None)
    if session is None or not session.benchmarks:
        return
    by_group = {}
    for bench in session.benchmarks:
        runtime = "ort" if "ort" in bench.name.split("[")[0].split("_") else "jitort"
        by_group.setdefault(bench.group, {})[runtime] = bench.stats.median
        ort_s = bench.extra_info.get("ort_median_s")  # measured interleaved with jitort's rounds
        if ort_s is not None:
            by_group[bench.group]["ort"] = ort_s
    tr = terminalreporter
    tr.write_sep("=", "jitort / onnxruntime (median latency, same run)")
    ratios = []
    for group, t in sorted(by_group.items()):
        if "jitort" in t and "ort" in t:
            r = t["jitort"] / t["ort"]
            ratios.append(r)
            tr.write_line(f"{group:<40} jitort {t['jitort'] * 1e6:10.1f} us   "
                          f"ort {t['ort'] * 1e6:10.1f} us   ratio {r:6.3f}")
    if ratios:
        tr.write_line(f"geomean ratio over {len(ratios)} groups: "
                      f"{math.exp(sum(map(math.log, ratios)) / len(ratios)):.3f}")
