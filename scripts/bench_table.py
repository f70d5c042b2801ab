#!/usr/bin/env python
"""Run the model benchmarks and rewrite the table in benchmarks/README.md.

    python scripts/bench_table.py [extra pytest args, e.g. -k "bert or resnet"]
    python scripts/bench_table.py --from-json RUN.json   # the table of a saved
        # `pytest benchmarks/test_bench_models.py --benchmark-only --benchmark-json=RUN.json`

Every number in the table is a median from one pytest-benchmark run in which the engines
alternate in blocks, each round a block of onnxruntime calls, one of OpenVINO's when it is
installed, then jitort's call, with idle gaps between (``benchmarks/test_bench_models.py``,
whose docstring gives the protocol and each engine's settings: onnxruntime at its defaults
but for the thread count, spinning on), so the ratio columns are what to trust (the machine is
shared and noisy; absolute times move between runs). The OpenVINO columns (ms, OpenVINO/ORT)
appear when the run timed OpenVINO (``pip install jitort[bench]``); a model OpenVINO could not
run is listed under the table with its error.
"""
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "benchmarks" / "README.md"
BEGIN, END = "<!-- table:begin -->", "<!-- table:end -->"


def _geomean(xs):
    return math.exp(sum(map(math.log, xs)) / len(xs))


def main(argv):
    made_by = f"python scripts/bench_table.py {' '.join(argv)}".rstrip()
    if argv[:1] == ["--from-json"]:  # the table of an earlier run's --benchmark-json file
        data = json.loads(Path(argv[1]).read_text())
        made_by = ("python -m pytest benchmarks/test_bench_models.py --benchmark-only "
                   "--benchmark-json=RUN.json` then `python scripts/bench_table.py --from-json "
                   "RUN.json")
    else:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "bench.json"
            cmd = [sys.executable, "-m", "pytest", "benchmarks/test_bench_models.py",
                   "--benchmark-only", "-q", f"--benchmark-json={out}", *argv]
            subprocess.run(cmd, cwd=ROOT, check=False)
            data = json.loads(out.read_text())
    groups, ov_errors = {}, {}
    for b in data["benchmarks"]:
        g = groups.setdefault(b["group"], {})
        g["jitort"] = b["stats"]["median"] * 1e3
        extra = b["extra_info"]
        g["ort"] = extra["ort_median_s"] * 1e3  # in blocks between jitort's rounds
        if extra.get("openvino_median_s") is not None:
            g["openvino"] = extra["openvino_median_s"] * 1e3
        if extra.get("openvino_error"):
            ov_errors[b["group"]] = extra["openvino_error"]
    with_ov = any("openvino" in t for t in groups.values())
    rows, ratios, ov_ratios = [], {1: [], 2: []}, {1: [], 2: []}
    for group in sorted(groups, key=lambda g: (g.split()[-1], g)):
        t = groups[group]
        if "jitort" not in t or "ort" not in t:
            continue
        name, threads = group.rsplit(" t", 1)
        r = t["jitort"] / t["ort"]
        ratios[int(threads)].append(r)
        row = f"| {name} | {threads} | {t['jitort']:.2f} | {t['ort']:.2f} | {r:.2f} |"
        if with_ov and "openvino" in t:
            ov_ratios[int(threads)].append(t["openvino"] / t["ort"])
            row += f" {t['openvino']:.2f} | {ov_ratios[int(threads)][-1]:.2f} |"
        elif with_ov:
            row += " - | - |"
        rows.append(row)
    header = "| model | threads | jitort ms | onnxruntime ms | jitort/ORT |"
    rule = "|---|---|---|---|---|"
    if with_ov:
        header += " OpenVINO ms | OpenVINO/ORT |"
        rule += "---|---|"
    lines = [header, rule, *rows, ""]
    for th, rs in ratios.items():
        if rs:
            lines.append(f"Geomean jitort/ORT at {th} thread(s) over {len(rs)} models: "
                         f"**{_geomean(rs):.2f}** (worst {max(rs):.2f}).  ")
    for th, rs in ov_ratios.items():
        if rs:
            lines.append(f"Geomean OpenVINO/ORT at {th} thread(s) over {len(rs)} models: "
                         f"**{_geomean(rs):.2f}**.  ")
    if ov_errors:
        lines.append("\nOpenVINO did not run (no time recorded):\n")
        lines += [f"- {g}: {' '.join(e.split())[:240]}" for g, e in sorted(ov_errors.items())]
    lines.append(f"\nProduced by `{made_by}`.")
    text = README.read_text()
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    README.write_text(head + BEGIN + "\n" + "\n".join(lines) + "\n" + END + tail)
    print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1:])
