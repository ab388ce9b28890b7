"""The floating base's true state as named observation components (`env.true_state`): a privileged
critic for MJX tasks that give their critic only what the policy sees.

legged_gym's and st_rl's critics observe the base's true linear velocity beside the policy's
observation (the `privileged_obs` of the teacher-student papers), and Playground gives the Go1, G1,
T1, Berkeley Humanoid and Apollo tasks such a `privileged_state`. Op3, Spot, Barkour and H1 give
their critic only the policy's noisy observation, with no linear velocity at all, although their
tracking reward is a function of it. `env.true_state` appends, to the chosen groups (the critic by
default), noise-free quantities read off the simulator's state:

- `true_base_lin_vel` (3): the base's linear velocity, in the frame the task's commands are given in
  (`native_mujoco.command_frame`: the base's own frame except where the task's velocity sensor is
  turned, as Barkour's).
- `true_base_ang_vel` (3): its angular velocity in the same frame.
- `true_projected_gravity` (3): the unit gravity vector in the same frame.
- `true_base_height` (1): the height of the base's origin above the world's origin.

A pure function of the state, like the height scan: the final observation of an episode and a
resumed run see the same values. The task's free joint must be its first joint.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from strl_jax.config_sections import Rule, key, read_section
from strl_jax.envs.native_mujoco import command_frame
from strl_jax.envs.perception import FREE_JOINT, GROUPS, check_setting_groups
from strl_jax.envs.playground_groups import PlaygroundGroups
from strl_jax.envs.vec_env import Observation
from strl_jax.errors import ConfigError

TRUE_STATE = "true_state"  # the setting's name under env
# the components, their sizes, in the order they are appended by default
TRUE_COMPONENTS = {
    "true_base_lin_vel": 3,
    "true_base_ang_vel": 3,
    "true_projected_gravity": 3,
    "true_base_height": 1,
}


def _components(value: Any) -> tuple[str, ...]:
    names = [value] if isinstance(value, str) else value
    if (
        not isinstance(names, list | tuple)
        or not names
        or any(n not in TRUE_COMPONENTS for n in names)
        or len(set(names)) != len(names)
    ):
        raise ValueError
    return tuple(names)


COMPONENTS = Rule(_components, f"a list of distinct names from {list(TRUE_COMPONENTS)}")


@dataclasses.dataclass(frozen=True)
class TrueStateSetting:
    """`env.true_state`, checked: which groups get which components."""

    groups: tuple[str, ...] = key(GROUPS, ("critic",))
    components: tuple[str, ...] = key(COMPONENTS, tuple(TRUE_COMPONENTS))


def true_state_setting(config: Any) -> TrueStateSetting | None:
    """`env.true_state` as a checked setting (None when `{}`: off), before any model loads."""
    return read_section(TrueStateSetting, config, f"env.{TRUE_STATE}") if config else None


def rotate_inverse(vector: jax.Array, quat: jax.Array) -> jax.Array:
    """`vector` `[..., 3]` in the frame of the unit `(w, x, y, z)` quaternion `quat` `[..., 4]`
    (the rotation by its conjugate), broadcasting over leading axes."""
    w, u = quat[..., :1], -quat[..., 1:]
    t = 2.0 * jnp.cross(u, vector)
    return vector + w * t + jnp.cross(u, t)


def base_state(data: Any, frame: np.ndarray | None) -> dict[str, jax.Array]:
    """Every true-state component of the floating base in `data` (one env or a batch), in the
    frame `frame` (the commands' frame in the base's, [3, 3]; None: the base's own)."""
    quat = data.qpos[..., 3:7]
    linear = rotate_inverse(data.qvel[..., 0:3], quat)
    angular = data.qvel[..., 3:6]  # a free joint's angular velocity is in the body's frame
    down = jnp.broadcast_to(jnp.array([0.0, 0.0, -1.0], quat.dtype), linear.shape)
    gravity = rotate_inverse(down, quat)
    if frame is not None:
        rot = jnp.asarray(frame, linear.dtype)  # v in the frame: rot.T @ v
        linear, angular, gravity = linear @ rot, angular @ rot, gravity @ rot
    return {
        "true_base_lin_vel": linear,
        "true_base_ang_vel": angular,
        "true_projected_gravity": gravity,
        "true_base_height": data.qpos[..., 2:3],
    }


@dataclasses.dataclass(frozen=True, eq=False)
class WithTrueState:
    """`observe` with the chosen true-state components appended to `groups`. One env or a batch."""

    base: Callable[[Any], Observation]
    groups: tuple[str, ...]
    components: tuple[str, ...]
    frame: np.ndarray | None  # the commands' frame in the base's, [3, 3]; None: the base's own

    def values(self, data: Any) -> dict[str, jax.Array]:
        return base_state(data, self.frame)

    def __call__(self, state: Any) -> Observation:
        obs = dict(self.base(state))
        values = self.values(state.data)
        parts = [values[name] for name in self.components]
        for group in self.groups:
            extra = [p.astype(obs[group].dtype) for p in parts]
            obs[group] = jnp.concatenate([obs[group], *extra], axis=-1)
        return obs


def with_true_state(
    task: str,
    env: Any,
    groups: PlaygroundGroups,
    observe: Callable[[Any], Observation],
    setting: TrueStateSetting,
) -> WithTrueState:
    """`observe` (the task's `groups`, perhaps with perception) with the true state appended; the
    model must have a floating base (its first joint free) and the groups must be the task's."""
    model = env.mj_model
    if model.njnt == 0 or int(model.jnt_type[0]) != FREE_JOINT or int(model.jnt_qposadr[0]) != 0:
        raise ConfigError(
            f"env.true_state reads a floating base, whose free joint is the model's first joint; "
            f"{task!r} has none (valid: legged tasks such as Op3Joystick, SpotFlatTerrainJoystick, "
            "BarkourJoystick, H1JoystickGaitTracking, Go1JoystickFlatTerrain)"
        )
    check_setting_groups(TRUE_STATE, task, groups, setting.groups)
    return WithTrueState(
        base=observe, groups=setting.groups, components=setting.components, frame=command_frame(model)
    )


def true_state_entries(setting: TrueStateSetting) -> tuple[tuple[str, int], ...]:
    """The components' layout entries, in the order they are appended."""
    return tuple((name, TRUE_COMPONENTS[name]) for name in setting.components)
