"""A run cut and resumed against the same run uninterrupted: their logged rows must be the same
(timings aside), which is what "a resumed run continues as if it had not stopped" means."""

from __future__ import annotations

import json
from pathlib import Path

from strl_jax.train import main as train_main

TIME_KEYS = frozenset({"wall_time", "fps", "iteration_time"})


def untimed_rows(run: Path) -> list[dict]:
    """A run's metrics.jsonl rows without their timings."""
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k not in TIME_KEYS} for line in lines]


def rows_after_resume(args: list[str], tmp_path: Path, iterations: int = 4) -> list[dict]:
    """Train `args` for `iterations` straight through, and for half of them then resumed to the
    end; assert both logged the same rows and return them."""
    full, split = tmp_path / "full", tmp_path / "split"
    assert train_main([*args, "--max_iterations", str(iterations), "--log_dir", str(full)]) == 0
    assert train_main([*args, "--max_iterations", str(iterations // 2), "--log_dir", str(split)]) == 0
    assert train_main(["--resume", str(split), "--quiet", "--max_iterations", str(iterations)]) == 0
    rows = untimed_rows(full)
    assert untimed_rows(split) == rows
    return rows
