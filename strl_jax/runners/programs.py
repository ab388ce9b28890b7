"""The compiled programs of a config and the process's cache of them.

A plain run is a population of one (`devices.OneMember`): both build through the same
`devices.shard_programs`, a population's programs vmapped over its member axis.
"""

from __future__ import annotations

import collections
import dataclasses
import gc
import json
import os
from pathlib import Path
from typing import Any

import jax

from strl_jax.agents.algorithms import algorithm_spec, env_groups
from strl_jax.configs.loader import config_to_dict
from strl_jax.configs.schema import RunnerConfig, TrainConfig
from strl_jax.envs.command_curriculum import with_command_curriculum, without_command_curriculum
from strl_jax.envs.push_curriculum import with_push_curriculum, without_push_curriculum
from strl_jax.envs.tasks import make_env_from_config
from strl_jax.envs.vec_env import VecEnv, release_single_env_programs
from strl_jax.runners.devices import (
    MemberAxis,
    OneMember,
    ShardedPrograms,
    evaluate_program,
    init_optimizer_program,
    make_env_mesh,
    shard_programs,
)
from strl_jax.runners.learner_builder import make_learner
from strl_jax.runners.population import (
    MemberLearners,
    is_population,
    member_configs,
    sweep_settings,
    swept_values,
)
from strl_jax.train_loops.learner import Learner

# Runner fields only the host loop reads (the schema marks them `host_only`): runs that differ only
# in these share compiled programs (and the learner's copy of the config).
HOST_ONLY_RUNNER_FIELDS = tuple(
    f.name for f in dataclasses.fields(RunnerConfig) if f.metadata.get("host_only")
)


@dataclasses.dataclass(frozen=True)
class Programs:
    """The env, the learner and the compiled functions of one config.

    `init` and `iteration` run sharded over `sharded.mesh` (a mesh of one device included);
    `evaluate` runs on one device with local copies of the params. A population's programs take
    and return every member's state stacked on a leading axis (`axis.stacked`).
    """

    env: VecEnv
    learner: Learner  # member 0's learner (a plain run's own)
    init: Any
    iteration: Any
    evaluate: Any
    sharded: ShardedPrograms
    init_optimizer: Any  # (params, parts) -> a fresh optimiser state, for warm starts
    axis: MemberAxis  # the members: views of and stacks of their states

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
        _PROGRAMS[key] = compile_programs(cfg)
    return _PROGRAMS[key]


def training_env(cfg: TrainConfig) -> VecEnv:
    """The env the learner steps, with `env.auto_reset`'s source of fresh initial states (and
    `env.push_curriculum`'s pushes, `env.command_curriculum`'s commands)."""
    groups = env_groups(algorithm_spec(cfg.algorithm.class_name))
    env = make_env_from_config(cfg.env, extra_groups=groups).replace(auto_reset=cfg.env.auto_reset)
    env = with_push_curriculum(env, cfg.env.push_curriculum)
    return with_command_curriculum(env, cfg.env.command_curriculum, cfg.env.obs_layout)


def evaluation_env(env: VecEnv, cfg: TrainConfig) -> VecEnv:
    """The evaluation's envs: only each env's first episode counts, so they never reset (the
    evaluation program compiles no reset inside its steps), pushed and commanded as the task
    pushes and commands (no curriculum). Built from `env`: building one takes seconds."""
    task_own = without_push_curriculum(without_command_curriculum(env))
    return task_own.replace(num_envs=cfg.runner.num_eval_envs, auto_reset="none")


def member_axis(cfg: TrainConfig, members: list[TrainConfig], env: VecEnv, learner: Learner) -> MemberAxis:
    """A plain run's one member, or a population's members built inside a vmap from traced
    swept values (`runners.population`); `learner` is member 0's."""
    if not is_population(cfg):
        return OneMember(learner)
    learners = MemberLearners(
        env=env, base=members[0], values=swept_values(members, list(sweep_settings(cfg)))
    )
    learners.check_traceable(learner)
    return learners


def compile_programs(cfg: TrainConfig) -> Programs:
    """The programs of every member of `cfg` (one for a plain run), sharded over the env mesh."""
    members = member_configs(cfg) if is_population(cfg) else [cfg]
    env = training_env(members[0])
    learner = make_learner(env, members[0])
    axis = member_axis(cfg, members, env, learner)
    sharded = shard_programs(axis, learner, members[0], make_env_mesh(cfg.runner.num_devices))
    return Programs(
        env=env,
        learner=learner,
        init=sharded.init,
        iteration=sharded.iteration,
        evaluate=evaluate_program(axis, evaluation_env(env, cfg)),
        sharded=sharded,
        init_optimizer=init_optimizer_program(axis),
        axis=axis,
    )


MIN_CACHED_COMPILE_VARIABLE = "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"  # jax's own name


def enable_compilation_cache(path: str | None = None) -> None:
    """Reuse compiled XLA programs across processes (big win: compiles take tens of seconds).

    Programs that compiled in under a second are not stored, unless jax's own
    `JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS` says otherwise (the test suite stores every one).
    """
    path = path or os.environ.get("STRL_JAX_CACHE_DIR") or str(Path.home() / ".cache" / "strl_jax" / "xla")
    jax.config.update("jax_compilation_cache_dir", path)
    min_seconds = float(os.environ.get(MIN_CACHED_COMPILE_VARIABLE, 1.0))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", min_seconds)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
