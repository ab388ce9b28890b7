"""One task namespace over the env families: Brax (`ant`, `hopper`, ...), MuJoCo Playground
(`Go1JoystickFlatTerrain`, `CartpoleBalance`, ...; with the `playground` extra), and envs of one's
own by entry point (`package.module:Name`, `strl_jax.envs.entry_points`): an MjxEnv is of the
`playground` family, a Brax env of the `brax` family."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import brax.envs

from strl_jax.envs.amp_obs import WithAmpObservation
from strl_jax.envs.brax_env import NAMING_HINT as BRAX_NAMING_HINT
from strl_jax.envs.brax_env import BraxSettings, brax_vec_env, make_brax_env
from strl_jax.envs.brax_env import available_tasks as brax_tasks
from strl_jax.envs.entry_points import (
    EXPECTED,
    EnvSettings,
    default_config_of,
    is_entry_point,
    load_target,
    user_env,
)
from strl_jax.envs.hfield_contacts import check_hfield_contacts
from strl_jax.envs.menagerie import EXTRA
from strl_jax.envs.obs_components import select_components
from strl_jax.envs.off_terrain import check_off_terrain
from strl_jax.envs.perception import (
    HEIGHTFIELD_TASKS,
    USER_HEIGHTFIELD,
    forward_depth_setting,
    height_scan_setting,
    require_jax_impl,
)
from strl_jax.envs.playground_components import playground_default_config
from strl_jax.envs.playground_env import (
    PlaygroundSettings,
    make_playground_env,
    playground_config,
    playground_tasks,
    playground_vec_env,
)
from strl_jax.envs.true_state import TRUE_STATE, true_state_setting
from strl_jax.envs.vec_env import VecEnv
from strl_jax.errors import ConfigError

FAMILIES = ("brax", "playground")
PLAYGROUND_NAMING_HINT = (
    "a Playground group has components where strl_jax.envs.playground_components lays out "
    "the task's observation keys, or where the env declares obs_layout (or env.obs_layout gives one)"
)
# Steps per episode of an env whose config names none (Brax tasks, MJX envs without
# `episode_length`): Brax's training default, and strl_jax's before envs kept their own.
DEFAULT_EPISODE_LENGTH = 1000


def task_family(task: str, env_cfg: Any = None) -> str:
    """`brax` or `playground`; a `ConfigError` listing both families' tasks otherwise.

    Brax names are checked first, so Playground (slow to import) loads only for its own tasks.
    An entry point's family is its env's: the env is built (with `env_cfg`'s settings, default
    ones without) and checked, which also reports a wrong entry point before anything compiles.
    """
    if is_entry_point(task):
        return user_env(env_cfg if env_cfg is not None else EnvSettings(task)).family
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
    raise ConfigError(
        f"unknown task {task!r}; Brax tasks: {brax_tasks()}; {listing}; or an env of one's own as "
        f"'package.module:Name', {EXPECTED}"
    )


def env_family(env: VecEnv) -> str:
    """The family of a built env: `brax` for a Brax env, `playground` for an MJX env."""
    return "brax" if isinstance(env.env, brax.envs.Env) else "playground"


def default_task_config(env_cfg: Any) -> Any:
    """A Playground task's default config (an entry point's: its default config, or {})."""
    if is_entry_point(env_cfg.task):
        return default_config_of(env_cfg.task, load_target(env_cfg.task)) or {}
    return playground_default_config(env_cfg.task)


# ---- episode length ----------------------------------------------------------------------------
def config_episode_length(config: Any, where: str) -> int | None:
    """`episode_length` of an MJX env's config (Playground's training cuts episodes there), None
    where the config names none; a ConfigError for a value that is not a step count."""
    value = config.get("episode_length") if hasattr(config, "get") else None
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value) or value < 1:
        raise ConfigError(
            f"{where}: episode_length is {value!r}, not a number of steps >= 1; fix it there or set "
            "env.episode_length"
        )
    return int(value)


def own_config(env_cfg: Any) -> tuple[Any, str]:
    """`(the env's own config as configured, where it comes from)`: a Playground task's or an MJX
    entry point's config with `env.playground` applied; `(None, ...)` for a Brax env."""
    task = env_cfg.task
    if task_family(task, env_cfg) != "playground":
        return None, f"Brax env {task!r}"
    if not is_entry_point(task):
        return playground_config(task, dict(env_cfg.playground)), f"Playground task {task!r}'s config"
    user = user_env(env_cfg)
    built = getattr(user.env, "_config", None)  # MjxEnv keeps the config it was built with
    return (user.config if built is None else built), f"entry point {task!r}'s config"


