"""The host loop: build, compile, iterate, evaluate, log, checkpoint. All numerics run inside jit.

Everything a continued run needs is either in the two state pytrees or in the checkpoint's
`meta` (the logging window and the elapsed time); evaluation keys are a function of the seed
and the iteration. So a run stopped and resumed writes the same numbers as one that never
stopped.

A plain run is a population of one: one loop advances every member of the run
(`runners.members`), started by `runners.run_start` from `runners.programs`.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import signal
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import jax
import numpy as np

from strl_jax.checkpoints.orbax_checkpoints import CHECKPOINT_DIR, CheckpointError
from strl_jax.configs.schema import TrainConfig
from strl_jax.envs.entry_points import entry_point_of, register_env, registered, task_dir_name
from strl_jax.envs.tasks import with_episode_length
from strl_jax.errors import ConfigError, DivergenceError, DivergenceWarning, NonFiniteError
from strl_jax.records.metric_rows import printing, steps_per_iteration
from strl_jax.records.run_logger import population_summary
from strl_jax.runners.devices import any_process, is_primary, local_copy
from strl_jax.runners.divergence import diverged, divergence_message
from strl_jax.runners.member_logging import log_iteration
from strl_jax.runners.members import (
    Member,
    Roster,
    any_running,
    close_members,
    member_trials,
    open_members,
    roster,
    run_keys,
    save_members,
    start_members,
)
from strl_jax.runners.population import DIVERGED, POPULATION_FILE, PRUNED, RUNNING, write_population_file
from strl_jax.runners.programs import (
    Programs,
    build_programs,
    enable_compilation_cache,
    evaluation_env,
    release_programs,
    training_env,
)
from strl_jax.runners.run_start import initial_state
from strl_jax.runners.stages import STAGE_SECTIONS, advance_stage, stage_programs
from strl_jax.train_loops.finiteness import first_non_finite
from strl_jax.train_loops.learner import metric_sections

__all__ = [
    "Programs",
    "StopRequest",
    "TrainResult",
    "build_programs",
    "enable_compilation_cache",
    "evaluation_env",
    "release_programs",
    "run_keys",
    "steps_per_iteration",
    "train",
    "training_env",
    "with_env",
]


@dataclasses.dataclass
class TrainResult:
    """What a finished run hands back to Python callers (the CLI writes the same to disk)."""

    log_dir: Path
    rows: list[dict[str, Any]]  # the metrics.jsonl rows this call wrote
    train_state: Any
    rollout_state: Any
    checkpoint: int | None = None  # the last checkpoint step written
    interrupted: str | None = None  # name of the signal that stopped the run early
    pruned: bool = False  # its trial asked to stop it
    diverged: bool = False  # a population member whose numbers stopped being finite
    members: list[TrainResult] | None = None  # a population: each member's own result

    @property
    def last_eval_reward(self) -> float | None:
        evals = [r["eval_reward"] for r in self.rows if "eval_reward" in r]
        return evals[-1] if evals else None


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


@dataclasses.dataclass
class Loop:
    """What the host loop carries between iterations."""

    cfg: TrainConfig  # the run's config (host-only fields may differ from the programs')
    programs: Programs
    run: Roster
    members: list[Member]
    log_dir: Path
    verbose: bool
    trial_metric: str
    start_iteration: int
    stage: dict[str, Any]
    clock: dict[str, float]
    stop: StopRequest
    saved: int | None  # the newest checkpoint step of this run


def default_log_dir(cfg: TrainConfig) -> Path:
    stamp = datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    name = f"{stamp}_{cfg.runner.experiment_name}" if cfg.runner.experiment_name else stamp
    return Path("runs") / task_dir_name(cfg.env.task) / name


def with_env(cfg: TrainConfig, env: Any) -> TrainConfig:
    """`cfg` whose `env.task` is the entry point `module:qualname` of `env` (a class, factory or
    instance), remembered in this process so that the run (and its resume here) rebuilds `env`."""
    task = entry_point_of(env)
    previous = registered(task)
    register_env(env)
    if previous is not None and previous is not env:
        release_programs()  # compiled for the object registered before under the same name
    return dataclasses.replace(cfg, env=dataclasses.replace(cfg.env, task=task))


def with_env_episode_length(cfg: TrainConfig) -> TrainConfig:
    """`cfg` whose unset `env.episode_length` is the env's own: config.yaml, the checkpoints and
    every member then record the value the run uses (resume, play and export read it there)."""
    return dataclasses.replace(cfg, env=with_episode_length(cfg.env))


def with_max_iterations(cfg: TrainConfig, max_iterations: int) -> TrainConfig:
    return dataclasses.replace(cfg, runner=dataclasses.replace(cfg.runner, max_iterations=max_iterations))


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
    trial: Any = None,
    trial_metric: str = "eval_reward",
    env: Any = None,
) -> TrainResult:
    """Train PPO as configured, writing config.yaml, metrics.jsonl, TensorBoard and checkpoints.

    `resume=True` continues the run in `log_dir` from its newest readable checkpoint (or
    `checkpoint`); `load` (default `runner.load`) warm-starts params and normalisers from another
    run's checkpoint, or from an rsl_rl/st_rl `.pt` file (`checkpoints.torch_checkpoints`).
    `runner.max_iterations` counts the whole run; `more_iterations` instead runs that many
    iterations from wherever the run starts (rsl_rl's `learn(num_learning_iterations)`).

    With `runner.num_seeds > 1` or a `sweep`, every member of the population trains in one
    program (`runners.population`); `log_dir` then holds a run folder per member and
    `TrainResult.members` their results.

    `trial` is st_rl's hyperparameter-search hook (an Optuna trial, or anything with `report(value,
    step)` and `should_prune()`; for a population, a list with one per member): it receives
    `trial_metric` of every evaluation, and a trial that should be pruned stops its run (the
    result's `pruned` is then true; a pruned member stops logging while the others go on).

    `env` (for notebooks) is an env class, a factory function or an env instance of one's own
    (`strl_jax.envs.entry_points`): the run's `env.task` becomes its entry point `module:qualname`,
    which checkpoints store and other processes import. One defined in `__main__` or inside a
    function is rebuilt only in this process; elsewhere pass `env=` again (also with `resume=True`).
    """
    if env is not None:
        cfg = with_env(cfg, env)
    cfg = with_env_episode_length(cfg)
    load = cfg.runner.load or None if load is None else load
    if load is not None and not resume and not Path(load).expanduser().exists():
        raise ConfigError(
            f"nothing to warm-start from at {str(load)!r} (--load / runner.load; a relative path is read "
            f"from {os.getcwd()!r}): give a run folder, a checkpoint folder or a model_N.pt, or "
            "runner.load='' to train from scratch"
        )
    if cfg.runner.compile_cache:
        enable_compilation_cache()
    log_dir = Path(log_dir or cfg.runner.log_dir or default_log_dir(cfg))
    if resume and not (log_dir / CHECKPOINT_DIR).is_dir() and not (log_dir / POPULATION_FILE).is_file():
        raise CheckpointError(f"no checkpoints to resume from in {str(log_dir)!r}")
    loop, train_state, rollout_state = start_run(
        cfg, log_dir, verbose, resume, checkpoint, load, more_iterations, trial, trial_metric
    )
    if handle_signals:
        loop.stop.install()
    train_state, rollout_state = run_loop(loop, train_state, rollout_state)
    return results(loop, train_state, rollout_state)


def start_run(
    cfg: TrainConfig,
    log_dir: Path,
    verbose: bool,
    resume: bool,
    checkpoint: int | None,
    load: str | Path | None,
    more_iterations: int | None,
    trial: Any,
    trial_metric: str,
) -> tuple[Loop, Any, Any]:
    """The programs, every member's folder, checkpoints and logger, and the states the loop
    starts from (`runners.run_start`)."""
    programs = build_programs(cfg)
    run = roster(cfg)
    trials = member_trials(trial, len(run.configs))
    log_dir.mkdir(parents=True, exist_ok=True)
    members = open_members(cfg, run, log_dir, resume, trials)
    try:
        train_state, rollout_state, run_meta = initial_state(
            cfg, programs, members, log_dir, resume, checkpoint, load
        )
    except BaseException:
        for member in members:
            member.manager.close()
        raise
    start_iteration = int(np.max(jax.device_get(local_copy(train_state.iteration))))
    if more_iterations is not None:
        cfg = with_max_iterations(cfg, start_iteration + more_iterations)  # the same programs
        for member in members:
            member.cfg = with_max_iterations(member.cfg, start_iteration + more_iterations)
    resumed_at = start_iteration if resume else None
    sections = metric_sections(programs.learner) | STAGE_SECTIONS
    start_members(cfg, run, members, log_dir, sections, resumed_at, start_iteration, verbose)
    loop = Loop(
        cfg=cfg,
        programs=programs,
        run=run,
        members=members,
        log_dir=log_dir,
        verbose=verbose,
        trial_metric=trial_metric,
        start_iteration=start_iteration,
        stage=run_meta["stage"],
        clock={"start": time.time(), "last": time.time(), "offset": run_meta["wall_time"]},
        stop=StopRequest(),
        saved=resumed_at,
    )
    return loop, train_state, rollout_state


def run_loop(loop: Loop, train_state: Any, rollout_state: Any) -> tuple[Any, Any]:
    """Iterate until `runner.max_iterations`, a stop request, or no member is left running;
    every checkpoint in flight is waited for and the loggers closed however it ends."""
    runner, programs = loop.cfg.runner, loop.programs
    iteration = loop.start_iteration
    next_iteration = stage_programs(loop.cfg, programs, loop.stage, iteration)
    if loop.verbose and iteration >= runner.max_iterations:
        print(f"run is at iteration {iteration} >= runner.max_iterations={runner.max_iterations}")
    try:
        while (
            iteration < runner.max_iterations and loop.stop.signal_name is None and any_running(loop.members)
        ):
            train_state, rollout_state, metrics = next_iteration(iteration, train_state, rollout_state)
            iteration += 1
            after_iteration(loop, train_state, jax.device_get(local_copy(metrics)), iteration)
            if saving(loop, iteration):
                elapsed = loop.clock["offset"] + time.time() - loop.clock["start"]
                state = {"train_state": train_state, "rollout_state": rollout_state}
                save_members(
                    programs.axis, loop.members, state, iteration, {"wall_time": elapsed, "stage": loop.stage}
                )
                loop.saved = iteration
            loop.clock["last"] = time.time()
    finally:
        loop.stop.uninstall()
        close_members(loop.members)
    return train_state, rollout_state


def after_iteration(loop: Loop, train_state: Any, metrics: dict, iteration: int) -> None:
    """Check, log and evaluate the iteration's metrics (host arrays). A plain run stops at the
    first non-finite number; a population member stops alone."""
    runner, population = loop.cfg.runner, loop.run.population
    advance_stage(loop.stage, runner, metrics, iteration)
    if not population:
        check_finite(metrics["finite"], iteration, loop.saved, loop.log_dir)
    changed = watch_divergence(loop, metrics, iteration)
    changed |= log_iteration(
        loop.programs,
        runner,
        loop.members,
        train_state,
        metrics,
        iteration,
        loop.clock,
        loop.trial_metric,
        loop.stage,
    )
    if population and loop.verbose and printing(runner, iteration, loop.start_iteration):
        print(population_summary(iteration, runner.max_iterations, loop.members), flush=True)
    if changed and population and is_primary():
        write_population_file(loop.log_dir, loop.run, [m.status for m in loop.members])


def saving(loop: Loop, iteration: int) -> bool:
    """Whether to checkpoint after `iteration`: every `save_interval`, at the end, on a stop
    request (of any process) and when no member is left running."""
    runner, stop = loop.cfg.runner, loop.stop
    periodic = runner.save_interval > 0 and iteration % runner.save_interval == 0
    stopping = any_process(stop.signal_name is not None)
    if stopping and stop.signal_name is None:
        stop.signal_name = "stop on another process"
    return periodic or iteration == runner.max_iterations or stopping or not any_running(loop.members)


def results(loop: Loop, train_state: Any, rollout_state: Any) -> TrainResult:
    """A plain run's result, or a population's with one result per member."""
    population = loop.run.population
    each = [
        TrainResult(
            log_dir=member.log_dir,
            rows=member.rows,
            train_state=loop.programs.axis.view(train_state, index),
            rollout_state=None if population else rollout_state,
            checkpoint=loop.saved,
            interrupted=loop.stop.signal_name,
            pruned=member.status == PRUNED,
            diverged=member.status == DIVERGED,
        )
        for index, member in enumerate(loop.members)
    ]
    if not population:
        return each[0]
    return TrainResult(
        log_dir=loop.log_dir,
        rows=[],
        train_state=train_state,
        rollout_state=rollout_state,
        checkpoint=loop.saved,
        interrupted=loop.stop.signal_name,
        members=each,
    )


def last_good_state(saved: int | None, log_dir: Path) -> str:
    """Where a stopped run can continue from."""
    if saved is None:
        return "no checkpoint of this run was written yet"
    return (
        f"the newest checkpoint (iteration {saved}) is the last good state: continue with "
        f"--resume {log_dir} after changing what diverged (e.g. a lower algorithm.learning_rate)"
    )


def watch_divergence(loop: Loop, metrics: dict, iteration: int) -> bool:
    """Warn, once per run, about a member whose finite numbers ran away (`runners.divergence`);
    with `runner.stop_on_divergence` a plain run stops before this iteration is logged or saved,
    a population member stops alone. True if a member's status changed."""
    runner = loop.cfg.runner
    changed = False
    for index, member in enumerate(loop.members):
        member_metrics = loop.programs.axis.view(metrics, index)
        if member.status != RUNNING or member.divergence_warned or first_non_finite(member_metrics["finite"]):
            continue  # a non-finite member is stopped by the finiteness check
        reward = float(member_metrics["rollout"]["reward_sum"]) / steps_per_iteration(member.cfg)
        what = diverged(member.cfg, member_metrics["scalars"], reward)
        if not what:
            continue
        member.divergence_warned = True
        message = divergence_message(what, iteration, runner.stop_on_divergence)
        if not runner.stop_on_divergence:
            warnings.warn(f"{member.log_dir}: {message}", DivergenceWarning, stacklevel=2)
        elif not loop.run.population:
            last = last_good_state(loop.saved, loop.log_dir)
            raise DivergenceError(f"{message} Nothing of this iteration was saved; {last}")
        else:
            print(f"{member.log_dir.name}: {message}", file=sys.stderr)
            member.status, changed = DIVERGED, True
    return changed


def check_finite(checks: dict, iteration: int, saved: int | None, log_dir: Path) -> None:
    """Stop the run at the first non-finite quantity, before anything of this iteration is saved."""
    bad = first_non_finite(checks)
    if not bad:
        return
    last = last_good_state(saved, log_dir)
    raise NonFiniteError(
        f"iteration {iteration}: the {bad[0]} is not finite (NaN or infinity)"
        + (f"; also: {', '.join(bad[1:4])}" + (" ..." if len(bad) > 4 else "") if len(bad) > 1 else "")
        + f". The run stopped without saving this iteration; {last}"
    )
