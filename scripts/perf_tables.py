#!/usr/bin/env python
"""Rewrite the tables of docs/performance.md from saved pytest-benchmark results.

    python -m pytest benchmarks/test_bench_models.py --benchmark-only --benchmark-json=models.json
    python scripts/perf_tables.py models.json [ops.json overhead.json ...] [--doc PATH] [--print]

Each RESULT.json is what ``--benchmark-json`` (or ``--benchmark-autosave``, under ``.benchmarks/``)
writes for one suite of ``benchmarks/``. The suite is recognised from the tests' file name and
its table replaces the text between ``<!-- table:SUITE -->`` and ``<!-- /table:SUITE -->`` in the
document (``--table NAME`` picks another marker for a single file):

* ``models`` (``test_bench_models.py``): per model and thread count, jitort's median, onnxruntime's
  (and OpenVINO's when the run timed it), the ratios, and the geomean per thread count;
* any other suite (``ops``, ``overhead``, ...): per group, jitort's and onnxruntime's medians in
  microseconds and the ratio, the geomean, the cases above 1.5x.

Pairing follows ``benchmarks/conftest.py``: onnxruntime's time is a test whose name has ``ort``
as a word, or ``extra_info["ort_median_s"]`` (the suites that alternate engines inside one test).
Above each table: the CPU (pytest-benchmark's ``machine_info``: py-cpuinfo's brand, family and
model, logical CPUs, widest vector ISA), the run's date, commit and Python, and the command that
regenerates it. Nothing in a table is typed by hand.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "performance.md"

#: test file stem -> marker name
SUITES = {"test_bench_models": "models", "test_bench_ops": "ops",
          "test_bench_overhead": "overhead", "test_bench_gemm_models": "gemm_models",
          "test_bench_ml": "ml", "test_bench_variants": "variants"}


def geomean(xs):
    return math.exp(sum(map(math.log, xs)) / len(xs))


def suite_of(data: dict) -> str:
    """Marker name of a result file: from the file of its first benchmark's test."""
    for b in data.get("benchmarks", []):
        stem = Path(b.get("fullname", "").split("::")[0]).stem
        if stem:
            return SUITES.get(stem, stem.removeprefix("test_bench_"))
    raise ValueError("no benchmarks in the result file")


def cpu_name(machine: dict) -> str:
    """'AMD EPYC (family 25 model 17; 2 logical CPUs; AVX-512), x86_64' from ``machine_info``."""
    cpu = machine.get("cpu") or {}
    brand = cpu.get("brand_raw") or machine.get("processor") or "unknown CPU"
    details = []
    if "family" in cpu and "model" in cpu:
        details.append(f"family {cpu['family']} model {cpu['model']}")
    if cpu.get("count"):
        details.append(f"{cpu['count']} logical CPUs")
    flags = set(cpu.get("flags") or ())
    isa = next((name for flag, name in (("avx512f", "AVX-512"), ("avx2", "AVX2"), ("asimd", "NEON"),
                                        ("sse4_2", "SSE4.2")) if flag in flags), None)
    if isa:
        details.append(isa)
    arch = machine.get("machine") or cpu.get("arch_string_raw") or ""
    text = brand + (f" ({'; '.join(details)})" if details else "")
    return text + (f", {arch}" if arch else "")


def provenance(data: dict, label: str | None = None) -> str:
    """One line naming the CPU, the date, the commit and Python of a run."""
    machine = data.get("machine_info") or {}
    when = str(data.get("datetime", "unknown date"))
    m = re.match(r"(\d{4}-\d\d-\d\d)T(\d\d:\d\d)", when)
    when = f"{m.group(1)} {m.group(2)} UTC" if m else when
    commit = data.get("commit_info") or {}
    rev = (commit.get("id") or "unknown")[:7]
    if commit.get("dirty"):
        rev += " with uncommitted changes"
    py = machine.get("python_version", "?")
    label = f" ({label})" if label else ""
    return f"Measured on **{cpu_name(machine)}**, {when}, commit {rev}, Python {py}{label}."


def pairs(data: dict) -> dict:
    """{group: {"jitort": s, "ort": s[, "openvino": s]}} as benchmarks/conftest.py pairs them."""
    groups: dict = {}
    for b in data["benchmarks"]:
        g = groups.setdefault(b["group"], {})
        name = b["name"].split("[")[0]
        g["ort" if "ort" in name.split("_") else "jitort"] = b["stats"]["median"]
        extra = b.get("extra_info") or {}
        for key, field in (("ort", "ort_median_s"), ("openvino", "openvino_median_s")):
            if extra.get(field) is not None:
                g[key] = extra[field]
        if extra.get("openvino_error"):
            g["openvino_error"] = extra["openvino_error"]
    return groups


