"""A selection component for mutex policies, set by a schedule: which skill runs when.

st_rl's field mutex reads the selection from the observation (`engaging_block`: `[distance,
one-hot over skills, ...]`, written by its terrain). This wrapper writes such a block into a
VecEnv's policy group from a schedule instead: skill `k` for the steps `[k T, (k + 1) T)` of each
period `n T` of an episode (`T = segment_steps`, `n` skills), counted from each env's own reset.
Where the schedule gives a command per skill (e.g. a joystick task's `(vx, vy, yaw rate)`), the
env's `info["command"]` is held at the selected skill's command (never resampled while the
wrapper runs), so rewards, the evaluation's velocity probe and the observation's `command`
entries all follow the schedule.

The commands are held as `strl_jax.envs.commands` holds one (its notes on scaling apply).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp

from strl_jax.envs.commands import command_entries, hold_in_info, show_command
from strl_jax.envs.vec_env import VecEnv
from strl_jax.errors import ConfigError

SKILL_STEP = "skill_step"  # the per-env step counter this wrapper keeps in `state.info`


@dataclasses.dataclass(frozen=True)
class SkillSchedule:
    """Which skill runs at each episode step, and what the selection block looks like."""

    num_skills: int
    segment_steps: int
    # per skill: the command held while it runs (None: the env's own commands)
    commands: tuple[tuple[float, ...], ...] | None = None
    component: str = "engaging_block"
    offset: int = 1  # st_rl: engaging_block = [distance, one-hot, ...]; the leading entries are 0
    group: str = "policy"

    @property
    def size(self) -> int:
        return self.offset + self.num_skills


def skill_schedule(options: Mapping[str, Any], num_skills: int, **defaults: Any) -> SkillSchedule:
    """A `SkillSchedule` from a config section (`segment_steps`, `commands`, `component`,
    `offset`, `group`); `defaults` fill the keys it leaves out."""
    names = {f.name for f in dataclasses.fields(SkillSchedule)} - {"num_skills"}
    unknown = sorted(set(options) - names)
    if unknown:
        raise ConfigError(f"unknown skill_selection options {unknown}; valid choices: {sorted(names)}")
    values = {**defaults, **options}
    if "segment_steps" not in values:
        raise ConfigError("skill_selection needs segment_steps: the steps each skill runs in turn")
    commands = values.get("commands")
    if commands is not None:
        commands = tuple(tuple(float(c) for c in row) for row in commands)
    schedule = SkillSchedule(
        num_skills=int(num_skills),
        segment_steps=int(values["segment_steps"]),
        commands=commands,
        component=str(values.get("component", "engaging_block")),
        offset=int(values.get("offset", 1)),
        group=str(values.get("group", "policy")),
    )
    check_schedule(schedule)
    return schedule


def check_schedule(schedule: SkillSchedule) -> None:
    if schedule.num_skills < 1 or schedule.segment_steps < 1:
        raise ConfigError(
            f"skill_selection needs num_skills >= 1 and segment_steps >= 1, "
            f"got {schedule.num_skills} and {schedule.segment_steps}"
        )
    if schedule.offset < 0:
        raise ConfigError(f"skill_selection offset={schedule.offset} must be >= 0")
    if schedule.commands is not None:
        sizes = {len(c) for c in schedule.commands}
        if len(schedule.commands) != schedule.num_skills or len(sizes) != 1:
            raise ConfigError(
                f"skill_selection commands needs one command of one size per skill ({schedule.num_skills}), "
                f"got {list(schedule.commands)}"
            )


def skill_index(schedule: SkillSchedule, step: jax.Array) -> jax.Array:
    """The skill running at episode step `step`."""
    return (step // schedule.segment_steps) % schedule.num_skills


def selection_block(schedule: SkillSchedule, step: jax.Array) -> jax.Array:
    """`[..., offset + n]`: zeros, then the running skill's one-hot."""
    onehot = jax.nn.one_hot(skill_index(schedule, step), schedule.num_skills, dtype=jnp.float32)
    lead = jnp.zeros((*onehot.shape[:-1], schedule.offset), jnp.float32)
    return jnp.concatenate([lead, onehot], axis=-1)


@dataclasses.dataclass(frozen=True, eq=False)
class SkillSelectionEnv:
    """A single env that counts episode steps in `info` and holds the scheduled commands;
    everything else is the wrapped env's (attributes are looked up there)."""

    env: Any
    schedule: SkillSchedule

    def __getattr__(self, name: str) -> Any:
        if name == "env":  # not yet set (e.g. while copying): no recursion
            raise AttributeError(name)
        return getattr(self.env, name)

    def hold(self, state: Any, step: jax.Array) -> Any:
        info = {**state.info, SKILL_STEP: jnp.asarray(step, jnp.int32)}
        if self.schedule.commands is not None:
            table = jnp.asarray(self.schedule.commands, info["command"].dtype)
            info = hold_in_info(info, table[skill_index(self.schedule, info[SKILL_STEP])])
        return state.replace(info=info)

    def reset(self, key: jax.Array) -> Any:
        return self.hold(self.env.reset(key), 0)

    def step(self, state: Any, action: jax.Array) -> Any:
        return self.hold(self.env.step(state, action), state.info[SKILL_STEP] + 1)


def with_skill_selection(env: VecEnv, schedule: SkillSchedule) -> VecEnv:
    """`env` whose `schedule.group` ends with the selection block (a component named
    `schedule.component`) and whose commands follow the schedule."""
    check_schedule(schedule)
    groups = env.observation_shapes()
    if schedule.group not in groups:
        raise ConfigError(
            f"skill_selection group {schedule.group!r} is not an observation group: {sorted(groups)}"
        )
    if any(name == schedule.component for name, _ in env.components.get(schedule.group, ())):
        raise ConfigError(f"the {schedule.group!r} group already has a component {schedule.component!r}")
    # group -> indices of its command entries
    entries = {} if schedule.commands is None else command_entries(env, len(schedule.commands[0]))
    inner = env.observe

    def observe(state: Any) -> dict[str, jax.Array]:
        obs = show_command(inner(state), entries, state.info["command"]) if entries else dict(inner(state))
        block = selection_block(schedule, state.info[SKILL_STEP])
        obs[schedule.group] = jnp.concatenate(
            [obs[schedule.group], block.astype(obs[schedule.group].dtype)], -1
        )
        return obs

    components = dict(env.components)
    if schedule.group in components:
        components[schedule.group] = (*components[schedule.group], (schedule.component, schedule.size))
    return env.replace(env=SkillSelectionEnv(env.env, schedule), observe=observe, components=components)
