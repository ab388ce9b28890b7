"""Playground's Go1 joystick task re-stated on native MuJoCo (`mujoco.MjModel`/`MjData`, C physics,
numpy), so that an exported policy can be checked outside JAX before it meets a robot.

Everything here mirrors `mujoco_playground/_src/locomotion/go1/joystick.py` (Playground 0.2.0)
line for line, with the observation noise left out: the policy observation (`state`), the action
(`ctrl = default pose + action * action_scale`, held for `ctrl_dt / sim_dt` physics steps), the
fall termination (the up-vector's z below 0), every reward term, the bookkeeping the rewards need
(feet air time, swing peak, last contacts, last actions) and the command process (uniform draws,
exponential resampling times). The model is the env's own nominal `mj_model`: Playground's domain
randomiser only ever changes the MJX copies of it, never this one.

Sensors are read after `mj_step` as MJX's step leaves them: computed at the start of the last
physics sub-step (both engines run `forward` before integrating). On Go1JoystickRoughTerrain the
same code runs, but MJX's heightfield contacts (`impl=jax`) and C MuJoCo's differ noticeably.

Where the env ends an episode off a heightfield floor's edge (`env.off_terrain: fall`, not part
of Playground's task), the step here does too, after the task's own termination and reward.

One quirk is kept on purpose: like the env, the observation a step returns holds the command and
the last action from *before* that step's bookkeeping update (the new command and the action just
taken appear one step later).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import mujoco
import numpy as np

from strl_jax.envs.off_terrain import off_terrain_of
from strl_jax.errors import ConfigError

SUPPORTED_TASKS = ("Go1JoystickFlatTerrain", "Go1JoystickRoughTerrain")
FEET = ("FR", "FL", "RR", "RL")
POSE_WEIGHT = np.array([1.0, 1.0, 0.1] * 4)


def require_supported(task: str) -> None:
    """Native deployment re-implements one task family; say which ones."""
    if task not in SUPPORTED_TASKS:
        raise ConfigError(f"native MuJoCo deployment supports {list(SUPPORTED_TASKS)}, not task {task!r}")


@dataclasses.dataclass(frozen=True, eq=False)
class NativeTask:
    """The constants of one Go1 joystick env that native stepping needs (read off the env)."""

    model: Any  # mujoco.MjModel: the env's nominal model
    default_pose: np.ndarray  # [12] joint angles of the "home" keyframe
    init_qpos: np.ndarray  # [19]
    action_scale: float
    n_substeps: int
    dt: float  # control step (s)
    clip_actions: float | None
    episode_length: int
    soft_lowers: np.ndarray
    soft_uppers: np.ndarray
    imu_site: int
    feet_sites: np.ndarray  # [4] site ids
    feet_contact_adr: np.ndarray  # [4] sensordata index of each `<foot>_floor_found`
    feet_linvel_adr: np.ndarray  # [4, 3] sensordata indices of each `<foot>_global_linvel`
    sensor_adr: dict[str, np.ndarray]  # name -> sensordata indices (upvector, gyro, ...)
    reward_scales: dict[str, float]
    tracking_sigma: float
    max_foot_height: float
    cmd_a: np.ndarray
    cmd_b: np.ndarray
    # conditions on the robot's qpos that the env adds to the task's own termination (the edge of a
    # heightfield floor: strl_jax.envs.off_terrain), each checked after the task's reward
    terminations: tuple[Callable[[np.ndarray], bool], ...] = ()


def sensor_indices(model: Any, name: str) -> np.ndarray:
    sensor = model.sensor(name)
    return np.arange(int(sensor.adr[0]), int(sensor.adr[0]) + int(sensor.dim[0]))


def native_task(env: Any, task: str, episode_length: int, clip_actions: float | None) -> NativeTask:
    """Constants of the Playground env `env` (unwrapped; `VecEnv.env`) for native stepping."""
    require_supported(task)
    config, model = env._config, env.mj_model  # noqa: SLF001 - the env keeps its config private
    lowers, uppers = model.jnt_range[1:].T
    names = ("upvector", "gyro", "local_linvel", "global_linvel", "global_angvel")
    return NativeTask(
        model=model,
        default_pose=np.array(model.keyframe("home").qpos[7:]),
        init_qpos=np.array(model.keyframe("home").qpos),
        action_scale=float(config.action_scale),
        n_substeps=int(env.n_substeps),
        dt=float(env.dt),
        clip_actions=clip_actions,
        episode_length=episode_length,
        soft_lowers=lowers * config.soft_joint_pos_limit_factor,
        soft_uppers=uppers * config.soft_joint_pos_limit_factor,
        imu_site=model.site("imu").id,
        feet_sites=np.array([model.site(f).id for f in FEET]),
        feet_contact_adr=np.array([int(model.sensor(f"{f}_floor_found").adr[0]) for f in FEET]),
        feet_linvel_adr=np.stack([sensor_indices(model, f"{f}_global_linvel") for f in FEET]),
        sensor_adr={n: sensor_indices(model, n) for n in names},
        reward_scales=dict(config.reward_config.scales.to_dict()),
        tracking_sigma=float(config.reward_config.tracking_sigma),
        max_foot_height=float(config.reward_config.max_foot_height),
        cmd_a=np.array(config.command_config.a),
        cmd_b=np.array(config.command_config.b),
        terminations=tuple(rule for rule in (off_terrain_of(env),) if rule is not None),
    )


# ---- state ------------------------------------------------------------------------------------
@dataclasses.dataclass
class Bookkeeping:
    """What the env keeps in `state.info` besides physics (numpy twins of its entries)."""

    command: np.ndarray
    last_act: np.ndarray
    last_last_act: np.ndarray
    feet_air_time: np.ndarray
    last_contact: np.ndarray
    swing_peak: np.ndarray


def fresh_bookkeeping(command: np.ndarray, nu: int = 12) -> Bookkeeping:
    return Bookkeeping(
        command=np.asarray(command, np.float64),
        last_act=np.zeros(nu),
        last_last_act=np.zeros(nu),
        feet_air_time=np.zeros(4),
        last_contact=np.zeros(4, bool),
        swing_peak=np.zeros(4),
    )


def reset_data(task: NativeTask, qpos: np.ndarray, qvel: np.ndarray) -> Any:
    """MjData at `qpos, qvel` with the default pose as control, forward-computed (the env's reset)."""
    data = mujoco.MjData(task.model)
    set_state(task, data, qpos, qvel)
    data.ctrl[:] = np.asarray(qpos)[7:]
    mujoco.mj_forward(task.model, data)
    return data


def set_state(task: NativeTask, data: Any, qpos: np.ndarray, qvel: np.ndarray) -> None:
    data.qpos[:] = qpos
    data.qvel[:] = qvel
    mujoco.mj_forward(task.model, data)


def random_start(task: NativeTask, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The env's reset distribution: xy +-0.5 m, any yaw, base velocities +-0.5."""
    qpos = task.init_qpos.copy()
    qpos[0:2] += rng.uniform(-0.5, 0.5, 2)
    yaw = rng.uniform(-3.14, 3.14)
    turn = np.array([np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2)])
    quat = np.zeros(4)
    mujoco.mju_mulQuat(quat, qpos[3:7], turn)
    qpos[3:7] = quat
    qvel = np.zeros(task.model.nv)
    qvel[0:6] = rng.uniform(-0.5, 0.5, 6)
    return qpos, qvel


# ---- commands ----------------------------------------------------------------------------------
def initial_command(task: NativeTask, rng: np.random.Generator) -> np.ndarray:
    return rng.uniform(-task.cmd_a, task.cmd_a)


def next_command(task: NativeTask, rng: np.random.Generator, command: np.ndarray) -> np.ndarray:
    """Playground's `sample_command`: each axis keeps its value with probability 1/2, else takes a
    fresh uniform draw that is zeroed with probability `1 - b`."""
    fresh = rng.uniform(-task.cmd_a, task.cmd_a)
    keep_fresh = rng.random(3) < task.cmd_b
    replace = rng.random(3) < 0.5
    return command - replace * (command - fresh * keep_fresh)


def steps_until_next_command(task: NativeTask, rng: np.random.Generator) -> int:
    return int(np.round(rng.exponential() * 5.0 / task.dt))


# ---- observation -----------------------------------------------------------------------------
def sensor(task: NativeTask, data: Any, name: str) -> np.ndarray:
    return np.array(data.sensordata[task.sensor_adr[name]])


def projected_gravity(task: NativeTask, data: Any) -> np.ndarray:
    """Gravity's direction in the IMU frame (`site_xmat.T @ [0, 0, -1]`)."""
    return data.site_xmat[task.imu_site].reshape(3, 3).T @ np.array([0.0, 0.0, -1.0])


def observation_components(task: NativeTask, data: Any, book: Bookkeeping) -> dict[str, np.ndarray]:
    """The noise-free `state` observation of the env, by component name
    (`strl_jax.envs.playground_components`, Go1 joystick layout)."""
    return {
        "base_lin_vel": sensor(task, data, "local_linvel"),
        "base_ang_vel": sensor(task, data, "gyro"),
        "projected_gravity": projected_gravity(task, data),
        "dof_pos": np.array(data.qpos[7:]) - task.default_pose,
        "dof_vel": np.array(data.qvel[6:]),
        "last_action": book.last_act.copy(),
        "command": book.command.copy(),
    }


def assemble(components: dict[str, np.ndarray], layout: list[tuple[str, int]]) -> np.ndarray:
    """The flat policy input in `layout`'s order (the exported model's `obs_components`)."""
    missing = [name for name, _ in layout if name not in components]
    if missing:
        raise ConfigError(
            f"the policy reads components {missing} that the native Go1 observation does not build; "
            f"it builds {list(components)}"
        )
    parts = [components[name] for name, _ in layout]
    for (name, size), part in zip(layout, parts, strict=True):
        if part.size != size:
            raise ConfigError(
                f"component {name!r} holds {part.size} values natively, the policy expects {size}"
            )
    return np.concatenate(parts).astype(np.float32)


# ---- acting ----------------------------------------------------------------------------------
def executed_action(task: NativeTask, action: np.ndarray) -> np.ndarray:
    """The action the env executes: clipped to `env.clip_actions` as strl_jax's VecEnv does."""
    action = np.asarray(action, np.float64)
    return action if task.clip_actions is None else np.clip(action, -task.clip_actions, task.clip_actions)


def apply_action(task: NativeTask, data: Any, action: np.ndarray) -> None:
    """Hold `default pose + action * action_scale` as the PD targets for one control step."""
    data.ctrl[:] = task.default_pose + action * task.action_scale
    for _ in range(task.n_substeps):
        mujoco.mj_step(task.model, data)


def fallen(task: NativeTask, data: Any) -> bool:
    """The env's termination: the trunk's up-vector points below the horizon."""
    return bool(sensor(task, data, "upvector")[-1] < 0.0)


def command_frame(model: Any) -> np.ndarray | None:
    """The rotation `[3, 3]` from the floating base's frame to the frame a joystick task's commands
    are given in: that of the site of its `local_linvel` sensor, the velocity its tracking reward
    reads. None where the two agree (Go1, Spot, the humanoids) or the task has no such sensor.
    Barkour's IMU faces backwards: in the base's own frame its forward command is -x."""
    names = [model.sensor(i).name for i in range(model.nsensor)]
    found = [i for i, name in enumerate(names) if name == "local_linvel"]
    if not found or int(model.sensor_objtype[found[0]]) != int(mujoco.mjtObj.mjOBJ_SITE):
        return None
    site = int(model.sensor_objid[found[0]])
    if int(model.site_bodyid[site]) != int(model.jnt_bodyid[0]):
        return None  # a site on another body: its orientation to the base changes with the pose
    rot = np.zeros(9)
    mujoco.mju_quat2Mat(rot, np.asarray(model.site_quat[site], np.float64))
    rot = rot.reshape(3, 3)
    return None if np.allclose(rot, np.eye(3), atol=1e-6) else rot


def base_velocity(data: Any, frame: np.ndarray | None = None) -> np.ndarray:
    """(vx, vy, yaw rate) of the base in the commands' frame (`command_frame`; None: the base's
    own), as strl_jax's locomotion probe measures."""
    rot = np.zeros(9)
    mujoco.mju_quat2Mat(rot, data.qpos[3:7])
    local = rot.reshape(3, 3).T @ np.array(data.qvel[0:3])
    angular = np.array(data.qvel[3:6])  # a free joint's angular velocity is in the body's frame
    if frame is not None:
        local, angular = frame.T @ local, frame.T @ angular
    return np.array([local[0], local[1], angular[2]])


# ---- reward ----------------------------------------------------------------------------------
def reward_terms(
    task: NativeTask,
    data: Any,
    action: np.ndarray,
    book: Bookkeeping,
    done: bool,
    first_contact: np.ndarray,
    contact: np.ndarray,
) -> dict[str, float]:
    """Every unscaled term of the env's `_get_reward`, from native state."""
    cmd = book.command
    cmd_norm = np.linalg.norm(cmd)
    moving = float(cmd_norm > 0.01)
    local_vel = sensor(task, data, "local_linvel")
    gyro = sensor(task, data, "gyro")
    global_vel = sensor(task, data, "global_linvel")
    global_ang = sensor(task, data, "global_angvel")
    up = sensor(task, data, "upvector")
    joints = np.array(data.qpos[7:])
    force = np.array(data.actuator_force)
    feet_vel_xy = data.sensordata[task.feet_linvel_adr][:, :2]
    feet_z = data.site_xpos[task.feet_sites][:, 2]
    beyond = -np.clip(joints - task.soft_lowers, None, 0.0) + np.clip(joints - task.soft_uppers, 0.0, None)
    sigma = task.tracking_sigma
    return {
        "tracking_lin_vel": float(np.exp(-np.sum(np.square(cmd[:2] - local_vel[:2])) / sigma)),
        "tracking_ang_vel": float(np.exp(-np.square(cmd[2] - gyro[2]) / sigma)),
        "lin_vel_z": float(np.square(global_vel[2])),
        "ang_vel_xy": float(np.sum(np.square(global_ang[:2]))),
        "orientation": float(np.sum(np.square(up[:2]))),
        "stand_still": float(np.sum(np.abs(joints - task.default_pose)) * (cmd_norm < 0.01)),
        "termination": float(done),
        "pose": float(np.exp(-np.sum(np.square(joints - task.default_pose) * POSE_WEIGHT))),
        "torques": float(np.sqrt(np.sum(np.square(force))) + np.sum(np.abs(force))),
        "action_rate": float(np.sum(np.square(action - book.last_act))),
        "energy": float(np.sum(np.abs(data.qvel[6:]) * np.abs(force))),
        "feet_slip": float(np.sum(np.sum(np.square(feet_vel_xy), axis=-1) * contact) * moving),
        "feet_clearance": float(
            np.sum(np.abs(feet_z - task.max_foot_height) * np.sqrt(np.linalg.norm(feet_vel_xy, axis=-1)))
        ),
        "feet_height": float(
            np.sum(np.square(book.swing_peak / task.max_foot_height - 1.0) * first_contact) * moving
        ),
        "feet_air_time": float(np.sum((book.feet_air_time - 0.1) * first_contact) * moving),
        "dof_pos_limits": float(np.sum(beyond)),
    }


@dataclasses.dataclass(frozen=True)
class StepOutcome:
    """What one native control step produced."""

    obs: dict[str, np.ndarray]  # components of the observation reached
    reward: float
    terms: dict[str, float]  # scaled reward terms
    fell: bool


def step(task: NativeTask, data: Any, book: Bookkeeping, action: np.ndarray) -> StepOutcome:
    """One control step in the env's order: physics, contacts, observation, termination, reward,
    then the bookkeeping update (`book` changes in place; the command is the caller's)."""
    action = executed_action(task, action)
    apply_action(task, data, action)
    contact = data.sensordata[task.feet_contact_adr] > 0
    first_contact = (book.feet_air_time > 0.0) * (contact | book.last_contact)
    book.feet_air_time = book.feet_air_time + task.dt
    book.swing_peak = np.maximum(book.swing_peak, data.site_xpos[task.feet_sites][:, 2])
    obs = observation_components(task, data, book)
    done = fallen(task, data)
    raw = reward_terms(task, data, action, book, done, first_contact, contact)
    terms = {k: v * task.reward_scales[k] for k, v in raw.items()}
    reward = float(np.clip(sum(terms.values()) * task.dt, 0.0, 10000.0))
    book.last_last_act = book.last_act
    book.last_act = action
    book.feet_air_time = book.feet_air_time * ~contact
    book.last_contact = contact
    book.swing_peak = book.swing_peak * ~contact
    added = any(bool(ends(data.qpos)) for ends in task.terminations)  # after the task's reward
    return StepOutcome(obs=obs, reward=reward, terms=terms, fell=done or added)
