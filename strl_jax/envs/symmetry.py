"""Left-right mirror functions for `algorithm.symmetry_cfg.data_augmentation_func`.

Each function has the signature `agents.symmetry` calls, `fn(obs, actions, env) -> (obs', actions')`,
and returns the originals followed by their mirror images (`[2 B, ...]`). The mirror is the
reflection of the world across the robot's sagittal (x-z) plane, `y -> -y`: a polar vector
(velocity, gravity, force) keeps x and z and negates y; an axial one (angular velocity) negates x
and z; a hinge joint changes sign when its axis lies in the sagittal plane's normal direction
(roll about x, yaw about z) and swaps with its partner on the other side. World-frame quantities
(`global_ang_vel`, `feet_vel`) mirror the same way, which is the reflection of the whole scene.

Every mirror is a permutation with signs, `x[..., perm] * sign`, built once per group from the
group's component layout (`envs.playground_components`) at trace time; applying it twice gives the
input back (tests/test_symmetry.py checks this and the index tables).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import jax.numpy as jnp
import numpy as np

from strl_jax.envs.entry_points import task_name
from strl_jax.errors import ConfigError

Table = tuple[np.ndarray, np.ndarray]  # (perm, sign) of one vector

POLAR = (np.arange(3), np.array([1.0, -1.0, 1.0]))
AXIAL = (np.arange(3), np.array([-1.0, 1.0, -1.0]))
COMMAND = (np.arange(3), np.array([1.0, -1.0, -1.0]))  # [vx, vy, yaw rate]


def same(size: int) -> Table:
    return np.arange(size), np.ones(size)


def swap_blocks(pairs: list[int], block: Table) -> Table:
    """Block `i` of equal blocks goes where block `pairs[i]` was, each mirrored by `block`."""
    perm_b, sign_b = block
    n = len(perm_b)
    perm = np.concatenate([pairs[i] * n + perm_b for i in range(len(pairs))])
    return perm, np.tile(sign_b, len(pairs))


def joint_table(partner: list[int], flips: list[bool]) -> Table:
    """Joint `i` reads its partner's value, negated where the joint rotates about x or z."""
    return np.asarray(partner), np.where(np.asarray(flips), -1.0, 1.0)


def concat(tables: list[Table]) -> Table:
    perms, signs, start = [], [], 0
    for perm, sign in tables:
        perms.append(perm + start)
        signs.append(sign)
        start += len(perm)
    return np.concatenate(perms), np.concatenate(signs)


def base_name(name: str) -> str:
    """A component's quantity: without the `state_` copy prefix and the `_prev<k>` frame suffix."""
    return re.sub(r"_prev\d+$", "", name.removeprefix("state_"))


def group_table(task: str, group: str, layout, rules: Mapping[str, Table]) -> Table:
    tables = []
    for name, size in layout:
        rule = rules.get(base_name(name))
        if rule is None or len(rule[0]) != size:
            raise ConfigError(
                f"no left-right mirror for component {name!r} ({size}) of group {group!r} of {task}; "
                f"mirrored components: {sorted(rules)}"
            )
        tables.append(rule)
    return concat(tables)


def apply(x: jnp.ndarray, table: Table) -> jnp.ndarray:
    """The mirror image of `x[..., n]` (a pure gather and multiply)."""
    perm, sign = table
    return x[..., perm] * jnp.asarray(sign, x.dtype)


def augment(obs, actions, obs_tables: Mapping[str, Table], action_table: Table):
    """Originals then mirror images along the batch axis (rsl_rl's convention)."""
    out_obs = (
        None if obs is None else {k: jnp.concatenate([v, apply(v, obs_tables[k])]) for k, v in obs.items()}
    )
    out_actions = None if actions is None else jnp.concatenate([actions, apply(actions, action_table)])
    return out_obs, out_actions


# `env.true_state`'s components (strl_jax.envs.true_state), in the commands' frame, whose x-z plane is
# the robot's sagittal plane: every legged task's mirror takes them.
TRUE_STATE_RULES: dict[str, Table] = {
    "true_base_lin_vel": POLAR,
    "true_base_ang_vel": AXIAL,
    "true_projected_gravity": POLAR,
    "true_base_height": same(1),
}


