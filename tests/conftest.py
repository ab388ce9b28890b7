"""Shared test setup: JAX's persistent compilation cache, and compiled programs freed per module.

The suite runs with the XLA:CPU flags the environment gives it: strl_jax's default, or XLA's own
with `STRL_JAX_XLA_CPU_DEFAULTS=0`. The two round floats differently, as other CPU models do; the
learning thresholds hold under both (tests/learning_runs.py).

Every compiled XLA:CPU program keeps its JIT code in memory mappings, and Linux caps a process
at vm.max_map_count of them (65,530): a suite that kept every module's programs alive crossed it
and XLA crashed with a segmentation fault. After each module its programs are dropped (the
persistent cache keeps them for whoever needs them again), and the terminal summary reports the
peak number of mappings seen.
"""

from __future__ import annotations

import os
from pathlib import Path

import jax
import pytest
from hypothesis import settings
from learning_runs import train_expert

from strl_jax.train_loops.runner import release_programs

_cache = os.environ.get("STRL_JAX_CACHE_DIR") or str(Path.home() / ".cache" / "strl_jax" / "xla")
jax.config.update("jax_compilation_cache_dir", _cache)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)

# Property tests draw the same examples on every machine and run (no example database): a
# failure reproduces, rather than depending on which machine drew it.
settings.register_profile("strl_jax", derandomize=True, database=None)
settings.load_profile("strl_jax")

_MAPS = Path("/proc/self/maps")
_peak_mappings = {"count": 0, "module": ""}


def memory_mappings() -> int:
    """Memory mappings this process holds (0 where /proc is not there)."""
    try:
        with _MAPS.open() as maps:
            return sum(1 for _ in maps)
    except OSError:
        return 0


@pytest.fixture(scope="session")
def pendulum_expert(tmp_path_factory):
    """`(checkpoint folder, eval return)` of the full-state PPO pendulum expert that the
    imitation and the teacher-student tests learn from (trained once per session)."""
    return train_expert(tmp_path_factory.mktemp("pendulum_expert"))


@pytest.fixture(scope="module", autouse=True)
def _release_compiled_programs(request):
    yield
    count = memory_mappings()
    if count > _peak_mappings["count"]:
        _peak_mappings.update(count=count, module=request.module.__name__)
    release_programs()


def pytest_terminal_summary(terminalreporter):
    if _peak_mappings["count"]:
        limit = Path("/proc/sys/vm/max_map_count")
        cap = limit.read_text().strip() if limit.exists() else "?"
        terminalreporter.write_line(
            f"memory mappings: peak {_peak_mappings['count']} (after {_peak_mappings['module']}) "
            f"of vm.max_map_count {cap}"
        )
