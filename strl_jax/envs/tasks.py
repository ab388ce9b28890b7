"""One task namespace over the env families: Brax (`ant`, `hopper`, ...) and MuJoCo Playground
(`Go1JoystickFlatTerrain`, `CartpoleBalance`, ...; with the `playground` extra)."""

from __future__ import annotations

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


def make_env_from_config(env_cfg, num_envs: int | None = None, amp: bool = False) -> VecEnv:
    """Build from an `EnvConfig`; `num_envs` overrides the configured count (evaluation envs).

    `amp` adds the `amp` group: the AMP frame of the physics state (`env.amp_obs_components`).
    `env.obs_components` selects components of the groups (before the `amp` group is added).
    """
    count = env_cfg.num_envs if num_envs is None else num_envs
    if task_family(env_cfg.task) == "playground":
        if amp:
            raise ConfigError(
                f"AMP observation frames are defined for Brax tasks, not for Playground task {env_cfg.task!r}"
            )
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
    env = select_components(env, env_cfg.obs_components, BRAX_NAMING_HINT)
    if not amp:
        return env
    components = None if env_cfg.amp_obs_components is None else tuple(env_cfg.amp_obs_components)
    return env.replace(observe=WithAmpObservation(env.observe, env_cfg.task, components))
