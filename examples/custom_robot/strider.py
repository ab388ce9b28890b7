"""Strider: a robot and a task of your own, trained by strl_jax through its entry point.

`strider.xml` models a small quadruped (a 2 kg body, four legs of a hip and a knee that both
pitch); `Strider` is its joystick task written as a MuJoCo Playground `MjxEnv` (the same shape as
Playground's Go1 joystick: `reset(key)` / `step(state, action)`, `mjx_env.step` for the physics, a
`state` observation for the policy and a `privileged_state` for the critic). Nothing here is
registered anywhere: `python -m strl_jax.train --task examples.custom_robot.strider:Strider`
imports it from the working folder.

What strl_jax reads from it:
- `default_config()` (module level): the task's settings; `env.playground.<key>=...` overrides
  them by name, as for Playground's own tasks.
- `obs_layout()`: the named components of each observation key, so that parts pick them by name
  (the estimator predicts `base_lin_vel` from the critic's view; `env.obs_components` selects).
  The names follow strl_jax's legged-robot vocabulary (`base_lin_vel`, `projected_gravity`, ...);
  `privileged_state` begins with a copy of `state`, named `state_<name>`.
- `info["command"]` (vx, vy, yaw rate) and a free-floating base: strl_jax then logs
  `Eval/velrmsd`, and `play --command` / `deploy --command` can hold a command.
- `randomize(model, keys)`: a domain randomiser with Playground's signature, named by
  `env.randomizer: examples.custom_robot.strider:randomize`.

The command: forward speed in [-0.6, 0.6] m/s and yaw rate in [-1, 1] rad/s (no sideways
command: the legs only pitch), resampled every `command_interval` steps, zero with probability
`zero_command_prob`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import mujoco
from ml_collections import config_dict
from mujoco import mjx
from mujoco_playground._src import mjx_env

XML_PATH = Path(__file__).with_name("strider.xml")
FEET = ("FL_foot", "FR_foot", "RL_foot", "RR_foot")
FOOT_RADIUS = 0.02


def default_config() -> config_dict.ConfigDict:
    return config_dict.create(
        ctrl_dt=0.02,
        sim_dt=0.004,
        episode_length=1000,
        action_scale=0.4,
        impl="jax",
        noise_config=config_dict.create(
            level=1.0,  # 0 turns the observation noise off
            scales=config_dict.create(joint_pos=0.02, joint_vel=1.0, gyro=0.1, gravity=0.03, linvel=0.1),
        ),
        reward_config=config_dict.create(
            scales=config_dict.create(
                tracking_lin_vel=1.5,
                tracking_ang_vel=0.8,
                lin_vel_z=-1.0,
                ang_vel_xy=-0.05,
                orientation=-5.0,
                torques=-1e-3,
                action_rate=-0.02,
                termination=-1.0,
            ),
            tracking_sigma=0.25,
        ),
        command_config=config_dict.create(
            max_forward=0.6, max_yaw_rate=1.0, command_interval=250, zero_command_prob=0.1
        ),
        fall_height=0.09,
    )


class Strider(mjx_env.MjxEnv):
    """Follow a forward-speed and yaw-rate command on flat ground."""

    def __init__(self, config: config_dict.ConfigDict | None = None, config_overrides: dict | None = None):
        super().__init__(default_config() if config is None else config, config_overrides)
        self._mj_model = mujoco.MjModel.from_xml_path(str(XML_PATH))
        self._mj_model.opt.timestep = self._config.sim_dt
        self._mjx_model = mjx.put_model(self._mj_model, impl=self._config.impl)
        home = self._mj_model.keyframe("home")
        self._init_q = jnp.asarray(home.qpos)
        self._default_pose = jnp.asarray(home.qpos[7:])
        self._lower, self._upper = (jnp.asarray(b) for b in self._mj_model.actuator_ctrlrange.T)
        self._imu = self._mj_model.site("imu").id
        self._feet = jnp.asarray([self._mj_model.site(name).id for name in FEET])

    # ---- what strl_jax reads ------------------------------------------------------------------
    def obs_layout(self) -> dict[str, list[tuple[str, int]]]:
        nu = self._mj_model.nu
        state = [
            ("base_lin_vel", 3),
            ("base_ang_vel", 3),
            ("projected_gravity", 3),
            ("dof_pos", nu),
            ("dof_vel", nu),
            ("last_action", nu),
            ("command", 3),
        ]
        privileged = [(f"state_{name}", size) for name, size in state] + [
            ("base_lin_vel", 3),
            ("base_ang_vel", 3),
            ("projected_gravity", 3),
            ("base_height", 1),
            ("feet_contact", len(FEET)),
            ("actuator_force", nu),
        ]
        return {"state": state, "privileged_state": privileged}

    # ---- the task ------------------------------------------------------------------------------
    def reset(self, rng: jax.Array) -> mjx_env.State:
        rng, yaw_key, joint_key, command_key = jax.random.split(rng, 4)
        yaw = jax.random.uniform(yaw_key, minval=-jnp.pi, maxval=jnp.pi)
        quat = jnp.array([jnp.cos(yaw / 2), 0.0, 0.0, jnp.sin(yaw / 2)])
        joints = self._default_pose + jax.random.uniform(
            joint_key, self._default_pose.shape, minval=-0.1, maxval=0.1
        )
        qpos = self._init_q.at[3:7].set(quat).at[7:].set(joints)
        data = mjx_env.make_data(self._mj_model, qpos=qpos, ctrl=joints, impl=self._mjx_model.impl.value)
        data = mjx.forward(self._mjx_model, data)
        info = {
            "rng": rng,
            "command": self.sample_command(command_key),
            "steps_since_command": jnp.int32(0),
            "last_act": jnp.zeros(self._mj_model.nu),
        }
        metrics = {f"reward/{k}": jnp.zeros(()) for k in self._config.reward_config.scales}
        obs = self._get_obs(data, info)
        return mjx_env.State(data, obs, jnp.zeros(()), jnp.zeros(()), metrics, info)

    def step(self, state: mjx_env.State, action: jax.Array) -> mjx_env.State:
        targets = jnp.clip(self._default_pose + action * self._config.action_scale, self._lower, self._upper)
        data = mjx_env.step(self._mjx_model, state.data, targets, self.n_substeps)
        info = dict(state.info)
        done = self._fallen(data)
        terms = self._reward_terms(data, action, info, done)
        scales = self._config.reward_config.scales
        rewards = {k: v * scales[k] for k, v in terms.items()}
        reward = sum(rewards.values()) * self.dt

        info["last_act"] = action
        info["rng"], command_key = jax.random.split(info["rng"])
        resample = info["steps_since_command"] + 1 >= self._config.command_config.command_interval
        info["command"] = jnp.where(resample, self.sample_command(command_key), info["command"])
        info["steps_since_command"] = jnp.where(resample, 0, info["steps_since_command"] + 1)
        obs = self._get_obs(data, info)
        metrics = {f"reward/{k}": v for k, v in rewards.items()}
        return state.replace(
            data=data, obs=obs, reward=reward, done=done.astype(reward.dtype), metrics=metrics, info=info
        )

    def sample_command(self, key: jax.Array) -> jax.Array:
        cfg = self._config.command_config
        speed_key, yaw_key, zero_key = jax.random.split(key, 3)
        forward = jax.random.uniform(speed_key, minval=-cfg.max_forward, maxval=cfg.max_forward)
        yaw_rate = jax.random.uniform(yaw_key, minval=-cfg.max_yaw_rate, maxval=cfg.max_yaw_rate)
        command = jnp.array([forward, 0.0, yaw_rate])
        return jnp.where(jax.random.uniform(zero_key) < cfg.zero_command_prob, 0.0, command)

    # ---- sensors ----------------------------------------------------------------------------------
    def _sensor(self, data: mjx.Data, name: str) -> jax.Array:
        return mjx_env.get_sensor_data(self._mj_model, data, name)

    def _gravity(self, data: mjx.Data) -> jax.Array:
        return data.site_xmat[self._imu].T @ jnp.array([0.0, 0.0, -1.0])

    def _feet_contact(self, data: mjx.Data) -> jax.Array:
        return (data.site_xpos[self._feet, 2] < FOOT_RADIUS + 0.005).astype(jnp.float32)

    def _fallen(self, data: mjx.Data) -> jax.Array:
        return (self._sensor(data, "upvector")[2] < 0.5) | (data.qpos[2] < self._config.fall_height)

    def _get_obs(self, data: mjx.Data, info: dict[str, Any]) -> dict[str, jax.Array]:
        scales = self._config.noise_config.scales
        clean = {
            "base_lin_vel": (self._sensor(data, "local_linvel"), scales.linvel),
            "base_ang_vel": (self._sensor(data, "gyro"), scales.gyro),
            "projected_gravity": (self._gravity(data), scales.gravity),
            "dof_pos": (data.qpos[7:] - self._default_pose, scales.joint_pos),
            "dof_vel": (data.qvel[6:], scales.joint_vel),
        }
        info["rng"], noise_key = jax.random.split(info["rng"])
        keys = jax.random.split(noise_key, len(clean))
        level = self._config.noise_config.level
        noisy = [
            value + level * scale * jax.random.uniform(k, value.shape, minval=-1.0, maxval=1.0)
            for k, (value, scale) in zip(keys, clean.values(), strict=True)
        ]
        state = jnp.concatenate([*noisy, info["last_act"], info["command"]])
        privileged = jnp.concatenate(
            [
                state,
                clean["base_lin_vel"][0],
                clean["base_ang_vel"][0],
                clean["projected_gravity"][0],
                data.qpos[2:3],
                self._feet_contact(data),
                data.actuator_force,
            ]
        )
        return {"state": state, "privileged_state": privileged}

    def _reward_terms(
        self, data: mjx.Data, action: jax.Array, info: dict, done: jax.Array
    ) -> dict[str, jax.Array]:
        sigma = self._config.reward_config.tracking_sigma
        command = info["command"]
        linvel = self._sensor(data, "local_linvel")
        gyro = self._sensor(data, "gyro")
        gravity = self._gravity(data)
        return {
            "tracking_lin_vel": jnp.exp(-jnp.sum((command[:2] - linvel[:2]) ** 2) / sigma),
            "tracking_ang_vel": jnp.exp(-((command[2] - gyro[2]) ** 2) / sigma),
            "lin_vel_z": linvel[2] ** 2,
            "ang_vel_xy": jnp.sum(gyro[:2] ** 2),
            "orientation": jnp.sum(gravity[:2] ** 2),
            "torques": jnp.sum(data.actuator_force**2),
            "action_rate": jnp.sum((action - info["last_act"]) ** 2),
            "termination": done.astype(jnp.float32),
        }

    # ---- MjxEnv's accessors ----------------------------------------------------------------------
    @property
    def xml_path(self) -> str:
        return str(XML_PATH)

    @property
    def action_size(self) -> int:
        return self._mj_model.nu

    @property
    def mj_model(self) -> mujoco.MjModel:
        return self._mj_model

    @property
    def mjx_model(self) -> mjx.Model:
        return self._mjx_model


def randomize(model: mjx.Model, keys: jax.Array) -> tuple[mjx.Model, Any]:
    """Per-env physics (Playground's randomiser signature): floor friction in [0.5, 1.2] and the
    body's mass scaled by [0.85, 1.2], one draw per key."""
    torso = 1  # body 0 is the world

    def draw(key: jax.Array) -> tuple[jax.Array, jax.Array]:
        friction_key, mass_key = jax.random.split(key)
        friction = model.geom_friction.at[0, 0].set(jax.random.uniform(friction_key, minval=0.5, maxval=1.2))
        mass = model.body_mass.at[torso].multiply(jax.random.uniform(mass_key, minval=0.85, maxval=1.2))
        return friction, mass

    friction, mass = jax.vmap(draw)(keys)
    in_axes = jax.tree_util.tree_map(lambda _: None, model)
    in_axes = in_axes.tree_replace({"geom_friction": 0, "body_mass": 0})
    return model.tree_replace({"geom_friction": friction, "body_mass": mass}), in_axes
