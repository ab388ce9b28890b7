"""Every test the suite may skip, with the reason it may, in one place; any other skip fails the run.

A skipped test passes nothing: where the suite skips a test that CI should run (a missing optional
package, the wrong Python, a machine without something), the run must say so, not report green.
The plugin below collects every skip (a test's `pytest.skip`, `skipif` and `importorskip`, a
module skipped at import, an `xfail`) where the reports arrive (the pytest-xdist controller, or
the one process with `-n 0`) and fails the run, naming each skipped test and its reason, unless
`ALLOWED_SKIPS` lists it: a node id pattern (`fnmatch`) and text its skip reason must contain.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

import pytest


@dataclass(frozen=True)
class AllowedSkip:
    nodeid: str  # fnmatch pattern of the skipped test's (or module's) node id
    reason: str  # text the skip's reason contains
    why: str  # why skipping it where it skips is right


ALLOWED_SKIPS: tuple[AllowedSkip, ...] = (
    AllowedSkip(
        nodeid="tests/test_play_plot.py::test_play_renders_a_real_gif_with_an_offscreen_renderer",
        reason="no offscreen OpenGL library for MuJoCo here",
        why="MuJoCo renders offscreen through EGL or OSMesa, system libraries that pip does not "
        "install (README, 'play'); the tests that stub the renderer check the GIF and the message "
        "everywhere",
    ),
)


def skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    """The reason a skipped (or xfailed) report gives."""
    if hasattr(report, "wasxfail"):
        return f"xfail: {report.wasxfail}"
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr)


def allowed(nodeid: str, reason: str, listed: tuple[AllowedSkip, ...] = ALLOWED_SKIPS) -> bool:
    return any(fnmatch.fnmatchcase(nodeid, a.nodeid) and a.reason in reason for a in listed)


class SkipGuard:
    """The plugin: records the skips that reach this process, and fails the run on an unlisted one."""

    def __init__(self, config: pytest.Config) -> None:
        self.is_worker = hasattr(config, "workerinput")
        self.unlisted: dict[str, str] = {}

    def record(self, report: pytest.TestReport | pytest.CollectReport) -> None:
        if report.skipped and not self.is_worker:
            reason = skip_reason(report)
            if not allowed(report.nodeid, reason):
                self.unlisted[report.nodeid] = reason

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.record(report)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        self.record(report)

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.unlisted and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.unlisted:
            return
        terminalreporter.section("skipped tests not in tests/allowed_skips.py", red=True)
        for nodeid, reason in sorted(self.unlisted.items()):
            terminalreporter.write_line(f"UNLISTED SKIP: {nodeid}: {reason}", red=True)
        terminalreporter.write_line(
            "a skipped test checks nothing: make it run here, or list it in "
            "tests/allowed_skips.py:ALLOWED_SKIPS with its reason",
            red=True,
        )
