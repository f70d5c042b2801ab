"""The documentation stays where people look and stays true to the tree.

* README.md is at most 200 lines and carries the test command ``.ci/run`` runs;
* every relative link (and its #anchor) in README.md, docs/, benchmarks/README.md and
  scripts/sweeps/README.md points to an existing file and heading;
* every ``scripts/...`` path those documents name exists, and every ``JITORT_*`` variable the
  code reads is in docs/runtime.md's options table, which is exactly the table
  ``jitort.options.render_table()`` renders from the ``Options`` dataclass;
* ``scripts/perf_tables.py`` turns pytest-benchmark JSON into the tables of docs/performance.md.
"""
import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted([ROOT / "README.md", ROOT / "benchmarks" / "README.md",
               ROOT / "scripts" / "sweeps" / "README.md", *(ROOT / "docs").glob("*.md")])


def _load_perf_tables():
    spec = importlib.util.spec_from_file_location("perf_tables", ROOT / "scripts" / "perf_tables.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _prose(text: str) -> str:
    """The text without fenced code blocks and inline code spans."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    s = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return s.replace(" ", "-")


def _anchors(path: Path) -> set:
    seen, out = {}, set()
    for line in re.sub(r"^```.*?^```", "", path.read_text(), flags=re.S | re.M).splitlines():
        m = re.match(r"^#{1,6} (.*)", line)
        if m:
            slug = _slug(m.group(1))
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def test_readme_short_with_the_ci_test_command():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200, "README.md is over 200 lines: move detail to docs/"
    ci = (ROOT / ".ci" / "run").read_text()
    test_cmd = [line for line in ci.splitlines() if line.startswith("python -m pytest")][-1]
    assert f"```bash\n{test_cmd}\n```" in text, f"README.md must show {test_cmd!r} as a command"


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(ROOT)) for d in DOCS])
def test_relative_links_resolve(doc):
    bad = []
    for target in re.findall(r"\]\(([^)\s]+)\)", _prose(doc.read_text())):
        if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (doc.parent / path).resolve() if path else doc
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            bad.append(f"{target}: no such heading")
    assert not bad, f"{doc.relative_to(ROOT)}: {bad}"


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(ROOT)) for d in DOCS])
def test_named_scripts_exist(doc):
    text = doc.read_text()
    names = set(re.findall(r"scripts/[a-z0-9_/]+\.(?:py|c)\b", text))
    if doc.parent.name == "sweeps":  # its table names the scripts beside it
        names |= {f"scripts/sweeps/{n}" for n in re.findall(r"^\| `(\w+\.py)`", text, re.M)}
    missing = sorted(n for n in names if not (ROOT / n).exists())
    assert not missing, f"{doc.relative_to(ROOT)} names scripts that do not exist: {missing}"


def test_every_environment_variable_in_the_options_table():
    """Each ``JITORT_*`` name the compiler or the kernels read (a quoted string there) is a row of
    docs/runtime.md's options table."""
    used = set()
    for path in [*(ROOT / "jitort").rglob("*.py"), *(ROOT / "kernels").rglob("*.py")]:
        used |= set(re.findall(r"[\"'](JITORT_[A-Z0-9_]+)[\"']", path.read_text()))
    documented = set(re.findall(r"^\| `(JITORT_[A-Z0-9_]+)`", (ROOT / "docs" / "runtime.md").read_text(),
                                re.M))
    assert used, "no JITORT_* variable found: the pattern no longer matches the code"
    assert not used - documented, f"undocumented in docs/runtime.md: {sorted(used - documented)}"


def test_options_table_is_generated_from_the_dataclass():
    """docs/runtime.md holds exactly one options table, the one rendered from ``jitort.Options``
    (``python -m jitort.options`` rewrites it)."""
    from jitort.options import FIELDS, TABLE_BEGIN, TABLE_END, render_table
    text = (ROOT / "docs" / "runtime.md").read_text()
    assert text.count(TABLE_BEGIN) == 1 and text.count(TABLE_END) == 1
    block = text.split(TABLE_BEGIN, 1)[1].split(TABLE_END, 1)[0]
    assert block == "\n" + render_table(), "stale: run python -m jitort.options"
    rows = re.findall(r"^\| `(JITORT_[A-Z0-9_]+)`", block, re.M)
    assert rows == [f.metadata["env"] for f in FIELDS.values()] and len(rows) >= 20


# --- scripts/perf_tables.py --------------------------------------------------------------------
MACHINE = {"machine": "x86_64", "python_version": "3.11.7",
           "cpu": {"brand_raw": "AMD EPYC", "family": 25, "model": 17, "count": 2,
                   "arch_string_raw": "x86_64", "flags": ["avx2", "avx512f", "fma"]}}
COMMIT = {"id": "0123456789abcdef", "dirty": False}


def _model_bench(name, threads, jitort_s, ort_s, ov_s=None):
    extra = {"ort_median_s": ort_s}
    if ov_s is not None:
        extra["openvino_median_s"] = ov_s
    return {"group": f"{name} t{threads}", "name": f"test_model[{name}-{threads}]",
            "fullname": f"benchmarks/test_bench_models.py::test_model[{name}-{threads}]",
            "stats": {"median": jitort_s}, "extra_info": extra}


MODELS_RUN = {"machine_info": MACHINE, "commit_info": COMMIT, "datetime": "2026-12-06T04:46:54+00:00",
              "version": "5.2.3",
              "benchmarks": [_model_bench("resnet18", 1, 0.030, 0.036, 0.034),
                             _model_bench("bert", 1, 0.008, 0.010, 0.011),
                             _model_bench("resnet18", 2, 0.020, 0.016, 0.018),
                             _model_bench("bert", 2, 0.005, 0.005, 0.006)]}

OVERHEAD_RUN = {"machine_info": MACHINE, "commit_info": COMMIT, "datetime": "2026-12-06T05:00:00+00:00",
                "benchmarks": [
                    {"group": "add_1x16", "name": f"test_{e}[add_1x16]", "extra_info": {},
                     "fullname": f"benchmarks/test_bench_overhead.py::test_{e}[add_1x16]",
                     "stats": {"median": t}} for e, t in (("jitort", 3.6e-6), ("ort", 6.0e-6))]}


def test_perf_tables_models():
    pt = _load_perf_tables()
    suite, text = pt.render(MODELS_RUN)
    assert suite == "models"
    assert ("Measured on **AMD EPYC (family 25 model 17; 2 logical CPUs; AVX-512), x86_64**, "
            "2026-12-06 04:46 UTC, commit 0123456") in text
    assert "| bert | 1 | 8.00 | 10.00 | 0.80 | 11.00 | 1.10 |" in text
    assert "| resnet18 | 2 | 20.00 | 16.00 | 1.25 | 18.00 | 1.12 |" in text
    rows = [line for line in text.splitlines() if line.startswith("| ") and "|---" not in line][1:]
    assert [r.split("|")[1:3] for r in rows] == [[" bert ", " 1 "], [" resnet18 ", " 1 "],
                                                 [" bert ", " 2 "], [" resnet18 ", " 2 "]]
    g1 = (0.8 * 30 / 36) ** 0.5
    assert f"at 1 thread(s) over 2 models: **{g1:.2f}** (worst 0.83)" in text
    assert "at 2 thread(s) over 2 models: **1.12** (worst 1.25)" in text
    assert "python -m pytest benchmarks/test_bench_models.py --benchmark-only" in text


def test_perf_tables_rewrites_only_its_block(tmp_path):
    pt = _load_perf_tables()
    doc = tmp_path / "performance.md"
    doc.write_text("intro\n<!-- table:models -->\nold\n<!-- /table:models -->\n"
                   "middle\n<!-- table:overhead -->\nold too\n<!-- /table:overhead -->\nend\n")
    runs = []
    for name, run in (("models.json", MODELS_RUN), ("overhead.json", OVERHEAD_RUN)):
        runs.append(tmp_path / name)
        runs[-1].write_text(json.dumps(run))
    assert pt.main([*map(str, runs), "--doc", str(doc)]) == 0
    text = doc.read_text()
    assert "old" not in text
    assert text.startswith("intro\n<!-- table:models -->\nMeasured on **AMD EPYC")
    assert "\nmiddle\n" in text and text.endswith("<!-- /table:overhead -->\nend\n")
    assert "| add_1x16 | 3.6 | 6.0 | 0.60 |" in text
    assert "over 1 cases: **0.600** (worst 0.60; 0 above 1.5x)" in text
    with pytest.raises(KeyError):  # no block for this suite: nothing is written
        pt.replace_block("no markers here", "ops", "x")


def test_performance_md_has_the_script_blocks():
    text = (ROOT / "docs" / "performance.md").read_text()
    for suite in ("models", "ops", "overhead"):
        assert text.count(f"<!-- table:{suite} -->") == 1
        assert text.count(f"<!-- /table:{suite} -->") == 1
