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
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import yaml

from strl_jax.agents.algorithms import algorithm_spec, env_groups
from strl_jax.agents.motion_prior import AMP_GROUP
from strl_jax.buffers.rollout_dataset import load_dataset_arrays, pretrain_settings
from strl_jax.configs.loader import config_to_dict
from strl_jax.configs.schema import TrainConfig
from strl_jax.envs.tasks import make_env_from_config
from strl_jax.envs.vec_env import VecEnv, release_single_env_programs
from strl_jax.errors import ConfigError, DivergenceError, DivergenceWarning, NonFiniteError
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
from strl_jax.train_loops.divergence import diverged, divergence_message
from strl_jax.train_loops.learner import Learner, first_non_finite, jit_evaluate
from strl_jax.train_loops.learners import make_learner
from strl_jax.train_loops.logging import RunLogger, population_summary
from strl_jax.train_loops.population import (
    DIVERGED,
    POPULATION_FILE,
    PRUNED,
    RUNNING,
    MemberLearners,
    is_population,
    jit_population_evaluate,
    member_configs,
    member_name,
    member_view,
    population_init_optimizer,
    read_member_status,
    shard_population,
    stack_members,
    sweep_settings,
    swept_values,
    write_population_file,
)
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
    pruned: bool = False  # its trial asked to stop it
    diverged: bool = False  # a population member whose numbers stopped being finite
    members: list[TrainResult] | None = None  # a population: each member's own result

    @property
    def last_eval_reward(self) -> float | None:
        evals = [r["eval_reward"] for r in self.rows if "eval_reward" in r]
        return evals[-1] if evals else None


@dataclasses.dataclass(frozen=True)
class Programs:
    """The env, the learner and the compiled functions of one config.

    `init` and `iteration` run sharded over `sharded.mesh` (a mesh of one device included);
    `evaluate` runs on one device with local copies of the params. A population's programs take
    and return every member's state stacked; `members` holds their configs (None: a plain run).
    """

    env: VecEnv
    learner: Learner  # a plain run's learner, or member 0's
    init: Any
    iteration: Any
    evaluate: Any
    sharded: ShardedPrograms
    init_optimizer: Any  # (params, parts) -> a fresh optimiser state, for warm starts
    members: list[TrainConfig] | None = None
    names: list[str] = dataclasses.field(default_factory=list)  # the members' folder names
    paths: list[str] = dataclasses.field(default_factory=list)  # the swept fields

    def env_iteration(self, train_state: Any, rollout_state: Any) -> Any:
        """One iteration in the env: the initial-state pool's refresh (where the env has one),
        then the iteration, two programs dispatched without waiting."""
        if self.sharded.refresh is not None:
            rollout_state = self.sharded.refresh(rollout_state)
        return self.iteration(train_state, rollout_state)


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
    release_single_env_programs()
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
        _PROGRAMS[key] = population_programs(cfg) if is_population(cfg) else plain_programs(cfg)
    return _PROGRAMS[key]


def training_env(cfg: TrainConfig) -> VecEnv:
    """The env the learner steps, with `env.auto_reset`'s source of fresh initial states."""
    groups = env_groups(algorithm_spec(cfg.algorithm.class_name))
    return make_env_from_config(cfg.env, amp=AMP_GROUP in groups).replace(auto_reset=cfg.env.auto_reset)


def evaluation_env(env: VecEnv, cfg: TrainConfig) -> VecEnv:
    """The evaluation's envs: only each env's first episode counts, so they never reset (the
    evaluation program compiles no reset inside its steps). Built from `env`: building one takes
    seconds."""
    return env.replace(num_envs=cfg.runner.num_eval_envs, auto_reset="none")


