"""The host loop: build, compile, iterate, evaluate, log, checkpoint. All numerics run inside jit.

Everything a continued run needs is either in the two state pytrees or in the checkpoint's
`meta` (the logging window and the elapsed time); evaluation keys are a function of the seed
and the iteration. So a run stopped and resumed writes the same numbers as one that never
stopped.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import gc
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np
import yaml

from strl_jax.agents.algorithms import algorithm_spec, env_groups
from strl_jax.agents.motion_prior import AMP_GROUP
from strl_jax.configs.loader import config_to_dict
from strl_jax.configs.schema import TrainConfig
from strl_jax.envs.tasks import make_env_from_config
from strl_jax.envs.vec_env import VecEnv
from strl_jax.errors import NonFiniteError
from strl_jax.train_loops.checkpoint import (
    CHECKPOINT_DIR,
    CheckpointError,
    as_nested_dict,
    close_manager,
    load_params_and_normalizers,
    open_manager,
    restore_checkpoint,
    save_checkpoint,
    supersede_after,
)
from strl_jax.train_loops.code_state import store_code_state
from strl_jax.train_loops.devices import (
    ShardedPrograms,
    any_process,
    is_primary,
    local_copy,
    make_env_mesh,
    shard_programs,
    sync_processes,
)
from strl_jax.train_loops.learner import Learner, first_non_finite, jit_evaluate
from strl_jax.train_loops.learners import make_learner
from strl_jax.train_loops.logging import RunLogger
from strl_jax.train_loops.torch_checkpoints import load_torch_params_and_normalizers
from strl_jax.user_functions import import_function

# Config fields only the host loop reads: runs that differ only in these share compiled programs
# (and the learner's copy of the config). A field the jitted code starts to read must leave this list.
HOST_ONLY_RUNNER_FIELDS = (
    "max_iterations",
    "log_interval",
    "print_interval",
    "eval_interval",
    "save_interval",
    "max_checkpoints_to_keep",
    "experiment_name",
    "log_dir",
    "compile_cache",
    "logger",
    "wandb_project",
    "neptune_project",
    "git_status_repos",
    "ckpt_manipulator",
    "ckpt_manipulator_kwargs",
)


@dataclasses.dataclass
class TrainResult:
    """What a finished run hands back to Python callers (the CLI writes the same to disk)."""

    log_dir: Path
    rows: list[dict[str, Any]]  # the metrics.jsonl rows this call wrote
    train_state: Any
    rollout_state: Any
    checkpoint: int | None = None  # the last checkpoint step written
    interrupted: str | None = None  # name of the signal that stopped the run early

    @property
    def last_eval_reward(self) -> float | None:
        evals = [r["eval_reward"] for r in self.rows if "eval_reward" in r]
        return evals[-1] if evals else None


@dataclasses.dataclass(frozen=True)
class Programs:
    """The env, the learner and the compiled functions of one config.

    `init` and `iteration` run sharded over `sharded.mesh` (a mesh of one device included);
    `evaluate` runs on one device with local copies of the params.
    """

    env: VecEnv
    learner: Learner
    init: Any
    iteration: Any
    evaluate: Any
    sharded: ShardedPrograms


# The programs of the most recently built configs, newest last. Bounded because every compiled
# XLA:CPU program keeps its JIT code in memory mappings (one small config's programs: ~3,000), and
# Linux caps a process at vm.max_map_count of them (65,530 by default): past the cap LLVM cannot
# allocate and XLA crashes with a segmentation fault. Dropping a config's programs frees them.
MAX_CACHED_CONFIGS = 4
_PROGRAMS: collections.OrderedDict[str, Programs] = collections.OrderedDict()


def program_key(cfg: TrainConfig) -> str:
    """What compiled programs depend on: the config less its seed and host-only runner fields."""
    data = config_to_dict(cfg)
    data.pop("seed")
    for name in HOST_ONLY_RUNNER_FIELDS:
        data["runner"].pop(name)
    return json.dumps(data, sort_keys=True, default=str)


def release_programs() -> None:
    """Drop every cached config's programs and jax's own compilation caches (their memory and
    memory mappings are freed once nothing else holds them); the persistent cache stays."""
    _PROGRAMS.clear()
    jax.clear_caches()
    gc.collect()


def build_programs(cfg: TrainConfig) -> Programs:
    """Build (or reuse, within this process) the env, learner and jitted functions for `cfg`.

    Up to `MAX_CACHED_CONFIGS` configs keep their programs; building another drops the least
    recently used one.
    """
    key = program_key(cfg)
    if key in _PROGRAMS:
        _PROGRAMS.move_to_end(key)
    else:
        while len(_PROGRAMS) >= MAX_CACHED_CONFIGS:
            _PROGRAMS.popitem(last=False)
            gc.collect()  # programs sit in reference cycles: free their mappings now, not later
        groups = env_groups(algorithm_spec(cfg.algorithm.class_name))
        env = make_env_from_config(cfg.env, amp=AMP_GROUP in groups)
        learner = make_learner(env, cfg)
        eval_env = env.replace(num_envs=cfg.runner.num_eval_envs)  # building a brax env takes seconds
        sharded = shard_programs(learner, cfg, make_env_mesh(cfg.runner.num_devices))
        _PROGRAMS[key] = Programs(
            env=env,
            learner=learner,
            init=sharded.init,
            iteration=sharded.iteration,
            evaluate=jit_evaluate(learner, eval_env),
            sharded=sharded,
        )
    return _PROGRAMS[key]


def enable_compilation_cache(path: str | None = None) -> None:
    """Reuse compiled XLA programs across processes (big win: compiles take tens of seconds)."""
    path = path or os.environ.get("STRL_JAX_CACHE_DIR") or str(Path.home() / ".cache" / "strl_jax" / "xla")
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


def default_log_dir(cfg: TrainConfig) -> Path:
    stamp = datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    name = f"{stamp}_{cfg.runner.experiment_name}" if cfg.runner.experiment_name else stamp
    return Path("runs") / cfg.env.task / name


def steps_per_iteration(cfg: TrainConfig) -> int:
    """Policy steps collected per iteration (rsl_rl's 'timesteps'; Brax counts x action_repeat)."""
    return cfg.env.num_envs * cfg.runner.num_steps_per_env


def run_keys(cfg: TrainConfig) -> tuple[jax.Array, jax.Array]:
    """`(init key, eval key)`: both functions of the seed alone; evaluation i uses fold_in(eval, i)."""
    init_key, eval_key = jax.random.split(jax.random.PRNGKey(cfg.seed))
    return init_key, eval_key


def _row_from_metrics(
    iteration: int, cfg: TrainConfig, metrics: dict, window: dict, wall: float, dt: float
) -> dict[str, Any]:
    """Turn one iteration's device metrics (already on host) into a metrics.jsonl row: the
    episode statistics of the logging window, then every scalar the learner reports."""
    episodes = window["episodes"]
    row: dict[str, Any] = {
        "iteration": iteration,
        "env_steps": iteration * steps_per_iteration(cfg),
        "wall_time": round(wall, 4),
        "iteration_time": round(dt, 4),
        "fps": steps_per_iteration(cfg) / dt if dt > 0 else 0.0,
        "mean_reward": window["return_sum"] / episodes if episodes else None,
        "mean_episode_length": window["length_sum"] / episodes if episodes else None,
        "episodes": int(episodes),
        "mean_step_reward": float(metrics["rollout"]["reward_sum"]) / steps_per_iteration(cfg),
    }
    row.update({key: float(value) for key, value in metrics["scalars"].items()})
    if episodes:
        for key, value in window["metrics"].items():
            row[f"episode/{key}"] = value / episodes
    return row


class StopRequest:
    """The first SIGINT/SIGTERM asks the loop to checkpoint and stop after the current iteration;
    a second one interrupts at once."""

    def __init__(self) -> None:
        self.signal_name: str | None = None
        self._previous: dict[int, Any] = {}

    def install(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def uninstall(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _handle(self, signum: int, _frame: Any) -> None:
        if self.signal_name is not None:
            raise KeyboardInterrupt
        self.signal_name = signal.Signals(signum).name
        print(
            f"\n{self.signal_name}: saving a checkpoint after this iteration (send again to stop at once)",
            file=sys.stderr,
            flush=True,
        )


def truncate_metrics(path: Path, iteration: int) -> None:
    """Drop rows after `iteration` (written after the checkpoint a run continues from)."""
    if not path.exists():
        return
    kept = []
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # a row cut short by a killed process
        if row.get("iteration", 0) <= iteration:
            kept.append(line)
    tmp = path.with_suffix(".jsonl.tmp")
    tmp.write_text("".join(line + "\n" for line in kept))
    os.replace(tmp, path)


def _initial_state(
    cfg: TrainConfig, programs: Programs, manager, log_dir: Path, resume: bool, checkpoint: int | None, load
) -> tuple[Any, Any, dict[str, Any], float]:
    """`(train_state, rollout_state, logging window, elapsed seconds)` to start the loop from."""
    init_key, _ = run_keys(cfg)
    if resume:
        train_abs, rollout_abs = jax.eval_shape(programs.init, init_key)
        abstract = {"train_state": train_abs, "rollout_state": rollout_abs}
        shardings = {
            "train_state": programs.sharded.train_sharding,
            "rollout_state": programs.sharded.rollout_sharding,
        }
        state, meta, step = restore_checkpoint(manager, abstract, checkpoint, shardings)
        if is_primary():
            supersede_after(manager, log_dir, step)
            truncate_metrics(log_dir / "metrics.jsonl", step)
        sync_processes("strl_jax_resume")
        manager.reload()
        return state["train_state"], state["rollout_state"], meta["window"], float(meta["wall_time"])
    if manager.all_steps():
        raise CheckpointError(
            f"{str(log_dir)!r} already holds checkpoints; continue that run with --resume {log_dir} "
            "or choose another --log_dir"
        )
    if load is None:
        train_state, rollout_state = programs.init(init_key)
        return train_state, rollout_state, _empty_window(), 0.0
    abstract, _ = jax.eval_shape(programs.init, init_key)
    # a file is an rsl_rl/st_rl torch checkpoint, a folder a strl_jax run
    read = load_torch_params_and_normalizers if Path(load).is_file() else load_params_and_normalizers
    if not cfg.runner.ckpt_manipulator:
        params, normalizers, _ = read(load, abstract)  # checked before compiling init
        train_state, rollout_state = programs.init(init_key)
    else:
        train_state, rollout_state = programs.init(init_key)
        params, normalizers, _ = read(
            load,
            abstract,
            manipulate=checkpoint_manipulator(cfg, train_state),
            manipulator_name=f"runner.ckpt_manipulator {cfg.runner.ckpt_manipulator!r}",
        )
    train_state = warm_start(train_state, params, normalizers, programs)
    return train_state, rollout_state, _empty_window(), 0.0


def checkpoint_manipulator(cfg: TrainConfig, fresh: Any) -> Callable[[dict], dict]:
    """st_rl's `ckpt_manipulator`: the user's `fn(loaded, current, **kwargs)`, with `current`
    this run's freshly initialised params and normalisers as nested dicts of numpy arrays."""
    fn = import_function(cfg.runner.ckpt_manipulator, "runner.ckpt_manipulator")
    params, normalizers = jax.device_get(local_copy((fresh.params, fresh.normalizers)))
    current = {"params": as_nested_dict(params), "normalizers": as_nested_dict(normalizers)}
    return lambda loaded: fn(loaded, current, **cfg.runner.ckpt_manipulator_kwargs)


def warm_start(train_state: Any, params: Any, normalizers: Any, programs: Programs) -> Any:
    """Another run's params and normalisers with a fresh optimiser, learning rate and counters."""
    shardings = programs.sharded.train_sharding
    place = lambda x, s: jax.make_array_from_callback(np.shape(x), s, lambda idx: np.asarray(x)[idx])  # noqa: E731
    params = jax.tree.map(place, params, shardings.params)
    normalizers = jax.tree.map(place, normalizers, shardings.normalizers)
    init_optimizer = jax.jit(programs.learner.init_optimizer, out_shardings=shardings.opt_state)
    opt_state = init_optimizer(params, train_state.parts)
    return train_state.replace(params=params, normalizers=normalizers, opt_state=opt_state)


def train(
    cfg: TrainConfig,
    log_dir: str | Path | None = None,
    verbose: bool = True,
    *,
    resume: bool = False,
    checkpoint: int | None = None,
    load: str | Path | None = None,
    handle_signals: bool = True,
    more_iterations: int | None = None,
) -> TrainResult:
    """Train PPO as configured, writing config.yaml, metrics.jsonl, TensorBoard and checkpoints.

    `resume=True` continues the run in `log_dir` from its newest readable checkpoint (or
    `checkpoint`); `load` warm-starts params and normalisers from another run's checkpoint, or
    from an rsl_rl/st_rl `.pt` file (`train_loops.torch_checkpoints`).
    `runner.max_iterations` counts the whole run; `more_iterations` instead runs that many
    iterations from wherever the run starts (rsl_rl's `learn(num_learning_iterations)`).
    """
    if cfg.runner.compile_cache:
        enable_compilation_cache()
    log_dir = Path(log_dir or cfg.runner.log_dir or default_log_dir(cfg))
    if resume and not (log_dir / CHECKPOINT_DIR).is_dir():
        raise CheckpointError(f"no checkpoints to resume from in {str(log_dir)!r}")
    log_dir.mkdir(parents=True, exist_ok=True)
    programs = build_programs(cfg)
    manager = open_manager(log_dir / CHECKPOINT_DIR, cfg.runner.max_checkpoints_to_keep)
    try:
        train_state, rollout_state, window, wall_offset = _initial_state(
            cfg, programs, manager, log_dir, resume, checkpoint, load
        )
    except BaseException:
        manager.close()
        raise
    start_iteration = int(train_state.iteration)
    if more_iterations is not None:
        runner = dataclasses.replace(cfg.runner, max_iterations=start_iteration + more_iterations)
        cfg = dataclasses.replace(cfg, runner=runner)  # host-only field: the same programs
    primary = is_primary()
    code_files: list[Path] = []
    if primary:
        (log_dir / "config.yaml").write_text(yaml.safe_dump(config_to_dict(cfg), sort_keys=False))
        code_files, notes = store_code_state(
            log_dir, cfg.runner.git_status_repos, resumed_at=start_iteration if resume else None
        )
        for note in notes if verbose else ():
            print(note)
    _, eval_key = run_keys(cfg)
    iteration = start_iteration
    saved = start_iteration if resume else None
    runner = cfg.runner
    logger = RunLogger(
        log_dir,
        runner.max_iterations,
        start_iteration=start_iteration,
        verbose=verbose,
        enabled=primary,
        sections=programs.learner.metric_sections(),
        backend=runner.logger,
        project=runner.wandb_project if runner.logger == "wandb" else runner.neptune_project,
        config=config_to_dict(cfg),
    )
    logger.save_files(code_files)
    stop = StopRequest().install() if handle_signals else StopRequest()
    rows: list[dict[str, Any]] = []
    start = last = time.time()
    if verbose and start_iteration >= runner.max_iterations:
        print(f"run is at iteration {start_iteration} >= runner.max_iterations={runner.max_iterations}")
    try:
        while iteration < runner.max_iterations and stop.signal_name is None:
            train_state, rollout_state, metrics = programs.iteration(train_state, rollout_state)
            iteration += 1
            metrics = jax.device_get(local_copy(metrics))
            check_finite(metrics["finite"], iteration, saved, log_dir)
            now = time.time()
            _accumulate(window, metrics)
            is_last = iteration == runner.max_iterations
            if iteration % runner.log_interval == 0 or is_last:
                wall = wall_offset + now - start
                row = _row_from_metrics(iteration, cfg, metrics, window, wall, now - last)
                evaluating = runner.eval_interval > 0 and (iteration % runner.eval_interval == 0 or is_last)
                if primary and evaluating:
                    row.update(evaluate(programs, train_state, eval_key, iteration))
                    row["wall_time"] = round(wall_offset + time.time() - start, 4)
                logger.write(row)
                rows.append(row)
                if iteration % runner.print_interval == 0 or is_last or iteration == start_iteration + 1:
                    logger.summary(row)
                window = _empty_window()
            logger.progress(iteration)
            periodic = runner.save_interval > 0 and iteration % runner.save_interval == 0
            stopping = any_process(stop.signal_name is not None)
            if stopping and stop.signal_name is None:
                stop.signal_name = "stop on another process"
            if periodic or is_last or stopping:
                elapsed = wall_offset + time.time() - start
                meta = {"window": window, "wall_time": elapsed, "config": config_to_dict(cfg)}
                state = {"train_state": train_state, "rollout_state": rollout_state}
                save_checkpoint(manager, iteration, state, meta)
                saved = iteration
            last = time.time()
    finally:
        stop.uninstall()
        try:
            close_manager(manager)  # waits for the checkpoint being written; CheckpointError if it failed
        finally:
            logger.close()
    return TrainResult(
        log_dir=log_dir,
        rows=rows,
        train_state=train_state,
        rollout_state=rollout_state,
        checkpoint=saved,
        interrupted=stop.signal_name,
    )


def check_finite(checks: dict, iteration: int, saved: int | None, log_dir: Path) -> None:
    """Stop the run at the first non-finite quantity, before anything of this iteration is saved."""
    bad = first_non_finite(checks)
    if not bad:
        return
    last = (
        f"the newest checkpoint (iteration {saved}) is the last good state: continue with "
        f"--resume {log_dir} after changing what diverged (e.g. a lower algorithm.learning_rate)"
        if saved is not None
        else "no checkpoint of this run was written yet"
    )
    raise NonFiniteError(
        f"iteration {iteration}: the {bad[0]} is not finite (NaN or infinity)"
        + (f"; also: {', '.join(bad[1:4])}" + (" ..." if len(bad) > 4 else "") if len(bad) > 1 else "")
        + f". The run stopped without saving this iteration; {last}"
    )


def evaluate(programs: Programs, train_state: Any, eval_key: jax.Array, iteration: int) -> dict[str, float]:
    """Deterministic evaluation after `iteration`, keyed by the iteration (not by host history)."""
    key = jax.random.fold_in(eval_key, iteration)
    params, normalizers = local_copy((train_state.params, train_state.normalizers))
    result = jax.device_get(programs.evaluate(params, normalizers, key))
    out = {
        "eval_reward": float(result["episode_reward"]),
        "eval_episode_length": float(result["episode_length"]),
    }
    return out | {f"eval_{k}": float(v) for k, v in result.items() if k in ("velrmsd", "CoT")}


def _empty_window() -> dict[str, Any]:
    return {"episodes": 0.0, "return_sum": 0.0, "length_sum": 0.0, "metrics": {}}


def _accumulate(window: dict[str, Any], metrics: dict) -> None:
    """Sum completed-episode statistics over the iterations of one log interval."""
    rollout = metrics["rollout"]
    for key in ("episodes", "return_sum", "length_sum"):
        window[key] += float(rollout[key])
    for key, value in rollout["metrics"].items():
        window["metrics"][key] = window["metrics"].get(key, 0.0) + float(np.asarray(value))
