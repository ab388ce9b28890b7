"""The locomotion probe measures the base's velocity in the frame the task's commands are given
in: that of the site its tracking reward reads (`local_linvel`). Barkour's IMU faces backwards, so
in the base's own frame its forward command is -x; measured there, a Barkour that walks as told
scored a velocity RMS error twice its command."""

from __future__ import annotations

import types

import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from extras import require_playground

require_playground()

from mujoco_playground import registry  # noqa: E402

from strl_jax.envs import native_mujoco as nm  # noqa: E402
from strl_jax.envs.menagerie import use_offline_menagerie  # noqa: E402
from strl_jax.envs.playground_env import LocomotionProbe  # noqa: E402


def model_of(task: str):
    use_offline_menagerie(task)
    return registry.load(task).mj_model


@pytest.fixture(scope="module")
def barkour():
    return model_of("BarkourJoystick")


def moving(model, world_linear, body_angular, yaw: float = 0.0):
    """MjData at the home pose turned by `yaw` about z, the base moving as given."""
    data = mujoco.MjData(model)
    if model.nkey:
        mujoco.mj_resetDataKeyframe(model, data, 0)
    data.qpos[3:7] = [np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2)]
    data.qvel[0:3], data.qvel[3:6] = world_linear, body_angular
    mujoco.mj_forward(model, data)
    return data


def test_barkours_commands_are_in_its_backward_facing_imus_frame(barkour):
    np.testing.assert_allclose(nm.command_frame(barkour), np.diag([-1.0, -1.0, 1.0]), atol=1e-6)
    frame = nm.command_frame(barkour)
    # moving along the IMU's forward axis (world -x at yaw 0) at 0.8 m/s, turning left at 0.3 rad/s
    data = moving(barkour, [-0.8, 0.0, 0.0], [0.0, 0.0, 0.3])
    np.testing.assert_allclose(nm.base_velocity(data, frame), [0.8, 0.0, 0.3], atol=1e-9)
    sensor = nm.sensor_indices(barkour, "local_linvel")
    # the sensor reads the IMU's point, ~1 cm from the base's origin: the turn adds omega x r there
    np.testing.assert_allclose(nm.base_velocity(data, frame)[:2], data.sensordata[sensor][:2], atol=0.005)
    # turned by 90 degrees: the IMU's forward axis is world -y
    data = moving(barkour, [0.0, -0.5, 0.0], [0.0, 0.0, -0.2], yaw=np.pi / 2)
    np.testing.assert_allclose(nm.base_velocity(data, frame), [0.5, 0.0, -0.2], atol=1e-9)


def test_the_jax_probe_measures_as_the_native_one(barkour):
    frame = nm.command_frame(barkour)
    data = moving(barkour, [-0.3, 0.4, 0.1], [0.05, -0.02, 0.7], yaw=0.4)
    env = types.SimpleNamespace(mjx_model=types.SimpleNamespace(body_mass=jnp.ones(3)))
    state = types.SimpleNamespace(
        data=types.SimpleNamespace(
            qpos=jnp.asarray(data.qpos), qvel=jnp.asarray(data.qvel), qfrc_actuator=jnp.zeros(barkour.nv)
        ),
        info={"command": jnp.asarray([0.5, 0.0, 0.2])},
    )
    probed = LocomotionProbe(env, frame)(state)["velocity"]
    np.testing.assert_allclose(np.asarray(probed), nm.base_velocity(data, frame), atol=1e-5)
    # without the frame: the base's own (Go1's and the humanoids' commands are in it)
    probed = LocomotionProbe(env)(state)["velocity"]
    np.testing.assert_allclose(np.asarray(probed), nm.base_velocity(data), atol=1e-5)
    assert abs(float(probed[0]) + nm.base_velocity(data, frame)[0]) < 1e-5


def test_go1s_commands_are_in_its_bases_frame():
    assert nm.command_frame(model_of("Go1JoystickFlatTerrain")) is None
