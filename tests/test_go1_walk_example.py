"""The shipped Go1 policy (`examples/go1_walk`) walks where it is told, in the JAX env and in C
MuJoCo: forward 1.0 m/s, sideways 0.5 m/s and turning 1.0 rad/s, each command held for 500 steps
(10 s) from the same starts on both sides. A change to the library that breaks loading a run,
acting, the held command, the env or its native twin fails here."""

from __future__ import annotations

import shutil
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from strl_jax.deploy import (
    CommandProcess,
    exported_onnx,
    jax_rollout,
    load_onnx_policy,
    native_episode,
    native_task_of,
    nominal_env_config,
)
from strl_jax.envs import native_mujoco as nm
from strl_jax.envs.tasks import make_env_from_config
from strl_jax.inference import load_policy

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "go1_walk"
COMMANDS = np.array([[1.0, 0.0, 0.0], [0.0, 0.5, 0.0], [0.0, 0.0, 1.0]], np.float32)
STEPS, ENVS = 500, 2
# mean velocity along the command (base frame: vx, vy or yaw rate) as a fraction of the command
MIN_FRACTION = 0.6


def along(velocity: np.ndarray, command: np.ndarray) -> float:
    """Mean of the commanded component of `velocity` (`[..., 3]`) over the command's size."""
    axis = int(np.argmax(np.abs(command)))
    return float(np.mean(velocity[..., axis]) / command[axis])


def probe(velocity: list[np.ndarray]):
    """A native frame callback that records the base's velocity (vx, vy, yaw rate) each step."""
    return lambda data: velocity.append(nm.base_velocity(data))


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    """The example run (copied: deploy may refresh its export) and its JAX rollouts, one compiled
    program for the three commands."""
    run = tmp_path_factory.mktemp("example") / "go1_walk"
    shutil.copytree(EXAMPLE, run)
    loaded = load_policy(run)
    env = make_env_from_config(nominal_env_config(loaded.cfg.env, STEPS), num_envs=ENVS)
    key = jax.random.PRNGKey(0)

    def rollout(command):
        return jax_rollout(env, loaded.actor, loaded.params, loaded.normalizers, key, command)

    steps = jax.device_get(jax.jit(jax.vmap(rollout))(jnp.asarray(COMMANDS)))
    return run, loaded, steps


def test_the_shipped_policy_follows_each_command_in_the_jax_env(shipped):
    _, loaded, steps = shipped
    assert loaded.cfg.env.task == "Go1JoystickFlatTerrain"
    for i, command in enumerate(COMMANDS):
        assert not np.asarray(steps["terminated"][i]).any(), f"command {command}: a fall in the JAX env"
        np.testing.assert_allclose(steps["command"][i], np.broadcast_to(command, steps["command"][i].shape))
        fraction = along(np.asarray(steps["velocity"][i]), command)
        assert fraction >= MIN_FRACTION, f"command {command}: {fraction:.2f} of it in the JAX env"


def test_the_shipped_policy_follows_each_command_in_c_mujoco(shipped):
    run, loaded, steps = shipped
    policy = load_onnx_policy(exported_onnx(run, loaded))
    task = native_task_of(loaded, STEPS)
    rng = np.random.default_rng(0)
    for i, command in enumerate(COMMANDS):
        for env in range(ENVS):
            velocity: list[np.ndarray] = []
            start = (np.asarray(steps["qpos"][i, env]), np.asarray(steps["qvel"][i, env]))
            process = CommandProcess(task, rng, fixed=command.astype(np.float64))
            out = native_episode(task, policy, start, process, probe(velocity))
            assert out["fell"] == 0.0 and out["length"] == STEPS, f"command {command}, env {env}: {out}"
            fraction = along(np.array(velocity), command)
            assert fraction >= MIN_FRACTION, f"command {command}, env {env}: {fraction:.2f} of it in C MuJoCo"