def layout_tables(env, tasks: tuple[str, ...], rules: Mapping[str, Table], obs) -> dict[str, Table]:
    """Tables of the groups in `obs` from the env's component layouts (`rules` and the true state's)."""
    if not any(task_name(env.task).startswith(t) for t in tasks):
        raise ConfigError(
            f"this mirror function is for {list(tasks)} (an entry point's Name after the colon counts), "
            f"the env is {env.task!r}"
        )
    tables = {}
    for group in obs or {}:
        if group not in env.components:
            raise ConfigError(f"group {group!r} of {env.task} has no component layout to mirror")
        tables[group] = group_table(env.task, group, env.components[group], {**TRUE_STATE_RULES, **rules})
    return tables


# --- Go1 (Playground Go1JoystickFlatTerrain / RoughTerrain) -------------------------------------
# Legs FR, FL, RR, RL of (hip abduction about x, thigh, calf); feet sites in the same order.
GO1_LEGS = [1, 0, 3, 2]
GO1_JOINTS = swap_blocks(GO1_LEGS, (np.arange(3), np.array([-1.0, 1.0, 1.0])))
GO1_RULES: dict[str, Table] = {
    "base_lin_vel": POLAR,
    "base_ang_vel": AXIAL,
    "projected_gravity": POLAR,
    "accelerometer": POLAR,
    "global_ang_vel": AXIAL,
    "command": COMMAND,
    "dof_pos": GO1_JOINTS,  # minus the default pose, which is itself symmetric
    "dof_vel": GO1_JOINTS,
    "last_action": GO1_JOINTS,
    "actuator_force": GO1_JOINTS,
    "feet_contact": swap_blocks(GO1_LEGS, same(1)),
    "feet_air_time": swap_blocks(GO1_LEGS, same(1)),
    "feet_vel": swap_blocks(GO1_LEGS, POLAR),
    "perturbation_force": POLAR,
    "perturbation_active": same(1),
}


def go1_joystick(obs, actions, env):
    """Go1 joystick tasks: `policy` (`state`) and `critic` (`privileged_state`) groups and actions."""
    tables = layout_tables(env, ("Go1Joystick",), GO1_RULES, obs)
    return augment(obs, actions, tables, GO1_JOINTS)


# --- Spot (Playground SpotFlatTerrainJoystick) ----------------------------------------------------
# Legs FL, FR, HL, HR of (hip abduction about x, hip flexion, knee), as Go1's with the sides in the
# other order; feet sites in the same order. The joint-error history holds `history_len` frames of
# the 12 joints, newest first.
SPOT_LEGS = [1, 0, 3, 2]
SPOT_JOINTS = swap_blocks(SPOT_LEGS, (np.arange(3), np.array([-1.0, 1.0, 1.0])))
SPOT_RULES: dict[str, Table] = {
    "base_lin_vel": POLAR,
    "base_ang_vel": AXIAL,
    "upvector": POLAR,
    "accelerometer": POLAR,
    "global_ang_vel": AXIAL,
    "command": COMMAND,
    "dof_pos": SPOT_JOINTS,  # the default pose is symmetric
    "dof_vel": SPOT_JOINTS,
    "last_action": SPOT_JOINTS,
    "actuator_force": SPOT_JOINTS,
    "feet_pos": swap_blocks(SPOT_LEGS, POLAR),
    "feet_contact": swap_blocks(SPOT_LEGS, same(1)),
    "feet_air_time": swap_blocks(SPOT_LEGS, same(1)),
    "feet_vel": swap_blocks(SPOT_LEGS, POLAR),
    "perturbation_force": POLAR,
}


def spot_joystick(obs, actions, env):
    """Spot joystick task (SpotFlatTerrainJoystick): `policy` and `critic` groups and actions."""
    found = (n for layout in env.components.values() for name, n in layout if name == "dof_pos_error_history")
    frames = next(found, 0) // 12  # the config's history_len
    history = {"dof_pos_error_history": concat([SPOT_JOINTS] * frames)} if frames else {}
    tables = layout_tables(env, ("SpotFlatTerrainJoystick",), {**SPOT_RULES, **history}, obs)
    return augment(obs, actions, tables, SPOT_JOINTS)


