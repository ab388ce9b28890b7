"""The table of algorithms: each st_rl / rsl_rl algorithm name is an update rule and its parts.

Config validation, the device-split checks, the env's extra observation groups and the learner
the runner builds all derive from this table (`train_loops.learners` turns a row into parts).
A new algorithm is a new row; a new part is a config check here and a builder there.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from strl_jax.agents.motion_prior import AMP_GROUP, check_amp_config
from strl_jax.agents.tppo import check_teacher_config
from strl_jax.errors import ConfigError

UPDATES = ("ppo", "behavior_cloning")


@dataclasses.dataclass(frozen=True)
class AlgorithmSpec:
    """An update rule (`ppo`: minibatch epochs; `behavior_cloning`: rsl_rl Distillation's
    time-ordered BPTT) and the names of the parts it adds, in the order they act."""

    update: str
    parts: tuple[str, ...] = ()

    @property
    def minibatched(self) -> bool:
        """The update splits the rollout into `num_mini_batches` (envs must split evenly)."""
        return self.update == "ppo"


ALGORITHMS: dict[str, AlgorithmSpec] = {
    "PPO": AlgorithmSpec("ppo"),
    "TPPO": AlgorithmSpec("ppo", ("teacher",)),
    "APPO": AlgorithmSpec("ppo", ("amp",)),
    "ATPPO": AlgorithmSpec("ppo", ("teacher", "amp")),
    "Distillation": AlgorithmSpec("behavior_cloning", ("teacher",)),
}

# Per part: checks of its config fields (cheap; files are read when the learner is built) and
# the env observation groups it needs.
PART_CONFIG_CHECKS: dict[str, Callable[[Any], None]] = {
    "teacher": check_teacher_config,
    "amp": check_amp_config,
}
PART_ENV_GROUPS: dict[str, tuple[str, ...]] = {"amp": (AMP_GROUP,)}


def algorithm_spec(name: str) -> AlgorithmSpec:
    """The row of `algorithm.class_name`; an unknown name is a `ConfigError` listing the valid ones."""
    if name not in ALGORITHMS:
        raise ConfigError(f"unknown algorithm.class_name {name!r}; valid choices: {list(ALGORITHMS)}")
    return ALGORITHMS[name]


def env_groups(spec: AlgorithmSpec) -> tuple[str, ...]:
    """Extra observation groups the env must provide for the algorithm's parts."""
    return tuple(g for part in spec.parts for g in PART_ENV_GROUPS.get(part, ()))


def check_algorithm_config(cfg: Any) -> None:
    """Run the config checks of every part of `algorithm.class_name` (assumes a known name)."""
    for part in algorithm_spec(cfg.algorithm.class_name).parts:
        check = PART_CONFIG_CHECKS.get(part)
        if check is not None:
            check(cfg)
