"""Shared test setup: JAX's persistent compilation cache, compiled programs freed per module, the
suite spread over the cores, what each test costs, and no skip that `tests/allowed_skips.py` does
not list.

The suite runs on every core with pytest-xdist (`-n auto` in pyproject.toml: one worker per core,
at most `MAX_WORKERS`): XLA compiles a program on one core, so one process left the other idle.
Each module goes to one worker whole (`--dist loadscope`: its module-scoped fixtures, and so its
compiled programs, are shared as before), and the most expensive modules are handed out first
(`HEAVY_FIRST`) so that no long module starts last. `-p no:xdist` or `-n 0` runs everything in one process.

The suite runs with the XLA:CPU flags the environment gives it: strl_jax's default, or XLA's own
with `STRL_JAX_XLA_CPU_DEFAULTS=0`. The two round floats differently, as other CPU models do; the
learning thresholds hold under both (tests/learning_runs.py). Either way it compiles with
`STRL_JAX_XLA_CPU_FAST_COMPILE=1` (strl_jax/xla_cpu.py: XLA's older fusion emitter), set here
before jax creates its backends and inherited by every worker and subprocess: most of the
suite's time is compiling, which that shortens, and its slower steps cost less than it saves
(BENCHMARKS.md, "Compile time on the CPU"); tests/test_xla_cpu.py checks that it is in effect.

Every compiled XLA:CPU program keeps its JIT code in memory mappings, and Linux caps a process
at vm.max_map_count of them (65,530): a suite that kept every module's programs alive crossed it
and XLA crashed with a segmentation fault. After each module its programs are dropped (the
persistent cache keeps them for whoever needs them again), and the terminal summary reports the
peak number of mappings seen.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

os.environ.setdefault("STRL_JAX_XLA_CPU_FAST_COMPILE", "1")  # before jax's backends: see above
from strl_jax.xla_cpu import apply_cpu_defaults

apply_cpu_defaults()  # also where strl_jax was imported before this module set the variable

import jax
import pytest
from allowed_skips import SkipGuard
from filelock import FileLock
from hypothesis import settings
from learning_runs import train_expert
from suite_costs import SuiteCosts

from strl_jax.runners.programs import MIN_CACHED_COMPILE_VARIABLE
from strl_jax.runners.runner import release_programs

_cache = os.environ.get("STRL_JAX_CACHE_DIR") or str(Path.home() / ".cache" / "strl_jax" / "xla")
jax.config.update("jax_compilation_cache_dir", _cache)
# Every program is stored, also those that compile in under a second (most, without XLA's
# optimisations, below): they are shared between modules and processes of one run, and a warm
# run compiles nothing. Subprocesses inherit the setting (`enable_compilation_cache` reads it).
os.environ[MIN_CACHED_COMPILE_VARIABLE] = "0"
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
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


MAX_WORKERS = 4
# Test modules by cold cost on the reference machine, most expensive first (measured with
# `tests/cost_table.py`); modules not named follow in collection order.
HEAVY_FIRST: tuple[str, ...] = (
    "test_playground_training",
    "test_recurrent",
    "test_devices",
    "test_playground_components",
    "test_training",
    "test_two_stage",
    "test_amp_imitation",
    "test_divergence",
    "test_update_options",
    "test_generic_sim_to_sim",
    "test_estimator_training",
    "test_perception_envs",
    "test_appo",
    "test_teacher_student",
    "test_deploy",
    "test_custom_robot_example",
    "test_tanh_gaussian",
    "test_envs",
    "test_entry_points",
    "test_walk_examples",
    "test_mutex",
    "test_checkpoint_resume",
    "test_episode_length",
    "test_checkpoint_damage",
    "test_collect",
    "test_symmetry",
    "test_population",
    "test_amp_parts",
    "test_reset_pool",
    "test_update_parity",
    "test_encoder_training",
    "test_runner_extras",
    "test_dagger",
    "test_checkpoint_backends",
    "test_brax_choices",
)


# Most modules' programs take far longer to compile than to run (compile / run 5-40 in the cold
# cost table), and their assertions are exact comparisons or fixed properties: they compile with
# `jax_disable_most_optimizations` (XLA's backend optimisation level 0, no expensive LLVM passes),
# measured a quarter less test time, for code that runs 3-5x slower. The same operations, rounded
# differently where LLVM would have fused a multiply-add; subprocesses a module starts inherit the
# setting (`JAX_DISABLE_MOST_OPTIMIZATIONS`), so the runs it compares match. A module with
# learning thresholds compiles quickly once their spread over seeds has been measured so
# (bench/learning_spread.py `--optimisations off`; BENCHMARKS.md "Learning spread"). The modules
# below keep XLA's optimised programs: their learning runs are long enough that slower code would
# cost more than the compile saves (the Go1 run: over 100 s warm compiled quickly, 33 s optimised).
OPTIMISED: frozenset[str] = frozenset(
    {
        "test_playground_training",
        "test_recurrent",
        "test_training",
    }
)
QUICK_COMPILE_VARIABLE = "JAX_DISABLE_MOST_OPTIMIZATIONS"


def set_quick_compile(quick: bool) -> None:
    """Compile what follows, in this process and the processes it starts, quickly or optimised."""
    jax.config.update("jax_disable_most_optimizations", quick)
    if quick:
        os.environ[QUICK_COMPILE_VARIABLE] = "1"
    else:
        os.environ.pop(QUICK_COMPILE_VARIABLE, None)


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(SuiteCosts(config), "strl_jax_suite_costs")
    config.pluginmanager.register(SkipGuard(config), "strl_jax_skip_guard")


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """One worker per core, at most MAX_WORKERS (each holds its own compiled programs: 1-3 GiB)."""
    return max(1, min(len(os.sched_getaffinity(0)), MAX_WORKERS))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The expensive modules first (`--dist loadscope --no-loadscope-reorder` hands modules out in
    this order), so that no long module starts last."""
    rank = {name: i for i, name in enumerate(HEAVY_FIRST)}
    position = {}
    for index, item in enumerate(items):
        module = item.nodeid.split("::")[0]
        position[item.nodeid] = (rank.get(Path(module).stem, len(rank)), index)
    items.sort(key=lambda item: position[item.nodeid])


