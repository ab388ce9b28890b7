"""Per-module cost table of test runs recorded by `tests/suite_costs.py`.

    STRL_JAX_TEST_COSTS=/tmp/cold.json python -m pytest -q      # empty compilation cache
    STRL_JAX_TEST_COSTS=/tmp/warm.json python -m pytest -q      # the same cache, filled
    python tests/cost_table.py /tmp/cold.json /tmp/warm.json    # a markdown table, most expensive first

Each module's row: its tests, and per run its wall seconds (summed over its tests: with two
workers the suite's wall time is about half the total), the part spent compiling in the test
process, and the rest (running, and programs that subprocesses compile).
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path


def module_costs(path: Path) -> dict[str, dict[str, float]]:
    """`{module: {"tests", "wall", "compile"}}` of one recorded run."""
    table: dict[str, dict[str, float]] = defaultdict(lambda: {"tests": 0, "wall": 0.0, "compile": 0.0})
    for record in json.loads(path.read_text())["tests"]:
        row = table[record["nodeid"].split("::")[0]]
        row["tests"] += 1
        row["wall"] += record["wall_s"]
        row["compile"] += record["compile_s"]
    return dict(table)


def markdown(runs: list[tuple[str, dict[str, dict[str, float]]]]) -> str:
    modules = sorted(
        {m for _, table in runs for m in table}, key=lambda m: -runs[0][1].get(m, {}).get("wall", 0)
    )
    head = "| module | tests | " + " | ".join(
        f"{name} wall s | {name} compile s | {name} rest s" for name, _ in runs
    )
    lines = [head + " |", "|:--|--:|" + "--:|--:|--:|" * len(runs)]
    totals = [[0.0, 0.0] for _ in runs]
    for module in modules:
        cells = []
        for i, (_, table) in enumerate(runs):
            row = table.get(module, {"wall": 0.0, "compile": 0.0})
            totals[i][0] += row["wall"]
            totals[i][1] += row["compile"]
            cells.append(f"{row['wall']:.1f} | {row['compile']:.1f} | {row['wall'] - row['compile']:.1f}")
        tests = int(max(table.get(module, {}).get("tests", 0) for _, table in runs))
        lines.append(f"| {module} | {tests} | " + " | ".join(cells) + " |")
    cells = [f"**{w:.0f}** | **{c:.0f}** | **{w - c:.0f}**" for w, c in totals]
    lines.append("| all | | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", type=Path, help="JSON files written with STRL_JAX_TEST_COSTS")
    p.add_argument("--names", default=None, help="comma-separated column names (default: the file stems)")
    args = p.parse_args()
    names = args.names.split(",") if args.names else [path.stem for path in args.runs]
    print(markdown([(name, module_costs(path)) for name, path in zip(names, args.runs, strict=True)]))


if __name__ == "__main__":
    main()