def own_episode_length(env_cfg: Any) -> int:
    """Agent steps per episode that the env asks for itself: its config's `episode_length` (counted
    in control steps, as Playground's training counts it) over `env.action_repeat`, rounded up;
    `DEFAULT_EPISODE_LENGTH` for an env whose config names none."""
    config, where = own_config(env_cfg)
    steps = None if config is None else config_episode_length(config, where)
    return DEFAULT_EPISODE_LENGTH if steps is None else math.ceil(steps / env_cfg.action_repeat)


def with_episode_length(env_cfg: Any) -> Any:
    """`env_cfg` with `episode_length` set: the configured one where given, else the env's own.
    Resolved once where the env is built, so the value a run uses is the one its config records."""
    if env_cfg.episode_length is not None:
        return env_cfg
    return dataclasses.replace(env_cfg, episode_length=own_episode_length(env_cfg))


def with_amp_frames(env: VecEnv, env_cfg) -> VecEnv:
    """The `amp` group: the AMP frame of the physics state (`env.amp_obs_components`)."""
    components = None if env_cfg.amp_obs_components is None else tuple(env_cfg.amp_obs_components)
    return env.replace(observe=WithAmpObservation(env.observe, env_cfg.task, components))


# Observation groups a learner part may ask the env for by name (`PartSpec.env_groups` in
# `agents.algorithms`): the families whose tasks can provide it, and the function adding it.
EXTRA_GROUPS: dict[str, tuple[tuple[str, ...], Callable[[VecEnv, Any], VecEnv]]] = {
    "amp": (("brax",), with_amp_frames),
}
# Groups read off a registry task's body layout (`strl_jax.envs.amp_obs`): not for entry points.
REGISTRY_ONLY_GROUPS = ("amp",)


def check_extra_groups(task: str, extra_groups: tuple[str, ...], env_cfg: Any = None) -> None:
    family = task_family(task, env_cfg) if extra_groups else None
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
        if name in REGISTRY_ONLY_GROUPS and is_entry_point(task):
            raise ConfigError(
                f"the {name!r} observation group is read off a registered Brax task's body layout "
                f"(strl_jax.envs.amp_obs), not off entry point {task!r}; valid: {sorted(brax_tasks())}"
            )


def make_env_from_config(env_cfg, num_envs: int | None = None, extra_groups: tuple[str, ...] = ()) -> VecEnv:
    """Build from an `EnvConfig`; `num_envs` overrides the configured count (evaluation envs).

    `extra_groups` adds observation groups a learner part reads (`EXTRA_GROUPS`, e.g. `amp`, the
    AMP frame of the physics state), after `env.obs_components` selected components of the groups.
    An unset `env.episode_length` is the env's own (`with_episode_length`).
    """
    check_extra_groups(env_cfg.task, extra_groups, env_cfg)
    env_cfg = with_episode_length(env_cfg)
    env = make_task_env(env_cfg, env_cfg.num_envs if num_envs is None else num_envs)
    for name in extra_groups:
        env = EXTRA_GROUPS[name][1](env, env_cfg)
    if env_cfg.termination_reward:
        env = env.replace(termination_reward=float(env_cfg.termination_reward))
    return env


def make_task_env(env_cfg, count: int) -> VecEnv:
    """The task's env with its configured groups and components."""
    if task_family(env_cfg.task, env_cfg) == "playground":
        env = playground_task_env(env_cfg, count)
        return select_components(env, env_cfg.obs_components, PLAYGROUND_NAMING_HINT)
    check_brax_settings(env_cfg)
    env = brax_task_env(env_cfg, count)
    return select_components(env, env_cfg.obs_components, BRAX_NAMING_HINT)


def playground_task_env(env_cfg, count: int) -> VecEnv:
    """A registry Playground task, or an MJX env by entry point, through one construction."""
    if not is_entry_point(env_cfg.task):
        return make_playground_env(
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
            obs_layout=env_cfg.obs_layout,
            randomizer=env_cfg.randomizer,
            true_state=env_cfg.true_state,
            hfield_contacts=env_cfg.hfield_contacts,
            off_terrain=env_cfg.off_terrain,
        )
    settings = PlaygroundSettings(
        num_envs=count,
        episode_length=env_cfg.episode_length,
        action_repeat=env_cfg.action_repeat,
        clip_actions=env_cfg.clip_actions,
        obs_groups=env_cfg.obs_groups,
        domain_randomization=env_cfg.domain_randomization,
        height_scan=height_scan_setting(env_cfg.height_scan),
        forward_depth=forward_depth_setting(env_cfg.forward_depth),
        true_state=true_state_setting(env_cfg.true_state),
        obs_layout=env_cfg.obs_layout,
        randomizer=env_cfg.randomizer,
        hfield_contacts=check_hfield_contacts(env_cfg.hfield_contacts),
        off_terrain=check_off_terrain(env_cfg.off_terrain),
    )
    user = user_env(env_cfg)
    if settings.forward_depth is not None:
        impl = getattr(getattr(user.env.mjx_model, "impl", None), "value", "jax")
        require_jax_impl(user.task, user.config if user.config is not None else {"impl": impl})
    return playground_vec_env(user.task, user.env, user.config, user.reset_state, settings)