# --- Barkour (Playground BarkourJoystick) ---------------------------------------------------------
# Legs front left, hind left, front right, hind right of (abduction, hip, knee). The two sides'
# abduction axes point opposite ways along x (and the hip and knee axes along y alike), so a joint
# and its mirror partner take the same value: the mirror only swaps the sides. The observation
# stacks 15 frames (the newest first) in the IMU's frame, which faces backwards: a frame turned
# about z, whose x-z plane is the base's, so the reflection negates y there too.
BARKOUR_JOINTS = swap_blocks([2, 3, 0, 1], same(3))
BARKOUR_RULES: dict[str, Table] = {
    "yaw_rate": (np.arange(1), np.array([-1.0])),
    "upvector": POLAR,
    "command": COMMAND,  # scaled by [2, 2, 0.25]: the signs are the command's
    "dof_pos": BARKOUR_JOINTS,
    "last_action": BARKOUR_JOINTS,
}


def barkour_joystick(obs, actions, env):
    """Barkour joystick task (BarkourJoystick): its stacked-frame groups and the 12 actions."""
    tables = layout_tables(env, ("BarkourJoystick",), BARKOUR_RULES, obs)
    return augment(obs, actions, tables, BARKOUR_JOINTS)


# --- T1 (Playground T1JoystickFlatTerrain / RoughTerrain) ---------------------------------------
# Joints: head yaw, head pitch; left arm (shoulder pitch, roll, elbow pitch, yaw); right arm; waist
# (yaw); left leg (hip pitch, roll, yaw, knee, ankle pitch, roll); right leg. Feet: left, right.
_T1_ARM = [False, True, False, True]
_T1_LEG = [False, True, True, False, False, True]
T1_JOINTS = joint_table(
    [0, 1, *range(6, 10), *range(2, 6), 10, *range(17, 23), *range(11, 17)],
    [True, False, *_T1_ARM, *_T1_ARM, True, *_T1_LEG, *_T1_LEG],
)
T1_RULES: dict[str, Table] = {
    "base_lin_vel": POLAR,
    "base_ang_vel": AXIAL,
    "projected_gravity": POLAR,
    "accelerometer": POLAR,
    "global_ang_vel": AXIAL,
    "command": COMMAND,
    "dof_pos": T1_JOINTS,  # the default pose is symmetric
    "dof_vel": T1_JOINTS,
    "last_action": T1_JOINTS,
    "actuator_force": T1_JOINTS,
    "gait_phase": concat([swap_blocks([1, 0], same(1))] * 2),  # cos per foot, then sin per foot
    "base_height": same(1),
    "feet_contact": swap_blocks([1, 0], same(1)),
    "feet_air_time": swap_blocks([1, 0], same(1)),
    "feet_vel": swap_blocks([1, 0], POLAR),
}


def t1_joystick(obs, actions, env):
    """Booster T1 joystick tasks: `policy` and `critic` groups and the 23 joint actions."""
    tables = layout_tables(env, ("T1Joystick",), T1_RULES, obs)
    return augment(obs, actions, tables, T1_JOINTS)


# --- Berkeley Humanoid (Playground BerkeleyHumanoidJoystickFlatTerrain / RoughTerrain) -----------
# Joints: left leg (hip rotation about z, hip abduction about x, hip flexion, knee, ankle flexion,
# ankle abduction about x), then the right leg. The rotation and abduction joints change sign; the
# default pose ("home": left -0.071, 0.103, ..., 0.126; right 0.071, -0.103, ..., -0.126) is its own
# mirror image (tests/test_symmetry.py reads it off the model). Feet: left, right.
_BERKELEY_LEG = [True, True, False, False, False, True]
BERKELEY_JOINTS = joint_table([*range(6, 12), *range(6)], _BERKELEY_LEG * 2)
BERKELEY_RULES: dict[str, Table] = {
    **T1_RULES,
    "dof_pos": BERKELEY_JOINTS,
    "dof_vel": BERKELEY_JOINTS,
    "last_action": BERKELEY_JOINTS,
    "actuator_force": BERKELEY_JOINTS,
}


