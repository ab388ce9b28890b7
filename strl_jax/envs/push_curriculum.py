"""A curriculum on the pushes of a Playground humanoid task (`env.push_curriculum`): each training
env pushes its robot as the task does, scaled by a level in [0, 1] that rises while the robot
survives the pushes and falls when the robot falls.

Playground's humanoid joystick tasks (Berkeley Humanoid, T1, G1, Apollo) kick the base every
5-10 s with a velocity of up to 2 m/s (`push_config`), from the first iteration. A fresh policy
falls at the first kick long before it can walk, so it learns to stand until the kick and no more.
legged_gym meets the same problem with curricula that grow as each env succeeds (its terrain
levels: an env moves up a level after walking far enough, down after walking too little); here
the level of each env moves up by `up` at every push it is standing to receive and down by `down`
at every fall, so each env is pushed about as hard as its robot can take. The level is kept in the
env's `state.info` and carried from one episode of the env to the next (`VecEnv.carried_info`);
its mean over the finished episodes is logged as `episode/push_level`.

Only the training envs are wrapped (`runners.programs.training_env`): the run's evaluation,
`play` and `deploy` see the task's own pushes at full strength.

The kick is the task's own: the same schedule (`info["push_step"]`, `info["push_interval_steps"]`),
direction uniform in the plane, magnitude uniform in `push_config.magnitude_range`, added to the
free joint's linear velocity before the physics step, with the task's own push switched off while
it steps (its config swapped for a copy with `push_config.enable` false, as `RandomizedPhysics`
swaps the model). Playground's task code:
https://github.com/google-deepmind/mujoco_playground/blob/main/mujoco_playground/_src/locomotion/berkeley_humanoid/joystick.py
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp

from strl_jax.config_sections import key, number, read_section
from strl_jax.errors import ConfigError

PUSH_CURRICULUM = "push_curriculum"
# where each env keeps its level (state.info) and logs it (state.metrics)
LEVEL = "push_level"
# the stream of `fold_in(info["rng"], ...)` that draws the kick
KICK_STREAM = 0x9054
# what the task's state must keep for its push schedule
SCHEDULE_KEYS = ("rng", "push_step", "push_interval_steps")
TASKS_WITH_PUSHES = (
    "BerkeleyHumanoidJoystickFlatTerrain",
    "BerkeleyHumanoidJoystickRoughTerrain",
    "T1JoystickFlatTerrain",
    "T1JoystickRoughTerrain",
    "G1JoystickFlatTerrain",
    "G1JoystickRoughTerrain",
    "ApolloJoystickFlatTerrain",
)


@dataclasses.dataclass(frozen=True)
class PushCurriculumSetting:
    """`env.push_curriculum`, checked: the level every env starts at and its steps."""

    start: float = key(number(minimum=0.0), 0.0)
    up: float = key(number(minimum=0.0), 0.1)
    down: float = key(number(minimum=0.0), 0.2)

    def check(self, where: str) -> None:
        if self.start > 1.0:
            raise ConfigError(f"{where}.start must be a level in [0, 1], got {self.start!r}")


def push_curriculum_setting(config: Any) -> PushCurriculumSetting | None:
    """`env.push_curriculum` as a checked setting (None when `{}`: off)."""
    return read_section(PushCurriculumSetting, config, f"env.{PUSH_CURRICULUM}") if config else None


def push_due(info: dict) -> jax.Array:
    """1.0 where the task's schedule pushes this step (Playground's formula), else 0.0."""
    return (jnp.mod(info["push_step"] + 1, info["push_interval_steps"]) == 0).astype(jnp.float32)


def config_holder(env: Any) -> Any:
    """The object under strl_jax's wrappers that keeps the task's config (`_config`)."""
    while "_config" not in vars(env) and "env" in vars(env):
        env = vars(env)["env"]
    return env


@dataclasses.dataclass(frozen=True, eq=False)
class PushCurriculum:
    """The task `env` whose pushes are scaled by each env's level (see the module docstring).
    Other attributes are the task's own."""

    env: Any  # the task, with its own pushes configured
    setting: PushCurriculumSetting
    quiet_config: Any  # the task's config with push_config.enable false

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("env", "setting", "quiet_config"):
            raise AttributeError(name)
        return getattr(self.env, name)

    @contextlib.contextmanager
    def own_pushes_off(self) -> Iterator[None]:
        holder = config_holder(self.env)
        config = holder._config  # noqa: SLF001 - read by the task while it traces its step
        holder._config = self.quiet_config  # noqa: SLF001
        try:
            yield
        finally:
            holder._config = config  # noqa: SLF001

    def reset(self, rng: jax.Array) -> Any:
        state = self.env.reset(rng)
        level = jnp.asarray(self.setting.start, jnp.float32)
        return state.replace(info={**state.info, LEVEL: level}, metrics={**state.metrics, LEVEL: level})

    def kick(self, info: dict) -> jax.Array:
        """The planar velocity added to the base this step: the task's push, times the level."""
        push = config_holder(self.env)._config.push_config  # noqa: SLF001
        angle_key, magnitude_key = jax.random.split(jax.random.fold_in(info["rng"], KICK_STREAM))
        angle = jax.random.uniform(angle_key, maxval=2 * jnp.pi)
        low, high = push.magnitude_range
        magnitude = jax.random.uniform(magnitude_key, minval=low, maxval=high)
        direction = jnp.stack([jnp.cos(angle), jnp.sin(angle)])
        return direction * magnitude * info[LEVEL] * push_due(info)

    def step(self, state: Any, action: jax.Array) -> Any:
        info = state.info
        kick = self.kick(info)
        qvel = state.data.qvel
        data = state.data.replace(qvel=qvel.at[:2].add(kick.astype(qvel.dtype)))
        with self.own_pushes_off():  # the task writes into the info it is given: a copy
            nxt = self.env.step(state.replace(data=data, info=dict(info)), action)
        fell = (nxt.done > 0).astype(jnp.float32)
        level = jnp.clip(info[LEVEL] + self.setting.up * push_due(info) - self.setting.down * fell, 0.0, 1.0)
        level = level.astype(jnp.float32)
        return nxt.replace(info={**nxt.info, LEVEL: level}, metrics={**nxt.metrics, LEVEL: level})


