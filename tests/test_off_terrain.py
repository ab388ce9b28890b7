"""A robot off a heightfield floor's edge has fallen (`env.off_terrain: fall`): outside the field's
rectangle in the field's own frame and below its lowest point, read alike from JAX and NumPy;
worlds without such an edge get no rule; the wrapped step ends the episode as a fall and C
MuJoCo's hand-written Go1 step does the same."""

from __future__ import annotations

import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from flax import struct

from strl_jax.envs.hfield_contacts import WithMujocoHfieldContacts
from strl_jax.envs.off_terrain import (
    WithOffTerrainFall,
    check_off_terrain,
    off_terrain_of,
    off_terrain_rule,
    with_off_terrain,
)
from strl_jax.errors import ConfigError

WORLD = """
<mujoco>
  <asset>
    <hfield name="bumps" nrow="4" ncol="5" size="2.0 1.0 0.3 0.1" elevation="{elevation}"/>
  </asset>
  <worldbody>
    {floor}
    <body name="base" pos="0 0 1">
      {joint}
      <geom type="sphere" size="0.05"/>
    </body>
  </worldbody>
</mujoco>
"""
FIELD = '<geom name="ground" type="hfield" hfield="bumps" pos="1.0 -0.5 0.2" euler="0 0 90"/>'
PLANE = '<geom name="plane" type="plane" size="0 0 1"/>'
# MuJoCo scales the elevations to [0, 1] of the field's 0.3 m: the lowest vertex is at the geom's z
ELEVATION = " ".join(f"{e:.3f}" for e in np.random.default_rng(0).uniform(0.2, 1.0, 20))
LOWEST = 0.2


def model(floor: str = FIELD, joint: str = "<freejoint/>") -> mujoco.MjModel:
    return mujoco.MjModel.from_xml_string(WORLD.format(elevation=ELEVATION, floor=floor, joint=joint))


def qpos(x: float, y: float, z: float) -> np.ndarray:
    return np.array([x, y, z, 1.0, 0.0, 0.0, 0.0])


def test_off_the_field_and_below_its_lowest_point_in_the_fields_own_frame():
    rule = off_terrain_rule(model())
    assert rule is not None and rule.lowest == pytest.approx(LOWEST, abs=1e-6)
    # The field is turned by 90 degrees: its 2 m radius runs along the world's y axis, its 1 m
    # radius along x, around (1.0, -0.5).
    cases = {
        (1.0, -0.5, 0.5): False,  # over the middle
        (1.0, 1.3, LOWEST - 0.1): False,  # 1.8 m along y: inside the turned field, sunk below it
        (2.2, -0.5, LOWEST - 0.1): True,  # 1.2 m along x: past its 1 m radius, below
        (2.2, -0.5, LOWEST + 0.1): False,  # past the rim but not yet below the field
        (1.0, 1.7, LOWEST - 0.01): True,  # 2.2 m along y, just below
        (-5.0, 4.0, -100.0): True,  # far off, falling
    }
    for (x, y, z), fallen in cases.items():
        assert bool(rule(qpos(x, y, z))) is fallen, (x, y, z)
        assert bool(rule(jnp.asarray(qpos(x, y, z), jnp.float32))) is fallen, (x, y, z)


def test_worlds_without_an_edge_have_no_rule():
    assert off_terrain_rule(model(floor=FIELD + PLANE)) is None  # a plane holds the robot past the field
    assert off_terrain_rule(model(floor=PLANE)) is None
    assert off_terrain_rule(model(joint='<joint type="slide" axis="1 0 0"/>')) is None  # no free base


class FakeEnv:
    """A stand-in MJX env: `step` moves the robot to `qpos` and reports the task's own `done`."""

    def __init__(self, mj_model, done: float = 0.0):
        self.mj_model, self.done = mj_model, done

    def reset(self, rng):
        return State(data=Data(qpos=jnp.asarray(qpos(1.0, -0.5, 0.5))), done=jnp.float32(0.0))

    def step(self, state, action):
        return state.replace(data=Data(qpos=jnp.asarray(action)), done=jnp.float32(self.done))


@struct.dataclass
class Data:
    qpos: jnp.ndarray


@struct.dataclass
class State:
    data: Data
    done: jnp.ndarray


def test_the_wrapped_step_ends_the_episode_off_the_field_and_continue_leaves_the_task_alone():
    env = FakeEnv(model())
    wrapped = with_off_terrain(env, "fall")
    assert isinstance(wrapped, WithOffTerrainFall) and wrapped.mj_model is env.mj_model
    state = wrapped.reset(None)
    assert float(wrapped.step(state, qpos(1.0, -0.5, 0.4)).done) == 0.0
    assert float(wrapped.step(state, qpos(2.5, -0.5, 0.0)).done) == 1.0
    assert (
        float(with_off_terrain(FakeEnv(model(), done=1.0), "fall").step(state, qpos(1.0, -0.5, 0.4)).done)
        == 1.0
    )
    assert with_off_terrain(env, "continue") is env
    assert with_off_terrain(FakeEnv(model(floor=PLANE)), "fall").__class__ is FakeEnv
    # native stepping finds the rule under other wrappers
    assert off_terrain_of(WithMujocoHfieldContacts(wrapped)) is wrapped.rule
    assert off_terrain_of(env) is None


def test_a_bad_setting_names_the_choices():
    assert check_off_terrain("fall") == "fall"
    with pytest.raises(ConfigError, match=r"env.off_terrain='stop'.*\['fall', 'continue'\]"):
        check_off_terrain("stop")
    with pytest.raises(ConfigError, match="env.off_terrain='stop'"):
        with_off_terrain(FakeEnv(model()), "stop")


def test_c_mujocos_go1_step_ends_the_episode_off_the_field():
    """The hand-written C MuJoCo step (`deploy --native hand`) of Go1's rough task: a robot placed
    upright past the field's edge and below it has fallen (the task's own up-vector test says it
    has not), over the field it has not; without the rule neither has."""
    from extras import require_playground

    require_playground()
    from mujoco_playground import registry

    from strl_jax.envs import native_mujoco as nm
    from strl_jax.envs.menagerie import use_offline_menagerie

    task_name = "Go1JoystickRoughTerrain"
    use_offline_menagerie(task_name)
    env = with_off_terrain(registry.load(task_name), "fall")
    task = nm.native_task(env, task_name, 8, None)
    assert task.terminations == (off_terrain_of(env),)
    data = mujoco.MjData(task.model)
    fell = {}
    for where, xyz in {"over": (0.0, 0.0, 0.35), "off": (10.6, 0.0, -0.3)}.items():
        for rule in ("fall", "continue"):
            mujoco.mj_resetData(task.model, data)
            data.qpos[:] = task.init_qpos
            data.qpos[:3] = xyz
            t = task if rule == "fall" else nm.dataclasses.replace(task, terminations=())
            book = nm.fresh_bookkeeping(np.zeros(3))
            fell[where, rule] = nm.step(t, data, book, np.zeros(12)).fell
            assert not nm.fallen(t, data)  # upright throughout
    assert fell == {
        ("over", "fall"): False,
        ("over", "continue"): False,
        ("off", "fall"): True,
        ("off", "continue"): False,
    }
