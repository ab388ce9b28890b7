"""MuJoCo Playground tasks: the task namespace, offline robot models, config overrides reaching
the env, observation groups, per-env domain randomisation and the locomotion evaluation.

Building a Playground env costs seconds (no compile); the tests that need compiled programs
share the Go1 training run of tests/test_playground_training.py's module or compile nothing.
"""

from __future__ import annotations

import dataclasses
import subprocess

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from extras import require_playground

require_playground()

from strl_jax.configs.loader import resolve_config  # noqa: E402
from strl_jax.envs import make_env_from_config, menagerie  # noqa: E402
from strl_jax.envs.vec_env import StepResult  # noqa: E402
from strl_jax.errors import ConfigError  # noqa: E402
from strl_jax.train_loops.evaluation import deterministic_episodes, locomotion_metrics  # noqa: E402


def build(task: str, *overrides: str):
    return make_env_from_config(resolve_config(task, overrides=["env.num_envs=32", *overrides]).env)


def test_unknown_task_lists_both_families():
    with pytest.raises(ConfigError) as err:
        resolve_config("Go2JoystickFlatTerrain")
    message = str(err.value)
    for name in ("ant", "hopper", "Go1JoystickFlatTerrain", "G1JoystickFlatTerrain", "CartpoleBalance"):
        assert name in message


@pytest.fixture
def no_network(monkeypatch):
    """Any attempt to run git (Playground's fallback is `git clone`) fails the test."""
    calls = []

    def refuse(*args, **kwargs):
        calls.append(args)
        raise AssertionError(f"a subprocess was started: {args}")

    monkeypatch.setattr(subprocess, "Popen", refuse)
    monkeypatch.setattr(subprocess, "run", refuse)
    return calls


def test_missing_model_names_the_extra_and_never_clones(tmp_path, monkeypatch, no_network):
    monkeypatch.setenv(menagerie.MENAGERIE_ENV_VAR, str(tmp_path))  # a folder without robots
    with pytest.raises(ConfigError) as err:
        build("Go1JoystickFlatTerrain")
    assert "unitree_go1" in str(err.value) and "strl_jax[playground]" in str(err.value)
    # Without the asset wheels (nothing to link) the same message, not a clone.
    monkeypatch.delenv(menagerie.MENAGERIE_ENV_VAR)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(menagerie, "wheel_robot_folders", dict)
    with pytest.raises(ConfigError, match=r"strl_jax\[playground\]"):
        build("G1JoystickFlatTerrain")
    from mujoco_playground._src import mjx_env

    mjx_env.ensure_menagerie_exists()  # Playground's own check: replaced, it starts nothing
    assert not no_network