def brax_task_env(env_cfg, count: int) -> VecEnv:
    """A registry Brax task, or a Brax env by entry point, through one construction."""
    if not is_entry_point(env_cfg.task):
        return make_brax_env(
            task=env_cfg.task,
            backend=env_cfg.backend,
            num_envs=count,
            episode_length=env_cfg.episode_length,
            action_repeat=env_cfg.action_repeat,
            clip_actions=env_cfg.clip_actions,
            env_kwargs=env_cfg.env_kwargs,
            obs_groups=env_cfg.obs_groups,
            obs_layout=env_cfg.obs_layout,
        )
    user = user_env(env_cfg)
    settings = BraxSettings(
        num_envs=count,
        episode_length=env_cfg.episode_length,
        action_repeat=env_cfg.action_repeat,
        clip_actions=env_cfg.clip_actions,
        obs_groups=env_cfg.obs_groups,
        obs_layout=env_cfg.obs_layout,
    )
    return brax_vec_env(user.task, user.env, user.reset_state.obs, settings)


def check_brax_settings(env_cfg) -> None:
    """Settings of MJX envs that a Brax task refuses, each with the tasks that take it."""
    task = env_cfg.task
    if env_cfg.playground:
        raise ConfigError(f"env.playground applies to MuJoCo Playground tasks, not to Brax task {task!r}")
    if env_cfg.height_scan:
        raise ConfigError(
            f"env.height_scan needs a task whose ground is a heightfield, not Brax task {task!r}; "
            f"tasks with one: {list(HEIGHTFIELD_TASKS)}; {USER_HEIGHTFIELD}"
        )
    if env_cfg.forward_depth:
        raise ConfigError(
            f"env.forward_depth casts rays in a MuJoCo Playground task's MJX model, not in Brax task "
            f"{task!r}; valid: Playground tasks (Go1JoystickFlatTerrain, Go1JoystickRoughTerrain, "
            f"...; `{EXTRA}`) and MJX envs of one's own"
        )
    if env_cfg.true_state:
        raise ConfigError(
            f"env.{TRUE_STATE} reads the floating base of an MJX task's model, not of Brax task {task!r}; "
            "valid: MuJoCo Playground legged tasks (Op3Joystick, SpotFlatTerrainJoystick, ...) and MJX "
            "envs of one's own with a free joint first"
        )
    if env_cfg.push_curriculum:
        raise ConfigError(
            f"env.push_curriculum scales the pushes of a MuJoCo Playground humanoid task (its "
            f"push_config), not of Brax task {task!r}; valid: BerkeleyHumanoidJoystickFlatTerrain, "
            "T1JoystickFlatTerrain, G1JoystickFlatTerrain and the other tasks that push (and MJX envs "
            "of one's own with Playground's push_config)"
        )
    if env_cfg.command_curriculum:
        raise ConfigError(
            f"env.command_curriculum scales the velocity commands of a MuJoCo Playground joystick task, "
            f"not of Brax task {task!r}; valid: Go1JoystickFlatTerrain, Op3Joystick, "
            "BerkeleyHumanoidJoystickFlatTerrain and the other joystick tasks (and MJX envs of one's own "
            "that keep info['command'])"
        )
    if env_cfg.randomizer:
        raise ConfigError(
            f"env.randomizer={env_cfg.randomizer!r} draws fields of an MJX model (Playground's randomiser "
            f"signature), not of Brax task {task!r}; valid: Playground tasks and MJX envs of one's own"
        )
    check_off_terrain(env_cfg.off_terrain)  # a Brax task's floor is a plane: no edge to fall off
    if env_cfg.hfield_contacts != "mjx":
        raise ConfigError(
            f"env.hfield_contacts={env_cfg.hfield_contacts!r} changes how MJX collides feet with a "
            f"heightfield, not Brax task {task!r}'s physics; valid: MuJoCo Playground rough-terrain tasks "
            "(Go1JoystickRoughTerrain) and MJX envs of one's own with a heightfield"
        )
