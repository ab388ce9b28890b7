"""What each test costs, and the guard that keeps every test inside a budget.

CI runs the suite from an empty compilation cache on a 2-core machine within a hard time limit,
so a test's cold cost is what matters. For every test this plugin records its wall seconds
(setup + call + teardown: a module fixture's cost falls on the module's first test) and the part
of them JAX spent compiling in this process (tracing, lowering and XLA's compile, or reading the
persistent cache; programs compiled by a subprocess count as run time). At the end it prints the
slowest tests and fails the run, naming each offender, when one test's wall time passes the
budget.

The budget is in seconds of the reference machine (a 2-core AMD EPYC of the kind CI uses) and is
scaled by this machine's speed, measured once per run with a fixed pure-Python workload, so a
slower or busier machine gets a proportionally larger budget. Settings (environment variables):

- `STRL_JAX_TEST_BUDGET_S`: the budget per test in reference seconds (default `DEFAULT_BUDGET_S`);
  `0` turns the guard off (e.g. under a debugger or coverage).
- `STRL_JAX_TEST_COSTS`: a path; the per-test records are written there as JSON
  (`python tests/cost_table.py FILE...` turns one or more of them into a per-module table).
"""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from pathlib import Path

import pytest

# The costliest tests are those that carry a module's shared run (the four-device plan, the Go1
# run, the AMP imitation run: 3-5 minutes cold on the reference machine, under a two-worker
# suite); a test past this budget is a new cost to share or shrink, not a slow machine.
DEFAULT_BUDGET_S = 420.0
SLOWEST_SHOWN = 15
# seconds the calibration workload takes on the reference machine (min of 3, idle)
REFERENCE_CALIBRATION_S = 0.11
COMPILE_START = pytest.StashKey[float]()
COMPILE_EVENTS = (
    "/jax/core/compile/jaxpr_trace_duration",
    "/jax/core/compile/jaxpr_to_mlir_module_duration",
    "/jax/core/compile/backend_compile_duration",
)


def calibration_seconds(repeats: int = 3) -> float:
    """Seconds of a fixed single-threaded workload (the best of `repeats`): XLA's compiler runs on
    one core, so single-core speed is what scales a test's cold cost."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        total = 0
        for i in range(1_500_000):
            total += (i * i) % 7
        best = min(best, time.perf_counter() - start)
    return best


def budget_seconds(reference_budget: float, calibration: float) -> float:
    """The reference budget on this machine: scaled up (never down) by its measured slowness."""
    return reference_budget * max(1.0, calibration / REFERENCE_CALIBRATION_S)


class CompileClock:
    """Seconds JAX spends compiling in this process, read before and after each test."""

    def __init__(self) -> None:
        self.total = 0.0

    def __call__(self, event: str, duration: float, **_: object) -> None:
        if event in COMPILE_EVENTS:
            self.total += duration

    def install(self) -> CompileClock:
        import jax.monitoring  # noqa: PLC0415 - only where the plugin runs tests

        jax.monitoring.register_event_duration_secs_listener(self)
        return self


class SuiteCosts:
    """The plugin: compile seconds are measured where tests run (each pytest-xdist worker) and
    travel with the reports; wall seconds, the summary and the guard live where the reports
    arrive (the controller, or the one process without xdist)."""

    def __init__(self, config: pytest.Config) -> None:
        self.is_worker = hasattr(config, "workerinput")
        self.clock = CompileClock().install()
        self.wall: dict[str, float] = defaultdict(float)
        self.compile: dict[str, float] = defaultdict(float)
        self.reference_budget = float(os.environ.get("STRL_JAX_TEST_BUDGET_S", DEFAULT_BUDGET_S))
        self.calibration = calibration_seconds() if self.reference_budget > 0 and not self.is_worker else 0.0

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None):
        item.stash[COMPILE_START] = self.clock.total
        yield

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        outcome = yield
        report = outcome.get_result()
        compiled = self.clock.total - item.stash.get(COMPILE_START, self.clock.total)
        # a list of this report's own (the item's list is shared by its three reports)
        report.user_properties = [
            *(p for p in report.user_properties if p[0] != "compile_s"),
            ("compile_s", compiled),
        ]

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.wall[report.nodeid] += report.duration
        compiled = dict(report.user_properties).get("compile_s")
        if compiled is not None:
            self.compile[report.nodeid] = max(self.compile[report.nodeid], float(compiled))

    def over_budget(self) -> list[tuple[str, float]]:
        if self.reference_budget <= 0:
            return []
        limit = budget_seconds(self.reference_budget, self.calibration)
        return sorted(((n, s) for n, s in self.wall.items() if s > limit), key=lambda x: -x[1])

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.is_worker or not self.wall:
            return
        write = terminalreporter.write_line
        terminalreporter.section(f"slowest {SLOWEST_SHOWN} tests (wall s = compile s + the rest)")
        for nodeid, seconds in sorted(self.wall.items(), key=lambda x: -x[1])[:SLOWEST_SHOWN]:
            write(f"{seconds:8.1f} s  compile {self.compile.get(nodeid, 0.0):6.1f} s  {nodeid}")
        if self.reference_budget > 0:
            limit = budget_seconds(self.reference_budget, self.calibration)
            factor = max(1.0, self.calibration / REFERENCE_CALIBRATION_S)
            write(
                f"budget per test: {limit:.0f} s on this machine ({self.reference_budget:.0f} s on the "
                f"reference machine x speed factor {factor:.2f})"
            )
            for nodeid, seconds in self.over_budget():
                terminalreporter.write_line(
                    f"OVER BUDGET: {nodeid} took {seconds:.0f} s > {limit:.0f} s; make it cheaper (share a "
                    "compiled program, shrink it, merge it into a test that compiles the same program) or "
                    "raise DEFAULT_BUDGET_S in tests/suite_costs.py with the reason",
                    red=True,
                )
        target = os.environ.get("STRL_JAX_TEST_COSTS")
        if target:
            records = [
                {"nodeid": n, "wall_s": round(w, 3), "compile_s": round(self.compile.get(n, 0.0), 3)}
                for n, w in self.wall.items()
            ]
            Path(target).write_text(
                json.dumps({"calibration_s": self.calibration, "tests": records}, indent=1)
            )
            write(f"per-test costs written to {target}")

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if not self.is_worker and self.over_budget() and exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
