"""Named components of MuJoCo Playground observations, so that parts of strl_jax can pick them by name.

Playground tasks build each observation array with `jp.hstack([...])` in their `_get_obs`; st_rl picks
observation parts by name (`obs_components`, `estimator_target_components: [lin_vel]`). A *layout* is
the ordered `((name, size), ...)` of one observation key ("state", "privileged_state"; a task whose
observation is one array has only "state"), read off each task's `_get_obs` in Playground 0.2.0. The
sizes sum to the key's observation size (tests/test_playground_components.py checks every task).

The names are also the convention for envs of one's own, which declare their layouts themselves
(`obs_layout`, or `env.obs_layout` in the config; `strl_jax.envs.obs_layout`): a `base_lin_vel` of
a user robot is found by estimators, encoders and symmetry tables like a registry task's.

Names within one key are unique. The rules that keep them so:
- `privileged_state` begins with a copy of `state` (for frame-stacked states: of its newest frame);
  that copy's components are named `state_<name>`. Every other name in `privileged_state` is the
  un-noised quantity, so a plain name means the true value there and the policy's (possibly
  noisy) view in `state`, as in st_rl where noise only touches the actor's observation.
- A state stacked from whole frames (newest first) names the newest frame plainly and an older
  frame `k` steps back `<name>_prev<k>`.
- A history the task keeps as one vector (newest first) is one component, `<quantity>_history`.

Legged-robot vocabulary (legged_gym / st_rl names where they exist):
- `base_lin_vel` (3): linear velocity in the IMU/base frame. `base_ang_vel` (3): the gyro (angular
  velocity in the IMU frame). `global_ang_vel` (3): angular velocity in the world frame.
  `yaw_rate` (1): the gyro's z times 0.25 (Barkour).
- `projected_gravity` (3): the unit gravity direction in the IMU frame (`[0, 0, -1]` when level).
  `upvector` (3): the IMU's z axis in the world frame (`[0, 0, 1]` when level; Spot, H1, Op3 and
  Barkour observe this through Playground's `get_gravity`).
- `dof_pos` (n): joint angles minus the task's default pose. `dof_pos_raw` (n): joint angles.
  `dof_vel` (n): joint velocities. `actuator_force` (n). `last_action` (n): the previous action.
- `command` (3): `[lin_vel_x, lin_vel_y, ang_vel_yaw]` (Barkour scales it by `[2, 2, 0.25]`).
- `accelerometer` (3), `base_height` (1), `base_pos` (3), `base_quat` (4).
- `feet_contact` (feet), `feet_air_time` (feet), `feet_pos` (3 per foot), `feet_vel` (3 per foot,
  world frame).
- `perturbation_force` (3): the push on the torso; `perturbation_active` (1).
- `dof_pos_error_history` (n per step): joint angles minus motor targets. `dof_vel_history`.
- Gait tracking: `gait_phase` (cos of each foot's phase, then sin), `gait_freq`, `gait_id` (index
  into the task's gaits), `gait_foot_height` (the target swing height).

dm_control suite tasks use the dm_control task's observation keys (`position`, `velocity`,
`orientations`, `height`, `to_target`, ...). Manipulation tasks name what they observe (`qpos`,
`qvel` of the whole model, `gripper_pos`, `gripper_rot` (the last 6 entries of its rotation
matrix), `obj_to_target` (target minus object position), `cube_pos_error`, ...).

Layouts that depend on the config: `history_len` (SpotFlatTerrainJoystick, SpotJoystickGaitTracking,
H1InplaceGaitTracking, H1JoystickGaitTracking, LeapCubeReorient, LeapCubeRotateZAxis,
AeroCubeRotateZAxis), `obs_history_size` (Op3Joystick); `vision=True` gives images, not laid out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from strl_jax.errors import ConfigError

Layout = tuple[tuple[str, int], ...]
Layouts = dict[str, Layout]
Builder = Callable[[Mapping[str, Any]], Layouts]


def _setting(config: Mapping[str, Any], name: str) -> int:
    """An integer setting of the task's config (the layout's size depends on it)."""
    value = config.get(name)
    if value is None:
        raise ConfigError(f"the Playground config has no {name!r}, which this task's layout needs")
    return int(value)


def stacked_frames(frame: Layout, count: int) -> Layout:
    """`count` copies of `frame`, newest first; a copy k steps back is named `<name>_prev<k>`."""
    older = tuple((f"{name}_prev{k}", size) for k in range(1, count) for name, size in frame)
    return frame + older


def privileged(state: Layout, *extra: tuple[str, int]) -> Layout:
    """A privileged state that begins with `state` (named `state_<name>`) and goes on with `extra`."""
    return tuple((f"state_{name}", size) for name, size in state) + extra


def _split(state: Layout, extra: Layout) -> Layouts:
    return {"state": state, "privileged_state": privileged(state, *extra)}


# --- Locomotion ---------------------------------------------------------------------------------


def _go1_joystick(config: Mapping[str, Any]) -> Layouts:
    state = (
        ("base_lin_vel", 3),
        ("base_ang_vel", 3),
        ("projected_gravity", 3),
        ("dof_pos", 12),
        ("dof_vel", 12),
        ("last_action", 12),
        ("command", 3),
    )
    extra = (
        ("base_ang_vel", 3),
        ("accelerometer", 3),
        ("projected_gravity", 3),
        ("base_lin_vel", 3),
        ("global_ang_vel", 3),
        ("dof_pos", 12),
        ("dof_vel", 12),
        ("actuator_force", 12),
        ("feet_contact", 4),
        ("feet_vel", 12),
        ("feet_air_time", 4),
        ("perturbation_force", 3),
        ("perturbation_active", 1),
    )
    return _split(state, extra)


def _go1_pose(with_lin_vel: bool) -> Builder:
    """Go1Getup (no linear velocity in `state`), Go1Handstand and Go1Footstand."""

    def build(config: Mapping[str, Any]) -> Layouts:
        state = (("base_lin_vel", 3),) if with_lin_vel else ()
        state += (
            ("base_ang_vel", 3),
            ("projected_gravity", 3),
            ("dof_pos", 12),
            ("dof_vel", 12),
            ("last_action", 12),
        )
        extra = (
            ("base_ang_vel", 3),
            ("accelerometer", 3),
            ("base_lin_vel", 3),
            ("global_ang_vel", 3),
            ("dof_pos_raw", 12),
            ("dof_vel", 12),
            ("actuator_force", 12),
            ("base_height", 1),
        )
        return _split(state, extra)

    return build


def _humanoid_joystick(joints: int, contact_extras: bool) -> Builder:
    """Berkeley Humanoid, G1 and T1 (`contact_extras`), and Apollo: two feet, gait phase per foot."""

    def build(config: Mapping[str, Any]) -> Layouts:
        state = (
            ("base_lin_vel", 3),
            ("base_ang_vel", 3),
            ("projected_gravity", 3),
            ("command", 3),
            ("dof_pos", joints),
            ("dof_vel", joints),
            ("last_action", joints),
            ("gait_phase", 4),
        )
        if contact_extras:
            extra = (
                ("base_ang_vel", 3),
                ("accelerometer", 3),
                ("projected_gravity", 3),
                ("base_lin_vel", 3),
                ("global_ang_vel", 3),
                ("dof_pos", joints),
                ("dof_vel", joints),
                ("base_height", 1),
                ("actuator_force", joints),
                ("feet_contact", 2),
                ("feet_vel", 6),
                ("feet_air_time", 2),
            )
        else:
            extra = (
                ("base_ang_vel", 3),
                ("projected_gravity", 3),
                ("base_lin_vel", 3),
                ("dof_pos", joints),
                ("dof_vel", joints),
                ("actuator_force", joints),
                ("base_pos", 3),
                ("base_quat", 4),
            )
        return _split(state, extra)

    return build


def _spot_getup(config: Mapping[str, Any]) -> Layouts:
    return {
        "state": (("base_ang_vel", 3), ("upvector", 3), ("dof_pos", 12), ("last_action", 12)),
    }


def _spot_joystick(config: Mapping[str, Any]) -> Layouts:
    history = _setting(config, "history_len")
    state = (
        ("base_ang_vel", 3),
        ("upvector", 3),
        ("dof_pos", 12),
        ("dof_pos_error_history", 12 * history),
        ("feet_pos", 12),
        ("last_action", 12),
        ("command", 3),
    )
    extra = (
        ("base_ang_vel", 3),
        ("accelerometer", 3),
        ("upvector", 3),
        ("base_lin_vel", 3),
        ("global_ang_vel", 3),
        ("dof_pos", 12),
        ("feet_pos", 12),
        ("dof_vel", 12),
        ("actuator_force", 12),
        ("feet_contact", 4),
        ("feet_vel", 12),
        ("feet_air_time", 4),
        ("perturbation_force", 3),
    )
    return _split(state, extra)


GAIT = (("gait_freq", 1), ("gait_id", 1), ("gait_foot_height", 1))


def _spot_gait_tracking(config: Mapping[str, Any]) -> Layouts:
    history = _setting(config, "history_len")
    state = (
        ("base_ang_vel", 3),
        ("upvector", 3),
        ("dof_pos_raw", 12),
        ("dof_pos_error_history", 12 * history),
        ("feet_contact", 4),
        ("gait_phase", 8),
    )
    return {"state": state + GAIT}


def _h1_gait_tracking(with_command: bool) -> Builder:
    """H1InplaceGaitTracking and H1JoystickGaitTracking (which adds the velocity command)."""

    def build(config: Mapping[str, Any]) -> Layouts:
        history = _setting(config, "history_len")
        state = (
            ("base_ang_vel", 3),
            ("upvector", 3),
            ("dof_pos", 19),
            ("dof_vel", 19),
            ("last_action", 19),
        )
        state += (("command", 3),) if with_command else ()
        state += (
            ("dof_vel_history", 19 * history),
            ("dof_pos_error_history", 19 * history),
            ("feet_contact", 2),
            ("gait_phase", 4),
        )
        return {"state": state + GAIT}

    return build


def _op3_joystick(config: Mapping[str, Any]) -> Layouts:
    frame = (("base_ang_vel", 3), ("upvector", 3), ("command", 3), ("dof_pos", 20), ("last_action", 20))
    return {"state": stacked_frames(frame, _setting(config, "obs_history_size"))}


def _barkour_joystick(config: Mapping[str, Any]) -> Layouts:
    frame = (("yaw_rate", 1), ("upvector", 3), ("command", 3), ("dof_pos", 12), ("last_action", 12))
    return {"state": stacked_frames(frame, 15)}  # the task keeps 15 frames, not configurable


# --- dm_control suite ---------------------------------------------------------------------------


def _fixed(*state: tuple[str, int]) -> Builder:
    """A task whose one observation array has a fixed layout."""
    return lambda config: {"state": tuple(state)}


FINGER = (("position", 4), ("velocity", 3), ("touch", 2))

# --- Manipulation -------------------------------------------------------------------------------

PANDA_PICK = (
    ("gripper_pos", 3),
    ("gripper_rot", 6),
    ("obj_rot", 6),
    ("gripper_to_obj", 3),
    ("obj_to_target", 3),
    ("target_rot_error", 6),
    ("ctrl_error", 8),
)


def _hand_rotate_z(frame: Layout, extra: Layout) -> Builder:
    """Leap and Aero cube rotation: `state` stacks `history_len` frames, `privileged_state` has one."""

    def build(config: Mapping[str, Any]) -> Layouts:
        state = stacked_frames(frame, _setting(config, "history_len"))
        return {"state": state, "privileged_state": privileged(frame, *extra)}

    return build


def _leap_reorient(config: Mapping[str, Any]) -> Layouts:
    history = _setting(config, "history_len")
    state = (
        ("dof_pos_raw", 16),
        ("dof_pos_error_history", 16 * history),
        ("cube_pos_error_history", 3 * history),
        ("cube_ori_error_history", 6 * history),
        ("last_action", 16),
    )
    extra = (
        ("dof_pos_raw", 16),
        ("dof_vel", 16),
        ("fingertip_pos", 12),
        ("cube_pos_error", 3),
        ("cube_ori_error", 6),
        ("cube_lin_vel", 3),
        ("cube_ang_vel", 3),
        ("perturbation_dir", 6),
        ("perturbation_wrench", 6),
    )
    return _split(state, extra)


def _cube_state(joints: int, actuators: int, fingertips: int) -> Layout:
    """The privileged cube-rotation quantities after the state frame (Leap and Aero)."""
    return (
        ("dof_pos_raw", joints),
        ("dof_vel", joints),
        ("actuator_force", actuators),
        ("fingertip_pos", 3 * fingertips),
        ("cube_pos_error", 3),
        ("cube_quat", 4),
        ("cube_ang_vel", 3),
        ("cube_lin_vel", 3),
    )


BUILDERS: dict[str, Builder] = {
    # dm_control suite (names from the dm_control task's observation dict)
    "AcrobotSwingup": _fixed(("orientations", 4), ("velocity", 2)),
    "AcrobotSwingupSparse": _fixed(("orientations", 4), ("velocity", 2)),
    "BallInCup": _fixed(("position", 4), ("velocity", 4)),
    "CartpoleBalance": _fixed(("position", 3), ("velocity", 2)),
    "CartpoleBalanceSparse": _fixed(("position", 3), ("velocity", 2)),
    "CartpoleSwingup": _fixed(("position", 3), ("velocity", 2)),
    "CartpoleSwingupSparse": _fixed(("position", 3), ("velocity", 2)),
    "CheetahRun": _fixed(("position", 8), ("velocity", 9)),
    "FingerSpin": _fixed(*FINGER),
    "FingerTurnEasy": _fixed(*FINGER, ("target_position", 2), ("dist_to_target", 1)),
    "FingerTurnHard": _fixed(*FINGER, ("target_position", 2), ("dist_to_target", 1)),
    "FishSwim": _fixed(("upright", 1), ("joint_angles", 7), ("target", 3), ("velocity", 13)),
    "HopperHop": _fixed(("position", 6), ("velocity", 7), ("touch", 2)),
    "HopperStand": _fixed(("position", 6), ("velocity", 7), ("touch", 2)),
    **{
        task: _fixed(
            ("joint_angles", 21),
            ("head_height", 1),
            ("extremities", 12),
            ("torso_vertical", 3),
            ("com_velocity", 3),
            ("velocity", 27),
        )
        for task in ("HumanoidStand", "HumanoidWalk", "HumanoidRun")
    },
    "PendulumSwingup": _fixed(("orientation", 2), ("velocity", 1)),
    "PointMass": _fixed(("position", 2), ("velocity", 2)),
    "ReacherEasy": _fixed(("position", 2), ("to_target", 2), ("velocity", 2)),
    "ReacherHard": _fixed(("position", 2), ("to_target", 2), ("velocity", 2)),
    "SwimmerSwimmer6": _fixed(("joints", 5), ("to_target", 2), ("body_velocities", 18)),
    **{
        task: _fixed(("orientations", 14), ("height", 1), ("velocity", 9))
        for task in ("WalkerRun", "WalkerStand", "WalkerWalk")
    },
    # Locomotion
    "ApolloJoystickFlatTerrain": _humanoid_joystick(32, contact_extras=False),
    "BarkourJoystick": _barkour_joystick,
    "BerkeleyHumanoidJoystickFlatTerrain": _humanoid_joystick(12, contact_extras=True),
    "BerkeleyHumanoidJoystickRoughTerrain": _humanoid_joystick(12, contact_extras=True),
    "G1JoystickFlatTerrain": _humanoid_joystick(29, contact_extras=True),
    "G1JoystickRoughTerrain": _humanoid_joystick(29, contact_extras=True),
    "Go1JoystickFlatTerrain": _go1_joystick,
    "Go1JoystickRoughTerrain": _go1_joystick,
    "Go1Getup": _go1_pose(with_lin_vel=False),
    "Go1Handstand": _go1_pose(with_lin_vel=True),
    "Go1Footstand": _go1_pose(with_lin_vel=True),
    "H1InplaceGaitTracking": _h1_gait_tracking(with_command=False),
    "H1JoystickGaitTracking": _h1_gait_tracking(with_command=True),
    "Op3Joystick": _op3_joystick,
    "SpotFlatTerrainJoystick": _spot_joystick,
    "SpotGetup": _spot_getup,
    "SpotJoystickGaitTracking": _spot_gait_tracking,
    "T1JoystickFlatTerrain": _humanoid_joystick(23, contact_extras=True),
    "T1JoystickRoughTerrain": _humanoid_joystick(23, contact_extras=True),
    # Manipulation
    "AlohaHandOver": _fixed(
        ("qpos", 23),
        ("qvel", 22),
        ("finger_box_margin", 4),  # finger joint positions minus the box's half width
        ("box_top", 3),
        ("box_bottom", 3),
        ("left_gripper_pos", 3),
        ("left_gripper_rot", 6),
        ("right_gripper_pos", 3),
        ("right_gripper_rot", 6),
        ("box_rot", 6),
        ("target_to_box", 3),
        ("episode_progress", 1),
    ),
    "AlohaSinglePegInsertion": _fixed(
        ("qpos", 30),
        ("qvel", 28),
        ("left_gripper_pos", 3),
        ("socket_pos", 3),
        ("right_gripper_pos", 3),
        ("peg_pos", 3),
        ("socket_entrance_pos", 3),
        ("peg_end2_pos", 3),
        ("socket_z", 3),  # the last row of the rotation matrix
        ("peg_z", 3),
    ),
    "PandaPickCube": _fixed(("qpos", 16), ("qvel", 15), *PANDA_PICK),
    "PandaPickCubeOrientation": _fixed(("qpos", 16), ("qvel", 15), *PANDA_PICK),
    "PandaPickCubeCartesian": _fixed(
        ("qpos", 16), ("qvel", 15), *PANDA_PICK, ("no_solution", 1), ("last_action", 3)
    ),
    "PandaOpenCabinet": _fixed(("qpos", 10), ("qvel", 10), *PANDA_PICK),
    "PandaRobotiqPushCube": _fixed(  # one noisy frame, delayed by a random number of steps
        ("target_pos", 3),
        ("target_rot", 6),
        ("last_action", 7),
        ("dof_pos_raw", 7),
        ("dof_vel", 7),
        ("gripper_pos", 3),
        ("gripper_rot", 6),
        ("obj_rot", 6),
        ("obj_pos", 3),
    ),
    "LeapCubeReorient": _leap_reorient,
    "LeapCubeRotateZAxis": _hand_rotate_z(
        (("dof_pos_raw", 16), ("last_action", 16)), _cube_state(16, 16, fingertips=4)
    ),
    "AeroCubeRotateZAxis": _hand_rotate_z(
        (("tendon_length", 6), ("thumb_abduction", 1), ("last_action", 7)),
        _cube_state(16, 7, fingertips=5),
    ),
}


def laid_out_tasks() -> tuple[str, ...]:
    """The Playground tasks this module can lay out."""
    return tuple(BUILDERS)


def playground_default_config(task: str) -> Mapping[str, Any]:
    """Playground's default config of `task` (imports Playground)."""
    from mujoco_playground import registry  # noqa: PLC0415 - optional dependency

    return registry.get_default_config(task)


