"""A point mass on a plane pushed towards a target drawn at reset: a Playground-style MJX env whose
`default_config()` asks for 200-step episodes (a reach task's own episode length, not 1000).

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
<mujoco model="point_reach">
  <option timestep="0.02"><flag contact="disable" constraint="disable"/></option>
  <worldbody>
    <body name="point">
      <joint name="x" type="slide" axis="1 0 0" damping="1"/>
      <joint name="y" type="slide" axis="0 1 0" damping="1"/>
      <geom type="sphere" size="0.05" mass="0.5"/>
    </body>
  </worldbody>
  <actuator><motor joint="x"/><motor joint="y"/></actuator>
</mujoco>
"""
EPISODE_LENGTH = 200


def default_config() -> config_dict.ConfigDict:
    return config_dict.create(
        ctrl_dt=0.02, sim_dt=0.02, episode_length=EPISODE_LENGTH, impl="jax", target_range=0.5
    )


class PointReach(mjx_env.MjxEnv):
    """Reach a target on the plane: reward `-|target - position|`; episodes never fail, they time out."""

    def __init__(self, config: config_dict.ConfigDict | None = None, config_overrides: dict | None = None):
        super().__init__(config or default_config(), config_overrides)
        self._mj_model = mujoco.MjModel.from_xml_string(XML)
        self._mjx_model = mjx.put_model(self._mj_model, impl=self._config.impl)

    def observe(self, data: mjx.Data, target: jax.Array) -> jax.Array:
        return jnp.concatenate([data.qpos, data.qvel, target - data.qpos])

    def reset(self, rng: jax.Array) -> mjx_env.State:
        span = self._config.target_range
        target = jax.random.uniform(rng, (2,), minval=-span, maxval=span)
        data = mjx.forward(self.mjx_model, mjx_env.make_data(self.mj_model, impl=self.mjx_model.impl.value))
        zero = jnp.zeros(())
        return mjx_env.State(
            data, self.observe(data, target), zero, zero, {"distance": zero}, {"target": target}
        )

    def step(self, state: mjx_env.State, action: jax.Array) -> mjx_env.State:
        data = mjx_env.step(self.mjx_model, state.data, action, self.n_substeps)
        distance = jnp.linalg.norm(state.info["target"] - data.qpos)
        obs = self.observe(data, state.info["target"])
        return state.replace(data=data, obs=obs, reward=-distance, metrics={"distance": distance})

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
