"""Sim-to-sim deployment (`strl_jax.deploy`): the native-MuJoCo twin of Go1JoystickFlatTerrain
observes and acts as the JAX env does, and the CLI runs an exported policy end to end."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from policy_runs import random_policy_run

from strl_jax.configs.loader import resolve_config
from strl_jax.deploy import main as deploy_main
from strl_jax.envs import native_mujoco as nm
from strl_jax.envs.tasks import make_env_from_config
from strl_jax.errors import ConfigError
from strl_jax.native_episodes import nominal_env_config

TASK = "Go1JoystickFlatTerrain"
TINY_NET = ["policy.actor_hidden_dims=[16]", "policy.critic_hidden_dims=[16]"]
# One control step (5 physics steps) from the same state: MJX and C MuJoCo agree to ~1e-5 in qvel
# while contacts persist; where a foot touches down or lifts off within the step the two solvers
# resolve it a little differently (up to ~1e-2 in qvel seen with random actions).
QPOS_TOL, QVEL_TOL = 1e-3, 5e-2


@pytest.fixture(scope="module")
def go1():
    """The nominal, noise-free JAX env, its native twin, and a state after a few random actions."""
    cfg = resolve_config(TASK, overrides=TINY_NET)
    env_cfg = nominal_env_config(cfg.env, episode_length=50)
    env = make_env_from_config(env_cfg, num_envs=1)
    playground = env.env
    task = nm.native_task(playground, TASK, env_cfg.episode_length, env_cfg.clip_actions)
    step = jax.jit(playground.step)
    state = jax.jit(playground.reset)(jax.random.PRNGKey(3))
    rng = np.random.default_rng(0)
    for _ in range(4):
        state = step(state, jnp.asarray(rng.uniform(-0.5, 0.5, 12), jnp.float32))
    return cfg, env, playground, task, step, state


def synced_data(task, state):
    """Native MjData holding the JAX state's physics (positions, velocities, controls, warm start)."""
    data = nm.reset_data(task, np.asarray(state.data.qpos), np.asarray(state.data.qvel))
    data.ctrl[:] = np.asarray(state.data.ctrl)
    data.qacc_warmstart[:] = np.asarray(state.data.qacc_warmstart)
    return data


def test_native_observation_equals_the_env_observation(go1):
    from mujoco import mjx

    _, env, playground, task, _, state = go1
    assert env.physics is None and task.model is playground.mj_model  # nominal physics, no randomiser
    # The env's noise-free observation of this physical state, with kinematics and sensors
    # recomputed from qpos/qvel (after a step they date from the last physics sub-step's start).
    data = jax.jit(mjx.forward)(playground.mjx_model, state.data)
    expected = jax.jit(lambda d, info: playground._get_obs(d, info)["state"])(data, dict(state.info))
    book = nm.fresh_bookkeeping(np.asarray(state.info["command"]))
    book.last_act = np.asarray(state.info["last_act"])
    native = synced_data(task, state)
    got = nm.assemble(nm.observation_components(task, native, book), list(env.components["policy"]))
    np.testing.assert_allclose(got, np.asarray(expected), atol=1e-4)


def test_native_step_reproduces_the_env_step(go1):
    _, env, _, task, step, state = go1
    layout = list(env.components["policy"])
    rng = np.random.default_rng(1)
    for _ in range(3):
        action = rng.uniform(-0.5, 0.5, 12)
        native = synced_data(task, state)
        book = nm.Bookkeeping(
            command=np.asarray(state.info["command"], np.float64),
            last_act=np.asarray(state.info["last_act"], np.float64),
            last_last_act=np.asarray(state.info["last_last_act"], np.float64),
            feet_air_time=np.asarray(state.info["feet_air_time"], np.float64),
            last_contact=np.asarray(state.info["last_contact"]),
            swing_peak=np.asarray(state.info["swing_peak"], np.float64),
        )
        out = nm.step(task, native, book, action)
        state = step(state, jnp.asarray(action, jnp.float32))
        np.testing.assert_allclose(native.qpos, np.asarray(state.data.qpos), atol=QPOS_TOL)
        np.testing.assert_allclose(native.qvel, np.asarray(state.data.qvel), atol=QVEL_TOL)
        np.testing.assert_allclose(
            nm.assemble(out.obs, layout), np.asarray(state.obs["state"]), atol=QVEL_TOL
        )
        assert out.fell == bool(state.done)
        for name, value in out.terms.items():
            assert value == pytest.approx(float(state.metrics[f"reward/{name}"]), rel=0.05, abs=0.02), name


def tiny_go1_run(go1, path):
    """A run folder holding one checkpoint of a random-weights Go1 policy (no training)."""
    cfg, env, *_ = go1
    return random_policy_run(cfg, env, path)


def test_deploy_cli_runs_an_exported_policy(go1, tmp_path, capsys):
    """The exported ONNX policy in native MuJoCo and the JAX policy in the JAX env, from the same
    initial states and commands: the same episode lengths and returns (8 steps: the two
    physics engines have not drifted apart yet)."""
    run = tiny_go1_run(go1, tmp_path / "run")
    argv = [str(run), "--episodes", "2", "--episode_length", "8", "--json", str(tmp_path / "m.json")]
    assert deploy_main(argv) == 0
    out = capsys.readouterr().out
    assert "native return" in out and "jax return" in out and (run / "exported" / "policy.onnx").exists()
    metrics = json.loads((tmp_path / "m.json").read_text())
    assert len(metrics["native"]) == len(metrics["jax"]) == 2
    for native, jax_side in zip(metrics["native"], metrics["jax"], strict=True):
        assert native["length"] == jax_side["length"] == 8 and native["fell"] == jax_side["fell"] == 0
        for key in ("return", "lin_vel_rms", "yaw_rate_rms"):  # seen: within 0.5%
            assert native[key] == pytest.approx(jax_side[key], rel=0.02), key
    assert metrics["jax"][0]["return"] != pytest.approx(metrics["jax"][1]["return"], rel=0.1)  # own commands
    assert deploy_main([str(run), "--episodes", "1", "--episode_length", "4", "--no-jax"]) == 0
    assert "jax return" not in capsys.readouterr().out


def test_unsupported_task_is_named():
    with pytest.raises(ConfigError, match="Go1JoystickFlatTerrain"):
        nm.require_supported("CartpoleBalance")