def models_table(data: dict) -> list[str]:
    """The 19-model table: one row per (model, threads), geomeans per thread count."""
    groups = {g: t for g, t in pairs(data).items() if "jitort" in t and "ort" in t}
    with_ov = any("openvino" in t for t in groups.values())
    header = "| model | threads | jitort ms | onnxruntime ms | jitort/ORT |"
    rule = "|---|---|---|---|---|"
    if with_ov:
        header += " OpenVINO ms | OpenVINO/ORT |"
        rule += "---|---|"
    rows, ratios, ov_ratios = [], {}, {}

    def key(group):
        name, _, threads = group.rpartition(" t")
        return (int(threads) if threads.isdigit() else 0, name)

    for group in sorted(groups, key=key):
        t = groups[group]
        name, _, threads = group.rpartition(" t")
        if not threads.isdigit():
            name, threads = group, "?"
        r = t["jitort"] / t["ort"]
        ratios.setdefault(threads, []).append(r)
        row = f"| {name} | {threads} | {t['jitort'] * 1e3:.2f} | {t['ort'] * 1e3:.2f} | {r:.2f} |"
        if with_ov and "openvino" in t:
            ov_ratios.setdefault(threads, []).append(t["openvino"] / t["ort"])
            row += f" {t['openvino'] * 1e3:.2f} | {ov_ratios[threads][-1]:.2f} |"
        elif with_ov:
            row += " - | - |"
        rows.append(row)
    lines = [header, rule, *rows, ""]
    for th, rs in ratios.items():
        lines.append(f"Geomean jitort/ORT at {th} thread(s) over {len(rs)} models: "
                     f"**{geomean(rs):.2f}** (worst {max(rs):.2f}).  ")
    for th, rs in ov_ratios.items():
        lines.append(f"Geomean OpenVINO/ORT at {th} thread(s) over {len(rs)} models: "
                     f"**{geomean(rs):.2f}**.  ")
    errors = {g: t["openvino_error"] for g, t in pairs(data).items() if "openvino_error" in t}
    if errors:
        lines += ["", "OpenVINO did not run (no time recorded):", ""]
        lines += [f"- {g}: {' '.join(e.split())[:240]}" for g, e in sorted(errors.items())]
    return lines


def pairs_table(data: dict) -> list[str]:
    """Any other suite: per group, both medians in microseconds and their ratio."""
    groups = {g: t for g, t in pairs(data).items() if "jitort" in t and "ort" in t}
    lines = ["| case | jitort us | onnxruntime us | jitort/ORT |", "|---|---|---|---|"]
    ratios = []
    for group in sorted(groups):
        t = groups[group]
        r = t["jitort"] / t["ort"]
        ratios.append(r)
        lines.append(f"| {group} | {t['jitort'] * 1e6:.1f} | {t['ort'] * 1e6:.1f} | {r:.2f} |")
    if ratios:
        slow = sum(r > 1.5 for r in ratios)
        lines += ["", f"Geomean jitort/ORT over {len(ratios)} cases: **{geomean(ratios):.3f}** "
                      f"(worst {max(ratios):.2f}; {slow} above 1.5x)."]
    return lines


def test_file(data: dict) -> str:
    """The suite's test file, as the command that measures it names it."""
    for b in data.get("benchmarks", []):
        name = b.get("fullname", "").split("::")[0]
        if name:
            return name
    return "benchmarks/test_bench_SUITE.py"


def render(data: dict, suite: str | None = None, label: str | None = None) -> tuple[str, str]:
    """(marker name, the markdown that goes between the markers) of one result file."""
    suite = suite or suite_of(data)
    body = models_table(data) if suite == "models" else pairs_table(data)
    table = "" if suite == suite_of(data) else f" --table {suite}"
    how = (f"Reproduce: `python -m pytest {test_file(data)} --benchmark-only "
           f"--benchmark-json=RUN.json`, then `python scripts/perf_tables.py RUN.json{table}`.")
    return suite, "\n".join([provenance(data, label), "", *body, "", how])


def replace_block(doc: str, suite: str, body: str) -> str:
    """``doc`` with the text between the suite's markers replaced (markers kept)."""
    begin, end = f"<!-- table:{suite} -->", f"<!-- /table:{suite} -->"
    if begin not in doc or end not in doc:
        raise KeyError(f"no {begin} ... {end} block in the document")
    head, _, rest = doc.partition(begin)
    _, _, tail = rest.partition(end)
    return f"{head}{begin}\n{body}\n{end}{tail}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("results", nargs="+", type=Path, help="pytest-benchmark JSON files")
    ap.add_argument("--doc", type=Path, default=DOC, help="document to rewrite (%(default)s)")
    ap.add_argument("--table", default=None, help="marker name (default: from the suite)")
    ap.add_argument("--label", default=None,
                    help="what the JSON does not record, e.g. 'JITORT_BENCH_THREADS=1'")
    ap.add_argument("--print", action="store_true", help="print the tables, write nothing")
    args = ap.parse_args(argv)
    if args.table and len(args.results) > 1:
        ap.error("--table applies to a single result file")
    doc = None if args.print else args.doc.read_text()
    for path in args.results:
        data = json.loads(path.read_text())
        suite, body = render(data, args.table, args.label)
        if doc is None:
            print(f"<!-- table:{suite} -->\n{body}\n<!-- /table:{suite} -->")
        else:
            doc = replace_block(doc, suite, body)
            print(f"{args.doc}: table:{suite} from {path}")
    if doc is not None:
        args.doc.write_text(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
