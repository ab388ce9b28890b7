"""A Playground-style MJX env on a tiny MJCF: a block on a rail pushed towards the origin.

Written the way MuJoCo Playground writes its tasks (`mujoco_playground._src.mjx_env.MjxEnv`, a
module-level `default_config()`), with an asymmetric observation `{state, privileged_state}` and
named components (`obs_layout`). Contacts and constraints are off, so MJX's step stays small.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import mujoco
from ml_collections import config_dict
from mujoco import mjx
from mujoco_playground._src import mjx_env

XML = """
<mujoco model="slider">
  <option timestep="0.02"><flag contact="disable" constraint="disable"/></option>
  <worldbody>
    <body name="block">
      <joint name="rail" type="slide" axis="1 0 0" damping="0.5"/>
      <geom type="box" size="0.1 0.1 0.1" mass="1"/>
    </body>
  </worldbody>
  <actuator><motor joint="rail" gear="2"/></actuator>
</mujoco>
"""


def default_config() -> config_dict.ConfigDict:
    return config_dict.create(ctrl_dt=0.04, sim_dt=0.02, impl="warp", start_range=0.5, action_scale=1.0)


class Slider(mjx_env.MjxEnv):
    """Keep the block at the origin: reward `-x^2`; `privileged_state` adds the rail's damping."""

    xml = XML

    def __init__(self, config: config_dict.ConfigDict | None = None, config_overrides: dict | None = None):
        super().__init__(config or default_config(), config_overrides)
        self._mj_model = mujoco.MjModel.from_xml_string(self.xml)
        self._mj_model.opt.timestep = self.sim_dt
        self._mjx_model = mjx.put_model(self._mj_model, impl=self._config.impl)

    def obs_layout(self) -> dict[str, list[tuple[str, int]]]:
        return {
            "state": [("dof_pos", 1), ("dof_vel", 1)],
            "privileged_state": [("state_dof_pos", 1), ("state_dof_vel", 1), ("dof_damping", 1)],
        }

    def observe(self, data: mjx.Data) -> dict[str, jax.Array]:
        state = jnp.concatenate([data.qpos[:1], data.qvel[:1]])
        damping = self.mjx_model.dof_damping[:1]
        return {"state": state, "privileged_state": jnp.concatenate([state, damping])}

    def reset(self, rng: jax.Array) -> mjx_env.State:
        span = self._config.start_range
        qpos = jax.random.uniform(rng, (self.mj_model.nq,), minval=-span, maxval=span)
        data = mjx_env.make_data(self.mj_model, qpos=qpos, impl=self.mjx_model.impl.value)
        data = mjx.forward(self.mjx_model, data)
        zero = jnp.zeros(())
        return mjx_env.State(data, self.observe(data), zero, zero, {"position": zero}, {"rng": rng})

    def step(self, state: mjx_env.State, action: jax.Array) -> mjx_env.State:
        data = mjx_env.step(self.mjx_model, state.data, action * self._config.action_scale, self.n_substeps)
        reward = -jnp.square(data.qpos[0])
        done = (jnp.abs(data.qpos[0]) > 5.0).astype(jnp.float32)
        metrics = {"position": data.qpos[0]}
        return state.replace(data=data, obs=self.observe(data), reward=reward, done=done, metrics=metrics)

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


def make_slider(config: config_dict.ConfigDict, config_overrides: dict | None = None) -> Slider:
    """A factory entry point: finds this module's `default_config()` like the class does."""
    return Slider(config, config_overrides)


def randomize_damping(model: mjx.Model, rng: jax.Array) -> tuple[mjx.Model, Any]:
    """Playground's randomiser signature: each env's rail damping drawn from U(0.2, 2)."""
    damping = jax.vmap(
        lambda key: model.dof_damping.at[0].set(jax.random.uniform(key, (), minval=0.2, maxval=2.0))
    )(rng)
    in_axes = jax.tree_util.tree_map(lambda _: None, model)
    in_axes = in_axes.tree_replace({"dof_damping": 0})
    return model.tree_replace({"dof_damping": damping}), in_axes
