"""Brax environments as strl_jax tasks: the task registry, backends and index-based groups
(unnamed index lists, or `{component: [indices]}` mappings that name the group's components), and
the named `state` layout an env declares (`obs_layout`) or the config gives (`env.obs_layout`).

Batching, fresh-random auto-reset and truncation are `strl_jax.envs.vec_env.VecEnv`'s.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import brax.envs
import jax
import jax.numpy as jnp

from strl_jax.envs.obs_layout import WHOLE, named_layouts
from strl_jax.envs.playground_components import Layout
from strl_jax.envs.vec_env import Observation, VecEnv
from strl_jax.errors import ConfigError
from strl_jax.static_take import take_static

BACKENDS = ("mjx", "generalized", "positional", "spring")


def available_tasks() -> list[str]:
    """Every environment name registered with Brax (including ones users register)."""
    return sorted(brax.envs._envs)  # noqa: SLF001 - brax exposes no public listing


def available_backends() -> list[str]:
    return list(BACKENDS)


Indices = tuple[int, ...]
NAMING_HINT = "a Brax task names them with env.obs_groups.<group> as a mapping {component: [indices]}"


@dataclasses.dataclass(frozen=True)
class ObservationGroups:
    """Named views of the Brax observation: `(name, indices or None for all)` per group.

    `policy` and `critic` always exist; by default both see the whole observation. `layouts`
    names the components of the groups given as mappings: `(group, ((name, size), ...))`.
    """

    groups: tuple[tuple[str, Indices | None], ...] = (("policy", None), ("critic", None))
    layouts: tuple[tuple[str, Layout], ...] = ()

    @property
    def components(self) -> dict[str, Layout]:
        return dict(self.layouts)

    def __call__(self, brax_state: Any) -> Observation:
        obs = brax_state.obs
        return {name: obs if idx is None else take_static(obs, idx) for name, idx in self.groups}


def group_indices(where: str, idx: Any, observation_size: int) -> Indices:
    """Validate one list of indices into the observation (`where` names it in errors)."""
    if (
        not isinstance(idx, list | tuple)
        or not idx
        or not all(isinstance(i, int) and not isinstance(i, bool) for i in idx)
    ):
        raise ConfigError(f"{where} must be a non-empty list of integer indices, got {idx!r}")
    bad = [i for i in idx if not -observation_size <= i < observation_size]
    if bad:
        raise ConfigError(f"{where} has indices {bad} outside the observation of size {observation_size}")
    return tuple(idx)


def named_group(name: str, spec: Mapping, observation_size: int) -> tuple[Indices, Layout]:
    """A group given as `{component: [indices]}`: the concatenated indices and its layout."""
    where = f"env.obs_groups.{name}"
    if not spec:
        raise ConfigError(f"{where} must name at least one component {{component: [indices]}}, got {{}}")
    bad = [c for c in spec if not isinstance(c, str)]
    if bad:
        raise ConfigError(f"{where}: component names must be strings, got {bad}")
    parts = {c: group_indices(f"{where}.{c}", idx, observation_size) for c, idx in spec.items()}
    indices = tuple(i for idx in parts.values() for i in idx)
    return indices, tuple((c, len(idx)) for c, idx in parts.items())


def make_observation_groups(
    spec: dict, observation_size: int, whole: Layout | None = None
) -> ObservationGroups:
    """Validate `env.obs_groups` against the env's observation size: per group a list of indices
    (unnamed), a mapping `{component: [indices]}` (named, concatenated in order) or null (all).
    A group that sees the whole observation has the layout `whole` (the env's `state` layout)."""
    groups: dict[str, Indices | None] = {"policy": None, "critic": None}
    layouts: dict[str, Layout] = {}
    for name, idx in spec.items():
        if idx is None:
            groups[name] = None
        elif isinstance(idx, Mapping):
            groups[name], layouts[name] = named_group(name, idx, observation_size)
        else:
            groups[name] = group_indices(f"env.obs_groups.{name}", idx, observation_size)
    if whole is not None:
        layouts = {g: whole for g, idx in groups.items() if idx is None} | layouts
    return ObservationGroups(tuple(groups.items()), tuple(layouts.items()))


@dataclasses.dataclass(frozen=True)
class BraxSettings:
    """How strl_jax wraps any Brax env (registry task or user env): `env.*` settings."""

    num_envs: int
    episode_length: int
    action_repeat: int = 1
    clip_actions: float | None = 1.0
    obs_groups: dict | None = None
    obs_layout: dict | None = None  # env.obs_layout ({"state": [[name, size], ...]})


def brax_vec_env(task: str, env: Any, obs: Any, settings: BraxSettings) -> VecEnv:
    """One construction for every Brax env object: groups and named components (the env's
    `obs_layout`, `env.obs_layout`: the `state` layout of the groups seeing the whole observation)."""
    size = int(obs.shape[-1])
    whole = named_layouts(task, env, settings.obs_layout, obs).get(WHOLE)
    observe = make_observation_groups(settings.obs_groups or {}, size, whole)
    return VecEnv(
        env=env,
        task=task,
        num_envs=settings.num_envs,
        episode_length=settings.episode_length,
        action_repeat=settings.action_repeat,
        clip_actions=settings.clip_actions,
        observe=observe,
        components=observe.components,
    )


def make_brax_env(
    task: str,
    backend: str,
    num_envs: int,
    episode_length: int,
    action_repeat: int = 1,
    clip_actions: float | None = 1.0,
    env_kwargs: dict | None = None,
    obs_groups: dict | None = None,
    obs_layout: dict | None = None,
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
    # eval_shape: Brax's `observation_size` runs an uncompiled reset (seconds per env build).
    obs = jax.eval_shape(env.reset, jax.ShapeDtypeStruct((2,), jnp.uint32)).obs
    settings = BraxSettings(num_envs, episode_length, action_repeat, clip_actions, obs_groups, obs_layout)
    return brax_vec_env(task, env, obs, settings)
