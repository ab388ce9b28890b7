"""An MJX user env whose ground is a heightfield geom named `ground` (for `env.height_scan`)."""

from __future__ import annotations

from tests.user_envs.slider import Slider, default_config  # noqa: F401 - the module's default config

XML = """
<mujoco model="terrain">
  <option timestep="0.02"><flag contact="disable" constraint="disable"/></option>
  <asset><hfield name="bumps" nrow="5" ncol="5" size="2 2 0.2 0.1"
    elevation="0 0 0 0 0  0 1 1 1 0  0 1 2 1 0  0 1 1 1 0  0 0 0 0 0"/></asset>
  <worldbody>
    <geom name="ground" type="hfield" hfield="bumps"/>
    <body name="block" pos="0 0 0.5">
      <joint name="rail" type="slide" axis="1 0 0" damping="0.5"/>
      <geom type="box" size="0.1 0.1 0.1" mass="1"/>
    </body>
  </worldbody>
  <actuator><motor joint="rail" gear="2"/></actuator>
</mujoco>
"""


class Terrain(Slider):
    """The slider over a bumpy heightfield."""

    xml = XML