def plain_programs(cfg: TrainConfig) -> Programs:
    env = training_env(cfg)
    learner = make_learner(env, cfg)
    eval_env = evaluation_env(env, cfg)
    sharded = shard_programs(learner, cfg, make_env_mesh(cfg.runner.num_devices))
    return Programs(
        env=env,
        learner=learner,
        init=sharded.init,
        iteration=sharded.iteration,
        evaluate=jit_evaluate(learner, eval_env),
        sharded=sharded,
        init_optimizer=learner.init_optimizer,
    )


def population_programs(cfg: TrainConfig) -> Programs:
    """Every member's programs vmapped into one (`train_loops.population`)."""
    members = member_configs(cfg)
    paths = list(sweep_settings(cfg))
    base = members[0]
    env = training_env(base)
    learner = make_learner(env, base)
    learners = MemberLearners(env=env, base=base, values=swept_values(members, paths))
    learners.check_traceable(learner)
    sharded = shard_population(learners, learner, base, make_env_mesh(cfg.runner.num_devices))
    return Programs(
        env=env,
        learner=learner,
        init=sharded.init,
        iteration=sharded.iteration,
        evaluate=jit_population_evaluate(learners, evaluation_env(env, cfg)),
        sharded=sharded,
        init_optimizer=population_init_optimizer(learners),
        members=members,
        names=[member_name(i, m, paths) for i, m in enumerate(members)],
        paths=paths,
    )


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
    iteration: int,
    cfg: TrainConfig,
    metrics: dict,
    window: dict,
    wall: float,
    dt: float,
    pretrained: int = 0,
) -> dict[str, Any]:
    """Turn one iteration's device metrics (already on host) into a metrics.jsonl row: the
    episode statistics of the logging window, then every scalar the learner reports.
    `pretrained` iterations learned from a dataset: they took no env steps."""
    episodes = window["episodes"]
    row: dict[str, Any] = {
        "iteration": iteration,
        "env_steps": (iteration - pretrained) * steps_per_iteration(cfg),
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


@dataclasses.dataclass
class Member:
    """One run of the loop: a plain run, or one member of a population (its own folder,
    checkpoints, logger and logging window)."""

    cfg: TrainConfig
    log_dir: Path
    manager: Any
    logger: RunLogger | None = None
    window: dict[str, Any] = dataclasses.field(default_factory=lambda: _empty_window())
    rows: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    status: str = RUNNING
    trial: Any = None
    divergence_warned: bool = False  # the divergence warning is given once per run


def open_members(cfg: TrainConfig, programs: Programs, log_dir: Path, resume: bool) -> list[Member]:
    """The plain run in `log_dir`, or every member in its own subfolder of it."""
    if programs.members is None:
        manager = open_manager(log_dir / CHECKPOINT_DIR, cfg.runner.max_checkpoints_to_keep)
        return [Member(cfg, log_dir, manager)]
    if resume and not (log_dir / POPULATION_FILE).is_file():
        raise CheckpointError(f"{str(log_dir)!r} is not a population run (no {POPULATION_FILE})")
    status = read_member_status(log_dir, programs.names) if resume else [RUNNING] * len(programs.names)
    members = []
    for name, member_cfg, member_status in zip(programs.names, programs.members, status, strict=True):
        member_dir = log_dir / name
        if resume and not (member_dir / CHECKPOINT_DIR).is_dir():
            raise CheckpointError(f"no checkpoints to resume from in {str(member_dir)!r}")
        member_dir.mkdir(parents=True, exist_ok=True)
        manager = open_manager(member_dir / CHECKPOINT_DIR, cfg.runner.max_checkpoints_to_keep)
        members.append(Member(member_cfg, member_dir, manager, status=member_status))
    return members


def _initial_state(
    cfg: TrainConfig, programs: Programs, members: list[Member], resume: bool, checkpoint: int | None, load
) -> tuple[Any, Any, float]:
    """`(train_state, rollout_state, run meta)` to start the loop from: the meta holds the elapsed
    seconds (`wall_time`) and the pretraining `stage`; each member's logging window is set from
    its checkpoint."""
    if resume:
        states, meta = restore_members(programs, members, checkpoint)
        meta = {"wall_time": float(meta["wall_time"]), "stage": meta.get("stage", fresh_stage())}
        if programs.members is None:
            return states["train_state"], states["rollout_state"], meta
        place = jax.jit(lambda tree: tree, out_shardings=_state_shardings(programs))
        return *place((states["train_state"], states["rollout_state"])), meta
    for member in members:
        if member.manager.all_steps():
            raise CheckpointError(
                f"{str(member.log_dir)!r} already holds checkpoints; continue that run with --resume "
                f"{member.log_dir if programs.members is None else member.log_dir.parent} "
                "or choose another --log_dir"
            )
    init_key = _init_keys(programs, members)
    fresh = {"wall_time": 0.0, "stage": fresh_stage()}
    if load is None:
        train_state, rollout_state = programs.init(init_key)
        return train_state, rollout_state, fresh
    abstract, _ = jax.eval_shape(programs.learner.init, jax.random.PRNGKey(0))
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
            manipulate=checkpoint_manipulator(cfg, member_params(programs, train_state, 0)),
            manipulator_name=f"runner.ckpt_manipulator {cfg.runner.ckpt_manipulator!r}",
        )
    if programs.members is not None:  # every member starts from the same weights
        params, normalizers = stack_members([(params, normalizers)] * len(programs.members))
    train_state = warm_start(train_state, params, normalizers, programs)
    return train_state, rollout_state, fresh


