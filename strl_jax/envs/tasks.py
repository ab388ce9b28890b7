"""One task namespace over the env families: Brax (`ant`, `hopper`, ...) and MuJoCo Playground
(`Go1JoystickFlatTerrain`, `CartpoleBalance`, ...; with the `playground` extra)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from strl_jax.envs.amp_obs import WithAmpObservation
from strl_jax.envs.brax_env import NAMING_HINT as BRAX_NAMING_HINT
from strl_jax.envs.brax_env import available_tasks as brax_tasks
from strl_jax.envs.brax_env import make_brax_env
from strl_jax.envs.menagerie import EXTRA
from strl_jax.envs.obs_components import select_components
from strl_jax.envs.perception import HEIGHTFIELD_TASKS
from strl_jax.envs.playground_env import make_playground_env, playground_tasks
from strl_jax.envs.vec_env import VecEnv
from strl_jax.errors import ConfigError

FAMILIES = ("brax", "playground")
PLAYGROUND_NAMING_HINT = (
    "a Playground group has components where strl_jax.envs.playground_components lays out "
    "the task's observation keys"
)


def task_family(task: str) -> str:
    """`brax` or `playground`; a `ConfigError` listing both families' tasks otherwise.

    Brax names are checked first, so Playground (slow to import) loads only for its own tasks.
    """
    if task in brax_tasks():
        return "brax"
    if task in playground_tasks():
        return "playground"
    playground = playground_tasks()
    listing = (
        f"MuJoCo Playground tasks: {playground}"
        if playground
        else (
            f"MuJoCo Playground tasks (Go1JoystickFlatTerrain, G1JoystickFlatTerrain, CartpoleBalance, ...) "
            f"need `{EXTRA}`"
        )
    )
    raise ConfigError(f"unknown task {task!r}; Brax tasks: {brax_tasks()}; {listing}")


def with_amp_frames(env: VecEnv, env_cfg) -> VecEnv:
    """The `amp` group: the AMP frame of the physics state (`env.amp_obs_components`)."""
    components = None if env_cfg.amp_obs_components is None else tuple(env_cfg.amp_obs_components)
    return env.replace(observe=WithAmpObservation(env.observe, env_cfg.task, components))


# Observation groups a learner part may ask the env for by name (`PartSpec.env_groups` in
# `agents.algorithms`): the families whose tasks can provide it, and the function adding it.
EXTRA_GROUPS: dict[str, tuple[tuple[str, ...], Callable[[VecEnv, Any], VecEnv]]] = {
    "amp": (("brax",), with_amp_frames),
}


def check_extra_groups(task: str, extra_groups: tuple[str, ...]) -> None:
    family = task_family(task)
    for name in extra_groups:
        if name not in EXTRA_GROUPS:
            raise ConfigError(
                f"no env provides the observation group {name!r}; the groups parts may ask for: "
                f"{list(EXTRA_GROUPS)}"
            )
        families, _ = EXTRA_GROUPS[name]
        if family not in families:
            raise ConfigError(
                f"the {name!r} observation group is defined for {' and '.join(families)} tasks, not for "
                f"{family} task {task!r}"
            )


def make_env_from_config(env_cfg, num_envs: int | None = None, extra_groups: tuple[str, ...] = ()) -> VecEnv:
    """Build from an `EnvConfig`; `num_envs` overrides the configured count (evaluation envs).

    `extra_groups` adds observation groups a learner part reads (`EXTRA_GROUPS`, e.g. `amp`, the
    AMP frame of the physics state), after `env.obs_components` selected components of the groups.
    """
    check_extra_groups(env_cfg.task, extra_groups)
    env = make_task_env(env_cfg, env_cfg.num_envs if num_envs is None else num_envs)
    for name in extra_groups:
        env = EXTRA_GROUPS[name][1](env, env_cfg)
    return env


def make_task_env(env_cfg, count: int) -> VecEnv:
    """The task's env with its configured groups and components."""
    if task_family(env_cfg.task) == "playground":
        env = make_playground_env(
            task=env_cfg.task,
            num_envs=count,
            episode_length=env_cfg.episode_length,
            action_repeat=env_cfg.action_repeat,
            clip_actions=env_cfg.clip_actions,
            overrides=env_cfg.playground,
            obs_groups=env_cfg.obs_groups,
            domain_randomization=env_cfg.domain_randomization,
            height_scan=env_cfg.height_scan,
            forward_depth=env_cfg.forward_depth,
        )
        return select_components(env, env_cfg.obs_components, PLAYGROUND_NAMING_HINT)
    if env_cfg.playground:
        raise ConfigError(
            f"env.playground applies to MuJoCo Playground tasks, not to Brax task {env_cfg.task!r}"
        )
    if env_cfg.height_scan:
        raise ConfigError(
            f"env.height_scan needs a task whose ground is a heightfield, not Brax task {env_cfg.task!r}; "
            f"tasks with one: {list(HEIGHTFIELD_TASKS)}"
        )
    if env_cfg.forward_depth:
        raise ConfigError(
            f"env.forward_depth casts rays in a MuJoCo Playground task's MJX model, not in Brax task "
            f"{env_cfg.task!r}; valid: Playground tasks (Go1JoystickFlatTerrain, Go1JoystickRoughTerrain, "
            f"...; `{EXTRA}`)"
        )
    env = make_brax_env(
        task=env_cfg.task,
        backend=env_cfg.backend,
        num_envs=count,
        episode_length=env_cfg.episode_length,
        action_repeat=env_cfg.action_repeat,
        clip_actions=env_cfg.clip_actions,
        env_kwargs=env_cfg.env_kwargs,
        obs_groups=env_cfg.obs_groups,
    )
    return select_components(env, env_cfg.obs_components, BRAX_NAMING_HINT)
