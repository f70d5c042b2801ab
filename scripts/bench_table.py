#!/usr/bin/env python
"""Run the model benchmarks and rewrite the table in benchmarks/README.md.

    python scripts/bench_table.py [extra pytest args, e.g. -k "bert or resnet"]
    python scripts/bench_table.py --from-json RUN.json   # the table of a saved
        # `pytest benchmarks/test_bench_models.py --benchmark-only --benchmark-json=RUN.json`

Every number in the table is a median from one pytest-benchmark run in which jitort and
onnxruntime alternate call by call (``benchmarks/test_bench_models.py``), so the ratio column
is what to trust (the machine is shared and noisy; absolute times move between runs).
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
    groups = {}
    for b in data["benchmarks"]:
        g = groups.setdefault(b["group"], {})
        g["jitort"] = b["stats"]["median"] * 1e3
        g["ort"] = b["extra_info"]["ort_median_s"] * 1e3  # interleaved with jitort's rounds
    rows, ratios = [], {1: [], 2: []}
    for group in sorted(groups, key=lambda g: (g.split()[-1], g)):
        t = groups[group]
        if "jitort" not in t or "ort" not in t:
            continue
        name, threads = group.rsplit(" t", 1)
        r = t["jitort"] / t["ort"]
        ratios[int(threads)].append(r)
        rows.append(f"| {name} | {threads} | {t['jitort']:.2f} | {t['ort']:.2f} | {r:.2f} |")
    lines = ["| model | threads | jitort ms | onnxruntime ms | jitort/ORT |", "|---|---|---|---|---|",
             *rows, ""]
    for th, rs in ratios.items():
        if rs:
            geo = math.exp(sum(map(math.log, rs)) / len(rs))
            lines.append(f"Geomean jitort/ORT at {th} thread(s) over {len(rs)} models: **{geo:.2f}** "
                         f"(worst {max(rs):.2f}).  ")
    lines.append(f"\nProduced by `{made_by}`.")
    text = README.read_text()
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    README.write_text(head + BEGIN + "\n" + "\n".join(lines) + "\n" + END + tail)
    print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1:])
