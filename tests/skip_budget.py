"""A bound on the number of skipped tests in a full run of the suite (a pytest plugin).

A test that skips passes CI without checking anything: a missing optional package, a data source
that moved, a condition that stopped holding on the CI machine can each turn hundreds of tests
into skips with the run still green. ``SkipBudget`` counts the skips of a full run and, past the
bound tests/conftest.py commits (``MAX_SKIPS``), fails the session (exit status 1) with the skip
reasons grouped and counted.

It applies to full runs only, where the count means something. A run is full when all of these
hold; anything else (a file, a directory, ``-k``, ``-m``, ``--deselect``, ``-x`` stopping early,
an interrupt) is a partial run, and the bound is not checked:

* the tests come from ``testpaths`` (``python -m pytest`` from the repository root with no path,
  as .ci/run runs it: ``config.args_source`` is ``TESTPATHS``), or the paths given are exactly
  the ``testpaths`` directories;
* nothing was deselected (``pytest_deselected`` never called: covers ``-k``, ``-m``,
  ``--deselect`` and any plugin that filters) and no ``--ignore``/``--ignore-glob``;
* every collected test ran to its teardown, and the session was not stopped
  (``-x``/``--maxfail``/interrupt).

Skips are counted as pytest's summary counts them: tests skipped at setup or in the call, and
modules skipped at collection (``importorskip`` at module level), never xfails (which pytest
reports as skipped with ``wasxfail`` set).
"""
from __future__ import annotations

import collections
from pathlib import Path

import pytest


class SkipBudget:
    def __init__(self, config: pytest.Config, max_skips: int):
        self.config = config
        self.max_skips = max_skips
        self.skips: list[tuple[str, str]] = []   # (file, reason)
        self.deselected = False
        self.finished = 0
        self.verdict: str | None = None           # the failure message, once decided

    # -- what ran ---------------------------------------------------------------------------
    def pytest_deselected(self, items):
        if items:
            self.deselected = True

    def pytest_collectreport(self, report):
        if report.skipped:
            self.skips.append(self._skip(report))

    def pytest_runtest_logreport(self, report):
        if report.skipped and not hasattr(report, "wasxfail"):
            self.skips.append(self._skip(report))
        if report.when == "teardown":
            self.finished += 1

    @staticmethod
    def _skip(report) -> tuple[str, str]:
        where = report.nodeid.split("::")[0] or "?"
        if isinstance(report.longrepr, tuple):            # (path, line, "Skipped: reason")
            reason = str(report.longrepr[2])
        else:
            reason = str(report.longrepr)
        return where, reason.removeprefix("Skipped: ")

    # -- is this the full suite? ------------------------------------------------------------
    def partial_because(self, session: pytest.Session) -> str | None:
        """Why this run is not the full default suite, or None when it is."""
        config = self.config
        testpaths = {(config.rootpath / p).resolve() for p in config.getini("testpaths")}
        if config.args_source != pytest.Config.ArgsSource.TESTPATHS:
            given = {(config.invocation_params.dir / a).resolve() for a in config.args}
            if not testpaths or given != testpaths:
                return f"paths given: {config.args}"
        if config.option.keyword or config.option.markexpr:
            return "-k or -m given"
        if self.deselected:
            return "tests deselected"
        if config.option.ignore or config.option.ignore_glob:
            return "--ignore given"
        if session.shouldstop or session.shouldfail:
            return "stopped early"
        if self.finished != len(session.items):
            return f"{self.finished} of {len(session.items)} tests ran"
        return None

    # -- the verdict ------------------------------------------------------------------------
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus):
        if len(self.skips) <= self.max_skips or self.partial_because(session):
            return
        groups = collections.Counter(self.skips)
        lines = [f"{n:5d}  {where}: {reason}"
                 for (where, reason), n in sorted(groups.items(), key=lambda kv: (-kv[1], kv[0]))]
        self.verdict = (
            f"{len(self.skips)} tests skipped, more than the {self.max_skips} allowed "
            f"(MAX_SKIPS in {Path(__file__).with_name('conftest.py')}: it lists the expected "
            "skips; CI installs the [test,ray] extras). Skip reasons, counted:\n"
            + "\n".join(lines))
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter):
        if self.verdict:
            terminalreporter.write_sep("=", "too many skipped tests", red=True, bold=True)
            terminalreporter.write_line(self.verdict)
