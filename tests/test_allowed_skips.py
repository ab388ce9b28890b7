"""The skip guard (tests/allowed_skips.py): a skip it does not list fails the run; each entry names
a test that exists and the reason that test gives when it skips."""

from __future__ import annotations

import ast
import fnmatch
from pathlib import Path
from types import SimpleNamespace

import pytest
from allowed_skips import ALLOWED_SKIPS, SkipGuard, allowed

ROOT = Path(__file__).resolve().parents[1]


def report(nodeid: str, outcome: str, reason: str = "", when: str = "call") -> pytest.TestReport:
    longrepr = (nodeid.split("::")[0], 1, f"Skipped: {reason}") if outcome == "skipped" else None
    return pytest.TestReport(nodeid, (nodeid, 1, nodeid), {}, outcome, longrepr, when)


def finish(guard: SkipGuard, reports: list[pytest.TestReport]) -> int:
    for r in reports:
        guard.pytest_runtest_logreport(r)
    session = SimpleNamespace(exitstatus=pytest.ExitCode.OK)
    guard.pytest_sessionfinish(session, session.exitstatus)
    return session.exitstatus


def test_an_unlisted_skip_fails_the_run_and_a_listed_one_does_not():
    listed = ALLOWED_SKIPS[0]
    guard = SkipGuard(SimpleNamespace())
    ok = [report("tests/test_a.py::test_b", "passed"), report(listed.nodeid, "skipped", listed.reason)]
    assert finish(guard, ok) == pytest.ExitCode.OK and guard.unlisted == {}
    # a listed test skipped for another reason, and a test not listed at all
    other_reason = report(listed.nodeid, "skipped", "some other reason", when="setup")
    unlisted = report("tests/test_a.py::test_c", "skipped", "no widget here")
    assert finish(guard, [other_reason, unlisted]) == pytest.ExitCode.TESTS_FAILED
    assert guard.unlisted == {
        listed.nodeid: "Skipped: some other reason",
        "tests/test_a.py::test_c": "Skipped: no widget here",
    }
    # an xfail is a skip too; a pytest-xdist worker leaves the verdict to the controller
    xfail = report("tests/test_a.py::test_d", "skipped")
    xfail.wasxfail = "known to fail"
    assert not allowed(xfail.nodeid, "xfail: known to fail")
    worker = SkipGuard(SimpleNamespace(workerinput={}))
    assert finish(worker, [xfail, unlisted]) == pytest.ExitCode.OK and worker.unlisted == {}


@pytest.mark.parametrize("entry", ALLOWED_SKIPS, ids=lambda a: a.nodeid)
def test_each_allowed_skip_names_a_test_that_skips_with_its_reason(entry):
    path, _, name = entry.nodeid.partition("::")
    source = (ROOT / path).read_text()
    tests = [n.name for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef)]
    assert any(fnmatch.fnmatchcase(t, name.split("[")[0]) for t in tests), entry.nodeid
    assert f'pytest.skip("{entry.reason}' in source and entry.why
