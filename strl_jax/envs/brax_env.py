"""Brax environments as strl_jax tasks: the task registry, backends and index-based groups.

Batching, fresh-random auto-reset and truncation are `strl_jax.envs.vec_env.VecEnv`'s.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import brax.envs
import jax
import jax.numpy as jnp

from strl_jax.envs.vec_env import Observation, VecEnv
from strl_jax.errors import ConfigError

BACKENDS = ("mjx", "generalized", "positional", "spring")


def available_tasks() -> list[str]:
    """Every environment name registered with Brax (including ones users register)."""
    return sorted(brax.envs._envs)  # noqa: SLF001 - brax exposes no public listing


def available_backends() -> list[str]:
    return list(BACKENDS)


@dataclasses.dataclass(frozen=True)
class ObservationGroups:
    """Named views of the Brax observation: `(name, indices or None for all)` per group.

    `policy` and `critic` always exist; by default both see the whole observation.
    """

    groups: tuple[tuple[str, tuple[int, ...] | None], ...] = (("policy", None), ("critic", None))

    def __call__(self, brax_state: Any) -> Observation:
        obs = brax_state.obs
        return {name: obs if idx is None else obs[..., jnp.asarray(idx)] for name, idx in self.groups}


def make_observation_groups(spec: dict, observation_size: int) -> ObservationGroups:
    """Validate `env.obs_groups` ({group: [indices]}) against the env's observation size."""
    groups: dict[str, tuple[int, ...] | None] = {"policy": None, "critic": None}
    for name, idx in spec.items():
        if idx is None:
            groups[name] = None
            continue
        if not isinstance(idx, list | tuple) or not idx or not all(isinstance(i, int) for i in idx):
            raise ConfigError(
                f"env.obs_groups.{name} must be a non-empty list of integer indices, got {idx!r}"
            )
        bad = [i for i in idx if not -observation_size <= i < observation_size]
        if bad:
            raise ConfigError(
                f"env.obs_groups.{name} has indices {bad} outside the observation of size {observation_size}"
            )
        groups[name] = tuple(idx)
    return ObservationGroups(tuple(groups.items()))


def make_brax_env(
    task: str,
    backend: str,
    num_envs: int,
    episode_length: int,
    action_repeat: int = 1,
    clip_actions: float | None = 1.0,
    env_kwargs: dict | None = None,
    obs_groups: dict | None = None,
) -> VecEnv:
    """Create a batched Brax env by name, with clear errors for unknown names or kwargs."""
    if task not in available_tasks():
        raise ConfigError(f"unknown Brax task {task!r}; valid Brax tasks: {available_tasks()}")
    if backend not in BACKENDS:
        raise ConfigError(f"unknown backend {backend!r}; valid backends: {list(BACKENDS)}")
    try:
        env = brax.envs.get_environment(task, backend=backend, **(env_kwargs or {}))
    except TypeError as err:
        raise ConfigError(f"env.env_kwargs {env_kwargs!r} do not fit brax task {task!r}: {err}") from None
    return VecEnv(
        env=env,
        task=task,
        num_envs=num_envs,
        episode_length=episode_length,
        action_repeat=action_repeat,
        clip_actions=clip_actions,
        # eval_shape: Brax's `observation_size` runs an uncompiled reset (seconds per env build).
        observe=make_observation_groups(
            obs_groups or {}, int(jax.eval_shape(env.reset, jax.random.PRNGKey(0)).obs.shape[-1])
        ),
    )
