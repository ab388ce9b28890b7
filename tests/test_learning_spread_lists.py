"""`bench/learning_spread.py`'s lists and conftest's `OPTIMISED` agree (no training): every learning
assertion of the suite has a case (or names the benchmark that measures it), and each case's
module compiles with the optimisation setting its spread was measured with."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from conftest import OPTIMISED

TESTS = Path(__file__).resolve().parent


def spread_lists():
    spec = importlib.util.spec_from_file_location(
        "learning_spread", TESTS.parent / "bench" / "learning_spread.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.CASES, module.ASSERTIONS


def test_every_learning_assertion_has_a_case():
    cases, assertions = spread_lists()
    for name, assertion in assertions.items():
        assert (assertion.case is None) != (assertion.elsewhere is None), name
        if assertion.case is not None:
            assert assertion.case in cases, name
            # the assertion belongs to the module its case measures
            assert name.split("::")[0] == cases[assertion.case].module, name
        module = name.split("::")[0].split(":")[0]
        assert module == "conftest" or (TESTS / f"{module}.py").exists() or "/" in module, name
    assert set(cases) == {a.case for a in assertions.values() if a.case}, "a case no assertion uses"


def test_optimised_lists_the_modules_whose_spread_was_measured_optimised():
    cases, _ = spread_lists()
    for name, case in cases.items():
        if case.module == "conftest":  # the shared expert: always trained optimised
            assert case.optimised, name
            continue
        assert (TESTS / f"{case.module}.py").exists(), name
        assert case.optimised == (case.module in OPTIMISED), (
            f"{case.module}: spread measured {'with' if case.optimised else 'without'} XLA's "
            f"optimisations, but the module compiles {'with' if case.module in OPTIMISED else 'without'}"
        )


def quick_compiled_tests() -> set[str]:
    """`module::test` of every test marked `quick_compile`, read from the source."""
    marked = set()
    for path in TESTS.glob("test_*.py"):
        lines = path.read_text().splitlines()
        for line, following in zip(lines, lines[1:], strict=False):
            if line.strip() == "@pytest.mark.quick_compile" and following.startswith("def test_"):
                marked.add(f"{path.stem}::{following[4:].split('(')[0]}")
    return marked


def test_quick_compiled_tests_of_optimised_modules_assert_no_learning():
    """A `quick_compile` mark takes a test off its module's optimised programs: only for tests
    with no learning assertion, and only where the module is optimised (elsewhere it does nothing)."""
    _, assertions = spread_lists()
    learning = {name.split(":")[0] + "::" + name.split("::")[1].split(":")[0] for name in assertions}
    marked = quick_compiled_tests()
    assert marked, "no test is marked quick_compile"
    assert not marked & learning, f"learning assertions compiled quickly: {marked & learning}"
    assert {name.split("::")[0] for name in marked} <= OPTIMISED, marked
