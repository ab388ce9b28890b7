"""Velocity commands held fixed: one `(vx, vy, yaw rate)` for a whole episode of a joystick task.

Playground's joystick tasks keep the command in `state.info["command"]`, draw a new one when
`info["steps_until_next_cmd"]` runs out, and show it in their observations. Holding a command
means setting `info["command"]` after every reset and step, never letting the counter run out,
and writing the command into every observation entry a `command` component names (the reset's
observation was built from the drawn command). Rewards and the evaluation's velocity probe read
`info["command"]`, so they follow the held command too. `play --command` and `deploy --command`
hold one; the mutex skill schedule (`strl_jax.envs.skill_selection`) holds one per skill.

The entries are written as the command is, unscaled: right for Go1, G1, Spot and the other tasks
that observe it so, not for Barkour's scaled command.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from strl_jax.envs.vec_env import VecEnv
from strl_jax.errors import ConfigError

# Playground joystick tasks resample the command when this counter runs out
RESAMPLE_COUNTER = "steps_until_next_cmd"
NEVER = 2**30


def command_indices(components: Sequence[tuple[str, int]], size: int) -> list[int]:
    """Where a group shows the command (`command` components of `size` entries)."""
    out, start = [], 0
    for name, n in components:
        if name == "command" and n == size:
            out += list(range(start, start + n))
        start += n
    return out


def hold_in_info(info: dict, command: jax.Array) -> dict:
    """`info` with `command` in effect and its resampling counter stopped."""
    info = {**info, "command": jnp.asarray(command, info["command"].dtype)}
    if RESAMPLE_COUNTER in info:
        info[RESAMPLE_COUNTER] = jnp.full_like(info[RESAMPLE_COUNTER], NEVER)
    return info


def command_entries(env: VecEnv, size: int) -> dict[str, np.ndarray]:
    """`{group: indices}` of the command entries of each observation group, after checking that
    the task keeps a command of `size` entries in its state's `info`."""
    reset_info = jax.eval_shape(env.env.reset, jax.random.PRNGKey(0)).info
    found = reset_info.get("command") if isinstance(reset_info, dict) else None
    if found is None or tuple(found.shape) != (size,):
        what = "no info['command']" if found is None else f"info['command'] of shape {tuple(found.shape)}"
        raise ConfigError(
            f"task {env.task!r} has {what}; a held command of {size} entries needs a joystick task "
            "(e.g. Go1JoystickFlatTerrain, G1JoystickFlatTerrain, SpotJoystickGaitTracking)"
        )
    entries = {}
    for group, components in env.components.items():
        where = command_indices(components, size)
        if where:
            entries[group] = np.asarray(where)
    return entries


def show_command(obs: dict[str, jax.Array], entries: dict[str, np.ndarray], command: jax.Array) -> dict:
    """`obs` with `command` written into each group's command entries."""
    obs = dict(obs)
    for group, where in entries.items():
        shown = jnp.concatenate([command.astype(obs[group].dtype)] * (len(where) // command.shape[-1]), -1)
        obs[group] = obs[group].at[..., where].set(shown)
    return obs


@dataclasses.dataclass(frozen=True, eq=False)
class HeldCommandEnv:
    """A single env whose command stays `command` (`None`: the command each step's state came in
    with); everything else is the wrapped env's."""

    env: Any
    command: jax.Array | None

    def __getattr__(self, name: str) -> Any:
        if name == "env":  # not yet set (e.g. while copying): no recursion
            raise AttributeError(name)
        return getattr(self.env, name)

    def held(self, state: Any) -> jax.Array:
        """The command to hold after a step from `state` (or after the reset giving it)."""
        return state.info["command"] if self.command is None else self.command

    def reset(self, key: jax.Array) -> Any:
        state = self.env.reset(key)
        return state.replace(info=hold_in_info(state.info, self.held(state)))

    def step(self, state: Any, action: jax.Array) -> Any:
        command = self.held(state)  # before the step: Playground's steps write into `state.info`
        nxt = self.env.step(state, action)
        return nxt.replace(info=hold_in_info(nxt.info, command))


def showing_held_command(env: VecEnv, command: jax.Array | None, size: int) -> VecEnv:
    """`env` holding `command` (`None`: the state's own), shown in every observation entry a
    `command` component names."""
    entries = command_entries(env, size)
    inner = env.observe

    def observe(state: Any) -> dict[str, jax.Array]:
        return show_command(inner(state), entries, state.info["command"])

    return env.replace(env=HeldCommandEnv(env.env, command), observe=observe)


def with_command(env: VecEnv, command: Sequence[float] | jax.Array) -> VecEnv:
    """`env` in which every env follows `command` for the whole episode, from its first
    observation on. A task without a joystick command is refused by name (ConfigError).

    `command` may be traced: one compiled program then serves every command (e.g. vmapped over
    a batch of commands)."""
    command = jnp.asarray(command, jnp.float32)
    if command.ndim != 1:
        raise ConfigError(f"a held command is one vector (vx, vy, yaw rate), got shape {command.shape}")
    return showing_held_command(env, command, command.shape[0])


def keeping_command(env: VecEnv, size: int = 3) -> VecEnv:
    """`env` in which every step keeps the command its state came in with: an episode started
    from a state of `with_command(env, c)` holds `c`, whichever `c` it is, in one program traced
    once (the native simulation's phases, which are traced per env rather than vmapped)."""
    return showing_held_command(env, None, size)