def berkeley_humanoid_joystick(obs, actions, env):
    """Berkeley Humanoid joystick tasks: `policy` and `critic` groups and the 12 joint actions."""
    tables = layout_tables(env, ("BerkeleyHumanoidJoystick",), BERKELEY_RULES, obs)
    return augment(obs, actions, tables, BERKELEY_JOINTS)


# --- Op3 (Playground Op3Joystick) --------------------------------------------------------------
# Joints: head pan (about z), head tilt; left arm (shoulder pitch, roll, elbow), right arm; left leg
# (hip yaw, roll, pitch, knee, ankle pitch, roll), right leg. Each side's joints are the mirror
# images of the other side's with the opposite sign of rotation (at the standing keyframe a left
# joint's angle is the negated right one's), so every partner reads the negated value; the head
# tilt, its own partner about y, keeps its sign. The observation stacks `obs_history_size` frames
# of (gyro, up vector, command, joint angles minus the default pose, last action), newest first;
# there is no privileged state.
OP3_JOINTS = joint_table(
    [0, 1, 5, 6, 7, 2, 3, 4, *range(14, 20), *range(8, 14)],
    [True, False, *[True] * 18],
)
OP3_RULES: dict[str, Table] = {
    "base_ang_vel": AXIAL,
    "upvector": POLAR,
    "command": COMMAND,
    "dof_pos": OP3_JOINTS,  # the default pose is symmetric
    "last_action": OP3_JOINTS,
}


def op3_joystick(obs, actions, env):
    """Op3 joystick task (Op3Joystick): its stacked-frame groups and the 20 joint actions."""
    tables = layout_tables(env, ("Op3Joystick",), OP3_RULES, obs)
    return augment(obs, actions, tables, OP3_JOINTS)


# --- Brax ant -----------------------------------------------------------------------------------
# Legs (ant.xml): 1 at (+x, +y), 2 at (-x, +y), 3 at (-x, -y), 4 at (+x, -y), each (hip about z,
# ankle); the mirror pairs 1-4 and 2-3 (the partners' ankle axes are mirror images: same sign).
# Observation (27): z, quaternion (w, x, y, z), the 8 joints in leg order 1-4, linear velocity,
# angular velocity, the 8 joint velocities. Actuators: legs in the order 4, 1, 2, 3.
ANT_JOINTS = swap_blocks([3, 2, 1, 0], (np.arange(2), np.array([-1.0, 1.0])))
ANT_ACTIONS = swap_blocks([1, 0, 3, 2], (np.arange(2), np.array([-1.0, 1.0])))
ANT_OBS = concat(
    [same(1), (np.arange(4), np.array([1.0, -1.0, 1.0, -1.0])), ANT_JOINTS, POLAR, AXIAL, ANT_JOINTS]
)


def ant(obs, actions, env):
    """Brax ant: groups holding the whole 27-entry observation, and the 8 actions."""
    if env.task != "ant":
        raise ConfigError(f"this mirror function is for Brax 'ant', the env is {env.task!r}")
    for group, x in (obs or {}).items():
        if x.shape[-1] != len(ANT_OBS[0]):
            raise ConfigError(
                f"group {group!r} has {x.shape[-1]} entries; the ant mirror needs the whole "
                f"{len(ANT_OBS[0])}-entry observation (no env.obs_groups subset)"
            )
    return augment(obs, actions, dict.fromkeys(obs or {}, ANT_OBS), ANT_ACTIONS)


# --- Brax inverted_pendulum ---------------------------------------------------------------------
def inverted_pendulum(obs, actions, env):
    """Brax inverted_pendulum: the cart-pole is symmetric under negating every coordinate and the force."""
    if env.task != "inverted_pendulum":
        raise ConfigError(f"this mirror function is for Brax 'inverted_pendulum', the env is {env.task!r}")
    tables = {k: (np.arange(x.shape[-1]), -np.ones(x.shape[-1])) for k, x in (obs or {}).items()}
    return augment(obs, actions, tables, (np.arange(env.action_size), -np.ones(env.action_size)))