def check_push_task(task: str, env: Any) -> Any:
    """The task's config with its own pushes off, or a ConfigError naming the tasks that push."""
    config = getattr(config_holder(env), "_config", None)
    push = None if config is None else config.get("push_config")
    has_schedule = push is not None and all(k in push for k in ("enable", "magnitude_range"))
    if not has_schedule:
        raise ConfigError(
            f"env.{PUSH_CURRICULUM}: task {task!r} does not push its robot (no push_config with enable "
            f"and magnitude_range in its config); tasks that do: {list(TASKS_WITH_PUSHES)}"
        )
    if not push.enable:
        raise ConfigError(
            f"env.{PUSH_CURRICULUM}: task {task!r} runs with its pushes off "
            "(env.playground.push_config.enable=false); the curriculum scales the task's pushes: "
            "turn them on, or drop env.push_curriculum"
        )
    state = jax.eval_shape(env.reset, jax.random.PRNGKey(0))
    missing = [k for k in SCHEDULE_KEYS if k not in state.info]
    if missing:
        raise ConfigError(
            f"env.{PUSH_CURRICULUM}: task {task!r} keeps no {missing} in its state's info, which a "
            f"push schedule as Playground's humanoids keep it needs; tasks that do: {list(TASKS_WITH_PUSHES)}"
        )
    quiet = config.copy_and_resolve_references()
    quiet.push_config.enable = False
    return quiet


def with_push_curriculum(env: Any, raw: Any) -> Any:
    """The VecEnv `env` with its pushes under the curriculum `raw` (`env.push_curriculum`), or
    `env` as it is where `raw` is `{}`."""
    setting = push_curriculum_setting(raw)
    if setting is None:
        return env
    quiet = check_push_task(env.task, env.env)
    wrapped = PushCurriculum(env=env.env, setting=setting, quiet_config=quiet)
    return env.replace(env=wrapped, carried_info=(*env.carried_info, LEVEL))


def without_push_curriculum(env: Any) -> Any:
    """The VecEnv `env` with the task's own pushes (the evaluation's envs)."""
    if not isinstance(env.env, PushCurriculum):
        return env
    return env.replace(env=env.env.env, carried_info=tuple(k for k in env.carried_info if k != LEVEL))