def fresh_stage() -> dict[str, Any]:
    """Pretraining progress (st_rl's TwoStageRunner): iterations that learned from the dataset,
    and whether the env has taken over (the iterations ran out or the dataset was used up)."""
    return {"pretrained": 0, "over": False}


def pretraining(runner: Any, stage: dict[str, Any], iteration: int) -> bool:
    """Whether the iteration after `iteration` learns from the dataset."""
    return runner.pretrain_iterations > 0 and not stage["over"] and iteration < runner.pretrain_iterations


def advance_stage(stage: dict[str, Any], runner: Any, metrics: dict, iteration: int) -> None:
    """Count a pretraining iteration (its metrics report `dataset_used_up`); the env takes over
    after `pretrain_iterations` of them, or once the dataset is used up."""
    used_up = metrics["scalars"].get("dataset_used_up")
    if used_up is None:
        return
    stage["pretrained"] += 1
    if float(used_up) > 0 or iteration >= runner.pretrain_iterations:
        stage["over"] = True


def pretrain_dataset(cfg: TrainConfig, programs: Programs) -> Any:
    """The demonstration dataset's arrays, replicated on the mesh (`buffers.rollout_dataset`)."""
    learner = programs.learner
    shapes = learner.policy_groups(learner.env.observation_shapes())
    settings = pretrain_settings(cfg.runner.pretrain_dataset)
    arrays = load_dataset_arrays(settings, shapes, learner.env.action_size, cfg.seed)
    replicated = jax.sharding.NamedSharding(programs.sharded.mesh, jax.sharding.PartitionSpec())
    return jax.tree.map(
        lambda x: jax.make_array_from_callback(x.shape, replicated, lambda idx: x[idx]), arrays
    )


def _init_keys(programs: Programs, members: list[Member]) -> jax.Array:
    """The init key of each member's own seed (a plain run: its one key)."""
    keys = [run_keys(m.cfg)[0] for m in members]
    return keys[0] if programs.members is None else jnp.stack(keys)


def _state_shardings(programs: Programs) -> tuple[Any, Any]:
    return programs.sharded.train_sharding, programs.sharded.rollout_sharding


