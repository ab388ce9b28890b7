"""A Playground-style MJX env that pushes its robot as Playground's humanoid tasks do: a floating
block kicked in the plane every `push_config.interval_range` seconds by a velocity drawn from
`push_config.magnitude_range` (the same `push_config` keys and `info` schedule as
mujoco_playground's berkeley_humanoid/joystick.py), which "falls" (terminates) once its planar
speed passes `fall_speed`. No gravity, contacts or constraints: the kicks are all that moves it,
so a step's velocity change is the kick exactly.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mujoco
from ml_collections import config_dict
from mujoco import mjx
from mujoco_playground._src import mjx_env

XML = """
<mujoco model="pushed_block">
  <option timestep="0.02" gravity="0 0 0"><flag contact="disable" constraint="disable"/></option>
  <worldbody>
    <body name="base"><freejoint/><geom type="box" size="0.1 0.1 0.1" mass="1"/></body>
    <body name="cart">
      <joint name="rail" type="slide" axis="1 0 0" damping="0.5"/>
      <geom type="box" size="0.05 0.05 0.05" mass="1"/>
    </body>
  </worldbody>
  <actuator><motor joint="rail" gear="1"/></actuator>
</mujoco>
"""


def default_config() -> config_dict.ConfigDict:
    return config_dict.create(
        ctrl_dt=0.02,
        sim_dt=0.02,
        impl="jax",
        fall_speed=1.0,
        push_config=config_dict.create(enable=True, interval_range=[0.1, 0.1], magnitude_range=[0.4, 0.4]),
    )


class PushedBlock(mjx_env.MjxEnv):
    """Stay slow: reward `-speed^2` in the plane; the pushes are the task's only disturbance."""

    xml = XML

    def __init__(self, config: config_dict.ConfigDict | None = None, config_overrides: dict | None = None):
        super().__init__(config or default_config(), config_overrides)
        self._mj_model = mujoco.MjModel.from_xml_string(self.xml)
        self._mj_model.opt.timestep = self.sim_dt
        self._mjx_model = mjx.put_model(self._mj_model, impl=self._config.impl)

    def observe(self, data: mjx.Data) -> jax.Array:
        return jnp.concatenate([data.qvel[:2], data.qpos[7:8]])

    def reset(self, rng: jax.Array) -> mjx_env.State:
        rng, interval_key = jax.random.split(rng)
        low, high = self._config.push_config.interval_range
        interval = jax.random.uniform(interval_key, minval=low, maxval=high)
        data = mjx_env.make_data(self.mj_model, impl=self.mjx_model.impl.value)
        data = mjx.forward(self.mjx_model, data)
        info = {
            "rng": rng,
            "push": jnp.zeros(2),
            "push_step": 0,
            "push_interval_steps": jnp.round(interval / self.dt).astype(jnp.int32),
        }
        zero = jnp.zeros(())
        return mjx_env.State(data, self.observe(data), zero, zero, {"speed": zero}, info)

    def step(self, state: mjx_env.State, action: jax.Array) -> mjx_env.State:
        # Playground's humanoid push, as written there (it writes into the state's info)
        state.info["rng"], angle_key, magnitude_key = jax.random.split(state.info["rng"], 3)
        angle = jax.random.uniform(angle_key, maxval=2 * jnp.pi)
        low, high = self._config.push_config.magnitude_range
        magnitude = jax.random.uniform(magnitude_key, minval=low, maxval=high)
        push = jnp.array([jnp.cos(angle), jnp.sin(angle)])
        push *= jnp.mod(state.info["push_step"] + 1, state.info["push_interval_steps"]) == 0
        push *= self._config.push_config.enable
        qvel = state.data.qvel.at[:2].set(push * magnitude + state.data.qvel[:2])
        data = mjx_env.step(self.mjx_model, state.data.replace(qvel=qvel), action, self.n_substeps)
        speed = jnp.linalg.norm(data.qvel[:2])
        done = (speed > self._config.fall_speed).astype(jnp.float32)
        state.info["push"] = push
        state.info["push_step"] += 1
        return state.replace(
            data=data, obs=self.observe(data), reward=-jnp.square(speed), done=done, metrics={"speed": speed}
        )

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
