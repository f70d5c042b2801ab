"""tests/skip_budget.py: a full run past the bound fails with its skips counted by reason; partial
runs and xfails do not count. Each case runs pytest on a small suite in a temporary folder."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

SUITE = {
    "pyproject.toml": """
        [tool.pytest.ini_options]
        testpaths = ["suite"]
        addopts = "-p no:cacheprovider"
        """,
    "suite/__init__.py": "",
    "suite/conftest.py": f"""
        import os, sys
        sys.path.insert(0, {str(ROOT)!r})
        from tests.skip_budget import SkipBudget

        def pytest_configure(config):
            config.pluginmanager.register(SkipBudget(config, int(os.environ["BOUND"])))
        """,
    "suite/test_a.py": """
        import pytest

        @pytest.mark.parametrize("i", range(3))
        def test_skip(i):
            pytest.skip(f"reason {i % 2}")

        @pytest.mark.skipif(True, reason="a marker")
        def test_marked():
            pass

        @pytest.mark.xfail(strict=True, reason="not a skip")
        def test_xfail():
            assert False

        def test_ok():
            pass
        """,
    "suite/test_b.py": """
        import pytest
        pytest.importorskip("jitort_no_such_module")
        """,
}


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    root = tmp_path_factory.mktemp("skip_budget")
    for name, text in SUITE.items():
        (root / name).parent.mkdir(exist_ok=True)
        (root / name).write_text(textwrap.dedent(text))
    return root


def _pytest(suite, bound, *args):
    env = dict(os.environ, BOUND=str(bound))
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", *args], cwd=suite, env=env,
                          capture_output=True, text=True, timeout=120)


def test_full_run_past_the_bound_fails_with_the_reasons_counted(suite):
    r = _pytest(suite, 4)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "5 tests skipped, more than the 4 allowed" in r.stdout, r.stdout
    assert "    2  suite/test_a.py: reason 0" in r.stdout, r.stdout
    assert "    1  suite/test_a.py: a marker" in r.stdout, r.stdout
    assert "suite/test_b.py: could not import 'jitort_no_such_module'" in r.stdout, r.stdout
    assert "not a skip" not in r.stdout.split("too many skipped tests")[1]   # xfail: not counted
    assert _pytest(suite, 4, "suite").returncode == 1    # the testpaths named: a full run too


@pytest.mark.parametrize("args", [["suite/test_a.py"], ["-k", "skip"], ["-m", "not slow"],
                                  ["--deselect", "suite/test_a.py::test_ok"],
                                  ["--ignore", "suite/test_b.py"]])
def test_partial_runs_are_not_bounded(suite, args):
    r = _pytest(suite, 0, *args)
    assert r.returncode in (0, 5) and "too many skipped" not in r.stdout, r.stdout + r.stderr


def test_full_run_within_the_bound_passes(suite):
    r = _pytest(suite, 5)
    assert r.returncode == 0 and "too many skipped" not in r.stdout, r.stdout + r.stderr