def component_layout(task: str, key: str = "state", config: Mapping[str, Any] | None = None) -> Layout | None:
    """The `((name, size), ...)` of observation `key` of Playground `task`, None where not laid out.

    `config` is the task's resolved config (sizes can depend on it); None means Playground's default.
    A task whose observation is one array has the single key "state". Image observations
    (`vision=True`) and unknown tasks or keys give None.
    """
    builder = BUILDERS.get(task)
    if builder is None:
        return None
    config = playground_default_config(task) if config is None else config
    if config.get("vision", False):
        return None
    return builder(config).get(key)


def component_slices(layout: Layout, names: Iterable[str]) -> tuple[tuple[int, int], ...]:
    """`(start, stop)` of each named component in `layout`, in the order of `names`."""
    names = (names,) if isinstance(names, str) else tuple(names)
    spans: dict[str, tuple[int, int]] = {}
    start = 0
    for name, size in layout:
        spans[name] = (start, start + size)
        start += size
    unknown = [name for name in names if name not in spans]
    if unknown:
        raise ConfigError(f"unknown observation component(s) {unknown}; valid components: {list(spans)}")
    return tuple(spans[name] for name in names)


def component_indices(layout: Layout, names: Iterable[str]) -> np.ndarray:
    """The observation indices of the named components, concatenated in the order of `names`."""
    spans = component_slices(layout, names)
    return np.concatenate([np.arange(start, stop) for start, stop in spans] or [np.zeros(0, int)])