@pytest.fixture(scope="session")
def pendulum_expert(tmp_path_factory):
    """`(checkpoint folder, eval return)` of the full-state PPO pendulum expert that the
    imitation and the teacher-student tests learn from: trained once per test run, by the first
    worker that needs it (the others wait for it and read it from the run's shared folder)."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    record = shared / "pendulum_expert.json"
    with FileLock(str(shared / "pendulum_expert.lock")):
        if not record.exists():
            quick = os.environ.get(QUICK_COMPILE_VARIABLE) == "1"
            set_quick_compile(False)  # the expert is the same whichever module asks first
            try:
                path, best = train_expert(shared / "pendulum_expert")
            finally:
                set_quick_compile(quick)
            record.write_text(json.dumps({"path": str(path), "return": best}))
    found = json.loads(record.read_text())
    return Path(found["path"]), float(found["return"])


@pytest.fixture(scope="module", autouse=True)
def _compile_effort(request):
    """Every module compiles quickly except the `OPTIMISED` ones (jax's default)."""
    set_quick_compile(Path(request.module.__file__).stem not in OPTIMISED)
    yield
    set_quick_compile(False)


@pytest.fixture(autouse=True)
def _test_compile_effort(request):
    """A test marked `quick_compile` compiles quickly also in an `OPTIMISED` module: one whose
    programs are its own (it compares nothing with the module's optimised runs) and whose
    assertions are exact properties, not learning thresholds (e.g. `play` and `collect` on the
    Go1 run of test_playground_training: about a third less cold time)."""
    marked = request.node.get_closest_marker("quick_compile") is not None
    optimised = Path(request.module.__file__).stem in OPTIMISED
    if not (marked and optimised):
        yield
        return
    set_quick_compile(True)
    yield
    set_quick_compile(False)


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
