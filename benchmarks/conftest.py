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


def _geomean(xs):
    return math.exp(sum(map(math.log, xs)) / len(xs))


def pytest_terminal_summary(terminalreporter, config):
    session = getattr(config, "_benchmarksession", None)
    if session is None or not session.benchmarks:
        return
    by_group = {}
    for bench in session.benchmarks:
        runtime = "ort" if "ort" in bench.name.split("[")[0].split("_") else "jitort"
        by_group.setdefault(bench.group, {})[runtime] = bench.stats.median
        # measured in blocks between jitort's rounds (test_bench_models.py, test_bench_ops.py)
        for key, extra in (("ort", "ort_median_s"), ("openvino", "openvino_median_s")):
            if bench.extra_info.get(extra) is not None:
                by_group[bench.group][key] = bench.extra_info[extra]
    tr = terminalreporter
    tr.write_sep("=", "jitort / onnxruntime (median latency, same run)")
    ratios, ov_ratios = [], []
    for group, t in sorted(by_group.items()):
        if "jitort" in t and "ort" in t:
            r = t["jitort"] / t["ort"]
            ratios.append(r)
            ov = ""
            if "openvino" in t:  # test_bench_models.py, when openvino is installed
                ov_ratios.append(t["openvino"] / t["ort"])
                ov = (f"   openvino {t['openvino'] * 1e6:10.1f} us   "
                      f"openvino/ort {ov_ratios[-1]:6.3f}")
            tr.write_line(f"{group:<40} jitort {t['jitort'] * 1e6:10.1f} us   "
                          f"ort {t['ort'] * 1e6:10.1f} us   ratio {r:6.3f}{ov}")
    if ratios:
        tr.write_line(f"geomean ratio over {len(ratios)} groups: {_geomean(ratios):.3f}")
    if ov_ratios:
        tr.write_line(f"geomean openvino/ort over {len(ov_ratios)} groups: "
                      f"{_geomean(ov_ratios):.3f}")