def restore_members(
    programs: Programs, members: list[Member], checkpoint: int | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Every member's state from the newest checkpoint step they all hold (or `checkpoint`),
    stacked for a population; newer steps are moved aside and metrics rows after it dropped."""
    train_abs, rollout_abs = jax.eval_shape(programs.learner.init, jax.random.PRNGKey(0))
    abstract = {"train_state": train_abs, "rollout_state": rollout_abs}
    single = programs.members is None
    shardings = (
        {"train_state": programs.sharded.train_sharding, "rollout_state": programs.sharded.rollout_sharding}
        if single
        else None  # read to host, stacked, then placed with the population's shardings
    )
    common = sorted(set.intersection(*(set(m.manager.all_steps()) for m in members)), reverse=True)
    if not single and not common:
        raise CheckpointError(f"the members of {str(members[0].log_dir.parent)!r} share no checkpoint step")
    candidates: list[int | None] = [checkpoint] if checkpoint is not None or single else common
    for i, step in enumerate(candidates):
        try:
            restored = [restore_checkpoint(m.manager, abstract, step, shardings) for m in members]
            break
        except CheckpointError:
            if checkpoint is not None or single or i + 1 == len(candidates):
                raise
    found = restored[0][2]
    for member, (_, meta, _) in zip(members, restored, strict=True):
        member.window = meta["window"]
        if is_primary():
            supersede_after(member.manager, member.log_dir, found)
            truncate_metrics(member.log_dir / "metrics.jsonl", found)
    sync_processes("strl_jax_resume")
    for member in members:
        member.manager.reload()
    meta = restored[0][1]
    if single:
        return restored[0][0], meta
    return stack_members([jax.device_get(state) for state, _, _ in restored]), meta


def member_params(programs: Programs, train_state: Any, index: int) -> Any:
    """Member `index`'s train state (a plain run's own)."""
    return train_state if programs.members is None else member_view(train_state, index)


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
    init_optimizer = jax.jit(programs.init_optimizer, out_shardings=shardings.opt_state)
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
    trial: Any = None,
    trial_metric: str = "eval_reward",
) -> TrainResult:
    """Train PPO as configured, writing config.yaml, metrics.jsonl, TensorBoard and checkpoints.

    `resume=True` continues the run in `log_dir` from its newest readable checkpoint (or
    `checkpoint`); `load` warm-starts params and normalisers from another run's checkpoint, or
    from an rsl_rl/st_rl `.pt` file (`train_loops.torch_checkpoints`).
    `runner.max_iterations` counts the whole run; `more_iterations` instead runs that many
    iterations from wherever the run starts (rsl_rl's `learn(num_learning_iterations)`).

    With `runner.num_seeds > 1` or a `sweep`, every member of the population trains in one
    program (`train_loops.population`); `log_dir` then holds a run folder per member and
    `TrainResult.members` their results.

    `trial` is st_rl's hyperparameter-search hook (an Optuna trial, or anything with `report(value,
    step)` and `should_prune()`; for a population, a list with one per member): it receives
    `trial_metric` of every evaluation, and a trial that should be pruned stops its run (the
    result's `pruned` is then true; a pruned member stops logging while the others go on).
    """
    if cfg.runner.compile_cache:
        enable_compilation_cache()
    log_dir = Path(log_dir or cfg.runner.log_dir or default_log_dir(cfg))
    if resume and not (log_dir / CHECKPOINT_DIR).is_dir() and not (log_dir / POPULATION_FILE).is_file():
        raise CheckpointError(f"no checkpoints to resume from in {str(log_dir)!r}")
    programs = build_programs(cfg)
    trials = _member_trials(trial, programs)
    log_dir.mkdir(parents=True, exist_ok=True)
    members = open_members(cfg, programs, log_dir, resume)
    try:
        train_state, rollout_state, run_meta = _initial_state(
            cfg, programs, members, resume, checkpoint, load
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
    population = programs.members is not None
    runner = cfg.runner
    start_members(cfg, programs, members, trials, log_dir, start_iteration, resume, verbose)
    iteration = start_iteration
    saved = start_iteration if resume else None
    stop = StopRequest().install() if handle_signals else StopRequest()
    clock = {"start": time.time(), "last": time.time(), "offset": run_meta["wall_time"]}
    stage = run_meta["stage"]
    dataset = pretrain_dataset(cfg, programs) if pretraining(runner, stage, start_iteration) else None
    if verbose and start_iteration >= runner.max_iterations:
        print(f"run is at iteration {start_iteration} >= runner.max_iterations={runner.max_iterations}")
    try:
        while iteration < runner.max_iterations and stop.signal_name is None and _any_running(members):
            if pretraining(runner, stage, iteration):
                states = programs.sharded.pretrain(train_state, rollout_state, dataset)
            else:
                states = programs.env_iteration(train_state, rollout_state)
            train_state, rollout_state, metrics = states
            iteration += 1
            metrics = jax.device_get(local_copy(metrics))
            advance_stage(stage, runner, metrics, iteration)
            if not population:
                check_finite(metrics["finite"], iteration, saved, log_dir)
            changed = watch_divergence(programs, runner, members, metrics, iteration, saved, log_dir)
            changed |= log_iteration(
                programs, runner, members, train_state, metrics, iteration, clock, trial_metric, stage
            )
            if population and verbose and printing(runner, iteration, start_iteration):
                print(population_summary(iteration, runner.max_iterations, members), flush=True)
            if changed and population and is_primary():
                write_population_file(log_dir, programs, [m.status for m in members])
            periodic = runner.save_interval > 0 and iteration % runner.save_interval == 0
            stopping = any_process(stop.signal_name is not None)
            if stopping and stop.signal_name is None:
                stop.signal_name = "stop on another process"
            if periodic or iteration == runner.max_iterations or stopping or not _any_running(members):
                save_members(programs, members, train_state, rollout_state, iteration, clock, stage)
                saved = iteration
            clock["last"] = time.time()
    finally:
        stop.uninstall()
        close_members(members)
    results = [
        TrainResult(
            log_dir=member.log_dir,
            rows=member.rows,
            train_state=member_params(programs, train_state, index),
            rollout_state=None if population else rollout_state,
            checkpoint=saved,
            interrupted=stop.signal_name,
            pruned=member.status == PRUNED,
            diverged=member.status == DIVERGED,
        )
        for index, member in enumerate(members)
    ]
    if not population:
        return results[0]
    return TrainResult(
        log_dir=log_dir,
        rows=[],
        train_state=train_state,
        rollout_state=rollout_state,
        checkpoint=saved,
        interrupted=stop.signal_name,
        members=results,
    )


def with_max_iterations(cfg: TrainConfig, max_iterations: int) -> TrainConfig:
    return dataclasses.replace(cfg, runner=dataclasses.replace(cfg.runner, max_iterations=max_iterations))


def printing(runner: Any, iteration: int, start_iteration: int) -> bool:
    """Console summaries: every `print_interval`, the first and the last logged iteration."""
    logged = iteration % runner.log_interval == 0 or iteration == runner.max_iterations
    return logged and (
        iteration % runner.print_interval == 0
        or iteration == runner.max_iterations
        or iteration == start_iteration + 1
    )


def start_members(
    cfg: TrainConfig,
    programs: Programs,
    members: list[Member],
    trials: list[Any],
    log_dir: Path,
    start_iteration: int,
    resume: bool,
    verbose: bool,
) -> None:
    """config.yaml and the code state of the run (and of each member), and a logger per member."""
    primary = is_primary()
    population = programs.members is not None
    code_files: list[Path] = []
    if primary:
        (log_dir / "config.yaml").write_text(yaml.safe_dump(config_to_dict(cfg), sort_keys=False))
        code_files, notes = store_code_state(
            log_dir, cfg.runner.git_status_repos, resumed_at=start_iteration if resume else None
        )
        for note in notes if verbose else ():
            print(note)
    runner = cfg.runner
    for member, member_trial in zip(members, trials, strict=True):
        member.trial = member_trial
        member_config = config_to_dict(member.cfg)
        if primary and population:
            (member.log_dir / "config.yaml").write_text(yaml.safe_dump(member_config, sort_keys=False))
        member.logger = RunLogger(
            member.log_dir,
            runner.max_iterations,
            start_iteration=start_iteration,
            verbose=verbose and not population,
            enabled=primary,
            sections=programs.learner.metric_sections(),
            backend=runner.logger,
            project=runner.wandb_project if runner.logger == "wandb" else runner.neptune_project,
            config=member_config,
        )
        member.logger.save_files(code_files)
    if primary and population:
        write_population_file(log_dir, programs, [m.status for m in members])


def log_iteration(
    programs: Programs,
    runner: Any,
    members: list[Member],
    train_state: Any,
    metrics: dict,
    iteration: int,
    clock: dict[str, float],
    trial_metric: str,
    stage: dict[str, Any],
) -> bool:
    """Accumulate each running member's episodes; on logging iterations write its row (with its
    evaluation on evaluation iterations) and report to its trial. True if a member's status changed
    (it diverged, or its trial pruned it). `runner` is the run's runner config (host-only fields
    may differ from those of the config the programs were built for)."""
    is_last = iteration == runner.max_iterations
    logging_now = iteration % runner.log_interval == 0 or is_last
    evaluating = (
        logging_now and runner.eval_interval > 0 and (iteration % runner.eval_interval == 0 or is_last)
    )
    evals = (
        evaluate_members(programs, members, train_state, iteration) if evaluating and is_primary() else None
    )
    now = time.time()
    changed = False
    for index, member in enumerate(members):
        if member.status != RUNNING:
            continue
        member_metrics = metrics if programs.members is None else member_view(metrics, index)
        bad = first_non_finite(member_metrics["finite"])
        if bad:  # a population member (a plain run has stopped already)
            member.status, changed = DIVERGED, True
            print(
                f"{member.log_dir.name}: the {bad[0]} is not finite at iteration {iteration}; it stops here"
            )
            continue
        _accumulate(member.window, member_metrics)
        if logging_now:
            wall = clock["offset"] + now - clock["start"]
            row = _row_from_metrics(
                iteration,
                member.cfg,
                member_metrics,
                member.window,
                wall,
                now - clock["last"],
                stage["pretrained"],
            )
            if "dataset_used_up" in member_metrics["scalars"]:
                row["pretraining"] = 1.0
            if evals is not None:
                row.update(evals[index])
                row["wall_time"] = round(clock["offset"] + time.time() - clock["start"], 4)
            member.logger.write(row)
            member.rows.append(row)
            if printing(runner, iteration, member.logger.start_iteration):
                member.logger.summary(row)
            member.window = _empty_window()
            if evals is not None and report_to_trial(member, row, iteration, trial_metric):
                member.status, changed = PRUNED, True
        member.logger.progress(iteration)
    return changed


def save_members(
    programs: Programs,
    members: list[Member],
    train_state: Any,
    rollout_state: Any,
    iteration: int,
    clock: dict,
    stage: dict[str, Any],
) -> None:
    """A checkpoint of every member (pruned and diverged ones too: a population resumes together)."""
    elapsed = clock["offset"] + time.time() - clock["start"]
    state = {"train_state": train_state, "rollout_state": rollout_state}
    for index, member in enumerate(members):
        meta = {
            "window": member.window,
            "wall_time": elapsed,
            "stage": stage,
            "config": config_to_dict(member.cfg),
        }
        save_checkpoint(
            member.manager, iteration, state if programs.members is None else member_view(state, index), meta
        )


def close_members(members: list[Member]) -> None:
    """Wait for every member's checkpoint in flight, then close the loggers; the first failed
    save is raised after all were waited for."""
    failed: list[CheckpointError] = []
    try:
        for member in members:
            try:
                close_manager(member.manager)
            except CheckpointError as err:
                failed.append(err)
        if failed:
            raise failed[0]
    finally:
        for member in members:
            if member.logger is not None:
                member.logger.close()


def _any_running(members: list[Member]) -> bool:
    return any(m.status == RUNNING for m in members)


def _member_trials(trial: Any, programs: Programs) -> list[Any]:
    """One trial (or None) per member: a population takes a list of them."""
    count = 1 if programs.members is None else len(programs.members)
    if trial is None:
        return [None] * count
    trials = list(trial) if isinstance(trial, list | tuple) else [trial]
    if len(trials) != count:
        raise ConfigError(
            f"trial: {len(trials)} given for {count} run(s); a population of {count} members takes a "
            "list with one trial per member, in the order of population.json"
        )
    return trials


def report_to_trial(member: Member, row: dict[str, Any], iteration: int, metric: str) -> bool:
    """st_rl's `trial.report(metric, iteration)` after an evaluation; True when the trial asks to
    be pruned."""
    if member.trial is None:
        return False
    if metric not in row or row[metric] is None:
        raise ConfigError(f"trial_metric {metric!r} is not in the evaluation rows; they hold {sorted(row)}")
    member.trial.report(float(row[metric]), iteration)
    return bool(member.trial.should_prune())


def last_good_state(saved: int | None, log_dir: Path) -> str:
    """Where a stopped run can continue from."""
    if saved is None:
        return "no checkpoint of this run was written yet"
    return (
        f"the newest checkpoint (iteration {saved}) is the last good state: continue with "
        f"--resume {log_dir} after changing what diverged (e.g. a lower algorithm.learning_rate)"
    )


def watch_divergence(
    programs: Programs,
    runner: Any,
    members: list[Member],
    metrics: dict,
    iteration: int,
    saved: int | None,
    log_dir: Path,
) -> bool:
    """Warn, once per run, about a member whose finite numbers ran away (`train_loops.divergence`);
    with `runner.stop_on_divergence` a plain run stops before this iteration is logged or saved,
    a population member stops alone. True if a member's status changed."""
    changed = False
    for index, member in enumerate(members):
        member_metrics = metrics if programs.members is None else member_view(metrics, index)
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
        elif programs.members is None:
            last = last_good_state(saved, log_dir)
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


def evaluate_members(
    programs: Programs, members: list[Member], train_state: Any, iteration: int
) -> list[dict[str, float]]:
    """Deterministic evaluation of every member after `iteration`, each keyed by its own seed and
    the iteration (not by host history)."""
    keys = [jax.random.fold_in(run_keys(m.cfg)[1], iteration) for m in members]
    params, normalizers = local_copy((train_state.params, train_state.normalizers))
    if programs.members is None:
        results = [jax.device_get(programs.evaluate(params, normalizers, keys[0]))]
    else:
        stacked = jax.device_get(programs.evaluate(params, normalizers, jnp.stack(keys)))
        results = [member_view(stacked, i) for i in range(len(members))]
    return [
        {"eval_reward": float(r["episode_reward"]), "eval_episode_length": float(r["episode_length"])}
        | {f"eval_{k}": float(v) for k, v in r.items() if k in ("velrmsd", "CoT", "falls")}
        for r in results
    ]


def _empty_window() -> dict[str, Any]:
    return {"episodes": 0.0, "return_sum": 0.0, "length_sum": 0.0, "metrics": {}}


def _accumulate(window: dict[str, Any], metrics: dict) -> None:
    """Sum completed-episode statistics over the iterations of one log interval."""
    rollout = metrics["rollout"]
    for key in ("episodes", "return_sum", "length_sum"):
        window[key] += float(rollout[key])
    for key, value in rollout["metrics"].items():
        window["metrics"][key] = window["metrics"].get(key, 0.0) + float(np.asarray(value))
