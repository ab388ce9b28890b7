"""A Playground-style joystick env on a point mass: the command `(vx, vy, yaw rate)` lives in
`info["command"]` and is redrawn every `resample_steps` steps as Go1's joystick task redraws it
(each component kept or replaced by a fresh draw, `sample_command(rng, current)`); the reward
tracks it with Playground's term `tracking_lin_vel` (weighted, logged as
`reward/tracking_lin_vel`), and the robot "falls" (terminates) once its speed passes
`fall_speed`. The observation shows the command in the newest frame, one frame back
(`command_prev1`) and in the privileged state (`state_command`), laid out by `obs_layout`.

Contacts and constraints are off, so MJX's step stays small.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mujoco
from ml_collections import config_dict
from mujoco import mjx
from mujoco_playground._src import mjx_env

XML = """
<mujoco model="commanded_point">
  <option timestep="0.02"><flag contact="disable" constraint="disable"/></option>
  <worldbody>
    <body name="point">
      <joint name="x" type="slide" axis="1 0 0" damping="1"/>
      <joint name="y" type="slide" axis="0 1 0" damping="1"/>
      <geom type="sphere" size="0.05" mass="0.5"/>
    </body>
  </worldbody>
  <actuator><motor joint="x" gear="4"/><motor joint="y" gear="4"/></actuator>
</mujoco>
"""
FRAME = 2 + 3  # velocity, command


def default_config() -> config_dict.ConfigDict:
    return config_dict.create(
        ctrl_dt=0.02,
        sim_dt=0.02,
        impl="jax",
        resample_steps=6,
        fall_speed=1.0,
        command_range=[1.0, 0.6, 1.0],
        reward_config=config_dict.create(
            scales=config_dict.create(tracking_lin_vel=2.0), tracking_sigma=0.25
        ),
    )


class CommandedPoint(mjx_env.MjxEnv):
    """Follow the command's planar velocity; the command is redrawn as Go1's task redraws it."""

    def __init__(self, config: config_dict.ConfigDict | None = None, config_overrides: dict | None = None):
        super().__init__(config or default_config(), config_overrides)
        self._mj_model = mujoco.MjModel.from_xml_string(XML)
        self._mjx_model = mjx.put_model(self._mj_model, impl=self._config.impl)

    def obs_layout(self) -> dict:
        frame = [("velocity", 2), ("command", 3)]
        older = [("velocity_prev1", 2), ("command_prev1", 3)]
        return {"state": frame + older, "privileged_state": [("state_velocity", 2), ("state_command", 3)]}

    def sample_command(self, rng: jax.Array, current: jax.Array) -> jax.Array:
        draw_key, keep_key = jax.random.split(rng)
        span = jnp.asarray(self._config.command_range)
        drawn = jax.random.uniform(draw_key, (3,), minval=-span, maxval=span)
        return jnp.where(jax.random.bernoulli(keep_key, 0.5, (3,)), current, drawn)

    def observe(self, data: mjx.Data, command: jax.Array, previous: jax.Array) -> dict:
        frame = jnp.concatenate([data.qvel, command])
        return {
            "state": jnp.concatenate([frame, previous[:FRAME]]),
            "privileged_state": frame,
        }

    def reset(self, rng: jax.Array) -> mjx_env.State:
        rng, command_key = jax.random.split(rng)
        command = self.sample_command(command_key, jnp.zeros(3))
        data = mjx_env.make_data(self.mj_model, impl=self.mjx_model.impl.value)
        data = mjx.forward(self.mjx_model, data)
        info = {"rng": rng, "command": command, "steps": jnp.zeros((), jnp.int32)}
        zero = jnp.zeros(())
        metrics = {"reward/tracking_lin_vel": zero, "tracked_vx": zero, "tracked_vy": zero}
        return mjx_env.State(data, self.observe(data, command, jnp.zeros(FRAME)), zero, zero, metrics, info)

    def step(self, state: mjx_env.State, action: jax.Array) -> mjx_env.State:
        data = mjx_env.step(self.mjx_model, state.data, action, self.n_substeps)
        command = state.info["command"]
        error = jnp.sum(jnp.square(command[:2] - data.qvel))
        scale = self._config.reward_config.scales.tracking_lin_vel
        tracking = scale * jnp.exp(-error / self._config.reward_config.tracking_sigma)
        obs = self.observe(data, command, state.obs["state"])
        done = (jnp.linalg.norm(data.qvel) > self._config.fall_speed).astype(jnp.float32)
        # as Go1's task: the next command is drawn after the observation and the reward
        steps = state.info["steps"] + 1
        state.info["rng"], command_key = jax.random.split(state.info["rng"])
        redraw = jnp.mod(steps, self._config.resample_steps) == 0
        state.info["command"] = jnp.where(redraw, self.sample_command(command_key, command), command)
        state.info["steps"] = steps
        metrics = {"reward/tracking_lin_vel": tracking, "tracked_vx": command[0], "tracked_vy": command[1]}
        return state.replace(data=data, obs=obs, reward=tracking * self.dt, done=done, metrics=metrics)

    @property
    def xml_path(self) -> str:
        return ""

    @property
    def action_size(self) -> int:
        return self._mj_model.nu

    @property
    def mj_model(self) -> mujoco.MjModel:
        return self._mj_model

    @property
    def mjx_model(self) -> mjx.Model:
        return self._mjx_model
