"""The shipped Go1 policy (`examples/go1_walk`) tracks what it is told, in the JAX env and in C
MuJoCo: forward 1.0 m/s, sideways 0.5 m/s and turning 1.0 rad/s, each command held for 500 steps
(10 s) from the same starts on both sides, with per-episode RMS tracking errors (base frame,
`strl_jax.native_episodes.episode_metrics`) under limits measured on the shipped checkpoint. A change to the
library that breaks loading a run, acting, the held command, the env or its native twin fails here.

The limits: 16 starts per command (env keys 0 and 1, 8 envs each), 500 steps, both simulators;
worst episode (linear m/s, yaw rad/s) -> limit, about 1.25x the worst:
  forward 1 m/s:     lin 0.166 JAX / 0.171 native, yaw 0.072 / 0.076 -> 0.21, 0.10
  sideways 0.5 m/s:  lin 0.140 / 0.142,            yaw 0.188 / 0.185 -> 0.18, 0.24
  turning 1 rad/s:   lin 0.113 / 0.111,            yaw 0.197 / 0.197 -> 0.15, 0.25
(medians 0.115 / 0.134 / 0.102 linear, 0.067 / 0.170 / 0.154-0.165 yaw; no falls). A standing robot
scores 1.0, 0.5 and 1.0 on the commanded axis; one moving at 60% of the command, 0.4, 0.2, 0.4."""

from __future__ import annotations

import shutil
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from strl_jax.envs import native_mujoco as nm
from strl_jax.envs.tasks import make_env_from_config
from strl_jax.inference import load_policy
from strl_jax.native_episodes import (
    CommandProcess,
    episode_metrics,
    exported_onnx,
    jax_rollout,
    load_onnx_policy,
    native_episode,
    native_task_of,
    nominal_env_config,
)

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "go1_walk"
COMMANDS = np.array([[1.0, 0.0, 0.0], [0.0, 0.5, 0.0], [0.0, 0.0, 1.0]], np.float32)
STEPS, ENVS = 500, 2
# per command: the largest linear (vx, vy) and yaw-rate RMS tracking error of one episode
LIMITS = {(1.0, 0.0, 0.0): (0.21, 0.10), (0.0, 0.5, 0.0): (0.18, 0.24), (0.0, 0.0, 1.0): (0.15, 0.25)}


def tracking_errors(velocity: np.ndarray, command: np.ndarray) -> tuple[float, float]:
    """(linear, yaw-rate) RMS error of one episode's base velocity `[T, 3]` against `command`."""
    held = np.broadcast_to(command, velocity.shape)
    out = episode_metrics(np.zeros(len(velocity)), velocity, held, False)
    return out["lin_vel_rms"], out["yaw_rate_rms"]


def check_tracking(velocity: np.ndarray, command: np.ndarray, where: str) -> None:
    lin, yaw = tracking_errors(velocity, command)
    lin_limit, yaw_limit = LIMITS[tuple(float(c) for c in command)]
    assert lin <= lin_limit and yaw <= yaw_limit, (
        f"command {command} {where}: RMS error {lin:.3f} m/s (limit {lin_limit}), "
        f"{yaw:.3f} rad/s (limit {yaw_limit})"
    )


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


def test_the_shipped_policy_tracks_each_command_in_the_jax_env(shipped):
    _, loaded, steps = shipped
    assert loaded.cfg.env.task == "Go1JoystickFlatTerrain"
    for i, command in enumerate(COMMANDS):
        assert not np.asarray(steps["terminated"][i]).any(), f"command {command}: a fall in the JAX env"
        np.testing.assert_allclose(steps["command"][i], np.broadcast_to(command, steps["command"][i].shape))
        for env in range(ENVS):
            check_tracking(np.asarray(steps["velocity"][i][:, env]), command, f"env {env}, JAX")


def test_the_shipped_policy_tracks_each_command_in_c_mujoco(shipped):
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
            check_tracking(np.array(velocity), command, f"env {env}, C MuJoCo")
