"""A curriculum on the commands of a Playground joystick task (`env.command_curriculum`): each
training env draws its commands as the task does, scaled by a level in [0, 1] that rises after
every episode its robot tracked well to the end.

A joystick task draws commands up to its robot's top speed from the first iteration (Op3, 0.3 m
tall: up to 1.5 m/s forward). Its tracking reward, `exp(-|command - velocity|^2 / sigma)`, barely
moves for a robot that shuffles under a fast command, so a policy that has not found a step yet
has little to climb. legged_gym's `commands.curriculum` grows the command ranges once the mean
linear-tracking reward of the finished episodes passes 80% of its maximum
(`LeggedRobot.update_command_curriculum` in https://github.com/leggedrobotics/legged_gym). Here
each env keeps a level of its own, as the push curriculum (`strl_jax.envs.push_curriculum`) does:
at the start of each episode its level moves up by `up` if its last episode ended by a time-out
with the task's linear-tracking term at least `threshold` of its maximum on average, and down by
`down` otherwise (a fall, or a time-out below the bar); every command of the episode is the task's
draw times the level.

Why down after a time-out below the bar, not only after a fall: a robot that stands still tracks a
small command well, and its episodes' draws scatter, so some of its episodes pass the bar by luck.
A level that only fell after falls would ratchet up on those (a standing Op3's levels rose from
0.2 to 0.6 in an hour that way). With steps both ways an env's level settles where its episodes
pass the bar at the rate `down / (up + down)` (half of them by default): a standing robot's stays
where standing passes that often, and a level above it takes a robot that moves.

What "times the level" touches: the command in the state's `info` (the reward tracks it), each
component of a later draw as the task makes it (Go1's draw keeps some components of the current
command, so only the changed ones are scaled), and, for the episode's first observation (built by
the task's reset from its unscaled draw), the observation entries that show the command: the
components named `command`, `command_prev<k>` and `state_command...` of each observation key
(`strl_jax.envs.playground_components`, or `env.obs_layout`). The env's `observe` sees the
episode's first state as the first step will, so the policy acts on the scaled command from its
first observation.

Only the training envs are wrapped (`runners.programs.training_env`): the run's evaluation, `play`
and `deploy` draw the task's own commands.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from strl_jax.config_sections import key, number, read_section
from strl_jax.envs.obs_layout import WHOLE
from strl_jax.envs.playground_env import observation_layouts
from strl_jax.envs.push_curriculum import config_holder
from strl_jax.errors import ConfigError

COMMAND_CURRICULUM = "command_curriculum"
# the env's level (state.info, carried from episode to episode; state.metrics: logged per episode)
LEVEL = "command_level"
# the last episode's record, carried into the next episode, which reads it at its first step
TRACKED, STEPS, FELL = "command_tracked", "command_steps", "command_fell"
CARRIED = (LEVEL, TRACKED, STEPS, FELL)
# 1.0 in an episode's first state (set by the reset, not carried): its command is not scaled yet
FRESH = "command_fresh"
# the task's per-step metric of its linear-tracking term (weighted) and the weight's config key
TRACKING_METRIC, TRACKING_SCALE = "reward/tracking_lin_vel", "tracking_lin_vel"
# observation components that show the command (the newest frame, older frames, privileged copies)
COMMAND_COMPONENT = re.compile(r"^(state_)?command(_prev\d+)?$")


@dataclasses.dataclass(frozen=True)
class CommandCurriculumSetting:
    """`env.command_curriculum`, checked: the level every env starts at, its steps and the
    tracking (a fraction of the linear-tracking term's maximum) that earns a step up."""

    start: float = key(number(minimum=0.0), 0.2)
    up: float = key(number(minimum=0.0), 0.1)
    down: float = key(number(minimum=0.0), 0.1)
    threshold: float = key(number(minimum=0.0), 0.8)

    def check(self, where: str) -> None:
        if self.start > 1.0:
            raise ConfigError(f"{where}.start must be a level in [0, 1], got {self.start!r}")
        if self.threshold > 1.0:
            raise ConfigError(
                f"{where}.threshold must be a fraction in [0, 1] of the tracking term's maximum, "
                f"got {self.threshold!r}"
            )


def command_curriculum_setting(config: Any) -> CommandCurriculumSetting | None:
    """`env.command_curriculum` as a checked setting (None when `{}`: off)."""
    return read_section(CommandCurriculumSetting, config, f"env.{COMMAND_CURRICULUM}") if config else None


def raw_command_entries(layout_of: Callable[[str], Any], obs: Any) -> dict[str, np.ndarray]:
    """`{observation key: indices}` of the entries that show the command (`WHOLE` for an
    observation that is one array), from each key's layout."""
    keys = list(obs) if isinstance(obs, Mapping) else [WHOLE]
    entries = {}
    for name in keys:
        layout = layout_of(name)
        if layout is None:
            raise ConfigError(
                f"env.{COMMAND_CURRICULUM} scales the command where the observation shows it, but "
                f"observation key {name!r} has no named components; name them with env.obs_layout "
                "(a component `command` of 3 entries where the command is shown)"
            )
        where, start = [], 0
        for component, size in layout:
            if COMMAND_COMPONENT.match(component):
                where += range(start, start + size)
            start += size
        if where:
            entries[name] = np.asarray(where)
    return entries


def scaled_entries(obs: Any, entries: dict[str, np.ndarray], scale: jax.Array) -> Any:
    """`obs` with its command entries times `scale` (one per env: `obs` may be one env's or a
    batch's)."""
    scale = scale[..., None]
    if not isinstance(obs, Mapping):
        return obs.at[..., entries[WHOLE]].multiply(scale) if WHOLE in entries else obs
    return {k: v.at[..., entries[k]].multiply(scale) if k in entries else v for k, v in obs.items()}


@dataclasses.dataclass(frozen=True, eq=False)
class CommandCurriculum:
    """The task `env` whose commands are scaled by each env's level (see the module docstring).
    Other attributes are the task's own."""

    env: Any
    setting: CommandCurriculumSetting
    entries: dict[str, np.ndarray]  # where each observation key shows the command
    tracking_scale: float  # the task's weight of its linear-tracking term

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("env", "setting", "entries", "tracking_scale"):
            raise AttributeError(name)
        return getattr(self.env, name)

    def reset(self, rng: jax.Array) -> Any:
        state = self.env.reset(rng)
        zero = jnp.zeros((), jnp.float32)
        level = jnp.asarray(self.setting.start, jnp.float32)
        record = {LEVEL: level, TRACKED: zero, STEPS: zero, FELL: zero, FRESH: jnp.ones((), jnp.float32)}
        return state.replace(info={**state.info, **record}, metrics={**state.metrics, LEVEL: level})

    def next_level(self, info: dict) -> jax.Array:
        """The level of the episode `info` is in: at its first state, the last episode's level
        moved by that episode's record; afterwards, as it is."""
        s = self.setting
        ended = info[STEPS] > 0  # the first episode of a run has no record
        tracked_well = ended & (info[FELL] == 0) & (info[TRACKED] >= s.threshold * info[STEPS])
        missed = ended & ~tracked_well
        moved = jnp.clip(info[LEVEL] + s.up * tracked_well - s.down * missed, 0.0, 1.0)
        return jnp.where(info[FRESH] > 0, moved, info[LEVEL]).astype(jnp.float32)

    def begin(self, state: Any) -> Any:
        """`state` as its episode runs: an episode's first state gets its level, its command and
        the observation's command entries scaled, and a blank record; other states as they are.
        `state` may be one env's or a batch's (`VecEnv.observe` sees the batch)."""
        info = state.info
        fresh = info[FRESH] > 0
        level = self.next_level(info)
        scale = jnp.where(fresh, level, 1.0)
        zero = jnp.zeros((), jnp.float32)
        blank = lambda name: jnp.where(fresh, zero, info[name])  # noqa: E731
        info = {
            **info,
            "command": (info["command"] * scale[..., None]).astype(info["command"].dtype),
            LEVEL: level,
            TRACKED: blank(TRACKED),
            STEPS: blank(STEPS),
            FELL: blank(FELL),
            FRESH: zero,
        }
        return state.replace(info=info, obs=scaled_entries(state.obs, self.entries, scale))

    def step(self, state: Any, action: jax.Array) -> Any:
        state = self.begin(state)
        info = state.info
        before = info["command"]
        nxt = self.env.step(state.replace(info=dict(info)), action)  # the task writes into its info
        drawn = nxt.info["command"]
        command = jnp.where(drawn != before, drawn * info[LEVEL], drawn).astype(drawn.dtype)
        tracking = nxt.metrics[TRACKING_METRIC] / self.tracking_scale
        record = {
            "command": command,
            LEVEL: info[LEVEL],
            TRACKED: (info[TRACKED] + tracking).astype(jnp.float32),
            STEPS: info[STEPS] + 1.0,
            FELL: (nxt.done > 0).astype(jnp.float32),
            FRESH: info[FRESH],
        }
        return nxt.replace(info={**nxt.info, **record}, metrics={**nxt.metrics, LEVEL: info[LEVEL]})


def tracking_weight(task: str, env: Any) -> float:
    """The task's weight of its linear-tracking term, or a ConfigError where it has none."""
    config = getattr(config_holder(env), "_config", None)
    scales = None if config is None else config.get("reward_config", {}).get("scales")
    weight = None if scales is None else scales.get(TRACKING_SCALE)
    if not weight:
        found = "weighs it 0" if weight is not None else "has no reward_config.scales.tracking_lin_vel"
        raise ConfigError(
            f"env.{COMMAND_CURRICULUM} raises a level when the task's linear-tracking term is high, but "
            f"task {task!r} {found}; valid: Playground's joystick tasks (Go1JoystickFlatTerrain, "
            "Op3Joystick, BerkeleyHumanoidJoystickFlatTerrain, ...) with a nonzero tracking_lin_vel"
        )
    return float(weight)


def check_command_task(task: str, env: Any) -> Any:
    """The abstract reset state of a joystick task, or a ConfigError naming what is missing."""
    state = jax.eval_shape(env.reset, jax.random.PRNGKey(0))
    command = state.info.get("command") if isinstance(state.info, Mapping) else None
    if command is None or tuple(command.shape) != (3,):
        raise ConfigError(
            f"env.{COMMAND_CURRICULUM} scales a joystick task's velocity command (info['command'], 3 "
            f"entries), which task {task!r} does not keep; valid: Playground's joystick tasks "
            "(Go1JoystickFlatTerrain, SpotFlatTerrainJoystick, Op3Joystick, "
            "BerkeleyHumanoidJoystickFlatTerrain, ...)"
        )
    return state


def with_command_curriculum(env: Any, raw: Any, obs_layout: Any = None) -> Any:
    """The VecEnv `env` with its commands under the curriculum `raw` (`env.command_curriculum`),
    or `env` as it is where `raw` is `{}`. `obs_layout` is `env.obs_layout` (it names the
    components of the observation keys it lists)."""
    setting = command_curriculum_setting(raw)
    if setting is None:
        return env
    state = check_command_task(env.task, env.env)
    weight = tracking_weight(env.task, env.env)
    if TRACKING_METRIC not in state.metrics:
        raise ConfigError(
            f"env.{COMMAND_CURRICULUM} reads the task's linear-tracking term from its metric "
            f"{TRACKING_METRIC!r} (as Playground's joystick tasks log it), which task {env.task!r} does "
            f"not log; its metrics: {sorted(state.metrics)}"
        )
    task_env = config_holder(env.env)
    layout_of = observation_layouts(env.task, task_env, task_env._config, obs_layout, state.obs)  # noqa: SLF001
    entries = raw_command_entries(layout_of, state.obs)
    if not entries:
        raise ConfigError(
            f"env.{COMMAND_CURRICULUM}: task {env.task!r} shows no `command` component in its "
            "observation, so its policy cannot follow a scaled command; name it with env.obs_layout"
        )
    wrapped = CommandCurriculum(env=env.env, setting=setting, entries=entries, tracking_scale=weight)
    inner = env.observe
    return env.replace(
        env=wrapped,
        observe=CurriculumObserve(inner=inner, curriculum=wrapped),
        carried_info=(*env.carried_info, *CARRIED),
    )


@dataclasses.dataclass(frozen=True, eq=False)
class CurriculumObserve:
    """The env's observation of a state as its episode runs (`CommandCurriculum.begin`)."""

    inner: Callable[[Any], Any]
    curriculum: CommandCurriculum

    def __call__(self, state: Any) -> Any:
        return self.inner(self.curriculum.begin(state))


def without_command_curriculum(env: Any) -> Any:
    """The VecEnv `env` with the task's own commands (the evaluation's envs)."""
    if not isinstance(env.env, CommandCurriculum):
        return env
    return env.replace(
        env=env.env.env,
        observe=env.observe.inner,
        carried_info=tuple(k for k in env.carried_info if k not in CARRIED),
    )