def test_merged_folder_holds_both_wheels_with_licences(tmp_path, monkeypatch, no_network):
    monkeypatch.delenv(menagerie.MENAGERIE_ENV_VAR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    folder = menagerie.use_offline_menagerie("G1JoystickFlatTerrain")
    assert folder == tmp_path / "strl_jax" / "mujoco_menagerie"
    for robot in ("unitree_go1", "boston_dynamics_spot", "unitree_g1", "booster_t1", "berkeley_humanoid"):
        assert (folder / robot / "LICENSE").is_file(), robot
    from mujoco_playground._src import mjx_env

    assert str(mjx_env.MENAGERIE_PATH) == str(folder)
    menagerie.use_offline_menagerie("Go1JoystickFlatTerrain")  # idempotent: links already there


def test_observation_groups_follow_playground_keys():
    sizes = {
        "Go1JoystickFlatTerrain": (48, 123),
        "G1JoystickFlatTerrain": (103, 216),
        "T1JoystickFlatTerrain": (85, 180),
    }
    for task, (policy, critic) in sizes.items():
        env = build(task)
        assert env.observation_shapes() == {"policy": (policy,), "critic": (critic,)}, task
        for group, size in (("policy", policy), ("critic", critic)):
            if group in env.components:
                assert sum(n for _, n in env.components[group]) == size
    # One observation array: every group sees it.
    assert build("CartpoleBalance").observation_shapes() == {"policy": (5,), "critic": (5,)}
    # env.obs_groups re-assigns Playground keys (a symmetric actor-critic here).
    env = build("Go1JoystickFlatTerrain", "env.obs_groups={critic: state}")
    assert env.observation_shapes() == {"policy": (48,), "critic": (48,)}
    with pytest.raises(ConfigError, match="privileged_state"):
        build("Go1JoystickFlatTerrain", "env.obs_groups={critic: [height_map]}")


def test_playground_settings_reach_the_env():
    env = build("Go1JoystickFlatTerrain")
    assert env.env._config.impl == "jax"  # MJX's JAX implementation, not Playground's default warp
    env = build(
        "Go1JoystickFlatTerrain", "env.playground.impl=warp", "env.playground.reward_config.scales.pose=0.2"
    )
    assert env.env._config.impl == "warp"
    assert env.env._config.reward_config.scales.pose == 0.2
    with pytest.raises(ConfigError, match="reward_config.scales.pose"):
        build("Go1JoystickFlatTerrain", "env.playground.reward_config.scales.posture=0.2")
    with pytest.raises(ConfigError, match="does not fit"):
        build("Go1JoystickFlatTerrain", "env.playground.reward_config.scales.pose=[1, 2]")
    with pytest.raises(ConfigError, match="Playground tasks"):
        build("inverted_pendulum", "env.playground.impl=jax")


def test_domain_randomization_is_the_tasks_own_per_env():
    env = build("Go1JoystickFlatTerrain")
    assert set(env.physics.fields) >= {"body_mass", "geom_friction", "qpos0"}
    assert env.probe is not None  # a joystick task: velocity tracking is evaluated
    assert build("Go1JoystickFlatTerrain", "env.domain_randomization=false").physics is None
    assert build("CartpoleBalance").physics is None and build("CartpoleBalance").probe is None
    keys = jax.random.split(jax.random.PRNGKey(3), 3)
    fields = env.physics.init(keys)
    model, _ = env.physics.randomizer(env.env.mjx_model, keys)
    np.testing.assert_array_equal(fields["body_mass"], model.body_mass)
    assert fields["body_mass"].shape == (3, env.env.mjx_model.nbody)
    assert len({float(m) for m in fields["body_mass"][:, 1]}) == 3  # each env its own torso mass
    with env.physics.bound({k: v[1] for k, v in fields.items()}):
        np.testing.assert_array_equal(env.env.mjx_model.body_mass, fields["body_mass"][1])
    assert env.env.mjx_model.body_mass.shape == (env.env.mjx_model.nbody,)  # restored after


def test_locomotion_metrics_known_answer():
    t, n = 4, 2
    command = jnp.tile(jnp.asarray([1.0, 0.0, 0.5]), (t, n, 1))
    # env 0 tracks with an error of (0.3, 0, 0.4) -> |e| = 0.5 at every step; env 1 is exact
    velocity = command.at[:, 0].add(jnp.asarray([-0.3, 0.0, 0.4]))
    power = jnp.full((t, n), 20.0)
    weight = jnp.full((t, n), 100.0)
    alive = jnp.ones((t, n))
    out = locomotion_metrics(
        {"command": command, "velocity": velocity, "power": power, "weight": weight}, alive
    )
    # mean squared error over 8 steps: 4 x 0.25 / 8 = 0.125
    np.testing.assert_allclose(out["velrmsd"], np.sqrt(0.125), rtol=1e-6)
    # energy / (weight x distance): 8 x 20 / (100 x (4 x 0.7 + 4 x 1.0))
    np.testing.assert_allclose(out["CoT"], 160.0 / (100.0 * 6.8), rtol=1e-6)
    # steps after an episode's end (alive 0) do not count
    alive = alive.at[2:, 0].set(0.0)
    velocity = velocity.at[2:, 0].set(99.0)
    out = locomotion_metrics(
        {"command": command, "velocity": velocity, "power": power, "weight": weight}, alive
    )
    np.testing.assert_allclose(out["velrmsd"], np.sqrt(2 * 0.25 / 6), rtol=1e-6)
    np.testing.assert_allclose(out["CoT"], 120.0 / (100.0 * (2 * 0.7 + 4 * 1.0)), rtol=1e-6)


@dataclasses.dataclass(frozen=True)
class FallingEnv:
    """A joystick env stand-in: env i terminates after `ends[i]` steps (0: never), tracks its
    command with an error of norm 0.5 while alive and by 99 after its first episode ended."""

    ends: tuple[int, ...]
    episode_length: int

    @property
    def num_envs(self) -> int:
        return len(self.ends)

    def reset(self, key):
        return jnp.zeros(self.num_envs, jnp.int32), {"policy": jnp.zeros((self.num_envs, 1))}

    def step(self, t, action):
        t = t + 1
        ends = jnp.asarray(self.ends)
        ended = (ends > 0) & (t > ends)
        command = jnp.zeros((self.num_envs, 3))
        velocity = jnp.where(ended[:, None], 99.0, jnp.asarray([0.3, 0.0, 0.4]))
        probe = {"command": command, "velocity": velocity, "power": jnp.ones(self.num_envs)}
        obs = {"policy": jnp.zeros((self.num_envs, 1))}
        return t, StepResult(
            obs=obs,
            reward=jnp.ones(self.num_envs),
            terminated=t == ends,
            truncated=t == self.episode_length,
            final_obs=obs,
            metrics={},
            probe=probe | {"weight": jnp.ones(self.num_envs)},
        )


def test_deterministic_episodes_counts_falls():
    """Two of four envs end early (after 3 and 5 of 8 steps): falls 0.5, and the steps after a
    fall count in no metric; without early ends no falls."""

    def act(obs, hidden):
        return jnp.zeros_like(obs["policy"]), hidden

    def evaluate(env: FallingEnv) -> dict:
        return jax.jit(lambda k: deterministic_episodes(env, act, {}, k))(jax.random.PRNGKey(0))

    out = evaluate(FallingEnv(ends=(3, 0, 5, 0), episode_length=8))
    np.testing.assert_allclose(out["falls"], 0.5)
    np.testing.assert_allclose(out["episode_length"], (3 + 8 + 5 + 8) / 4)
    np.testing.assert_allclose(out["episode_reward"], (3 + 8 + 5 + 8) / 4)
    np.testing.assert_allclose(out["velrmsd"], 0.5, rtol=1e-6)
    assert float(evaluate(FallingEnv(ends=(0, 0), episode_length=8))["falls"]) == 0.0
