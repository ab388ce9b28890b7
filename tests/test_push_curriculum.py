"""`env.push_curriculum` (strl_jax.envs.push_curriculum): the training envs kick their robots as
the task does, scaled by a level per env that rises at each push the robot stands to receive and
drops at each fall, carried from one episode to the next; the run's evaluation pushes as the task
does; the level is logged and resumes exactly; a task that does not push is refused by name.

On `tests/user_envs/pushed_block.py` (Playground's humanoid push on a floating block, no gravity or
contacts: a step's velocity change is the kick) and on T1, a humanoid of Playground's.
"""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from extras import require_playground
from resumed_runs import rows_after_resume

require_playground()

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # the entry point names `tests.user_envs.*` from the repository root
    sys.path.insert(0, str(ROOT))

from strl_jax.configs.loader import resolve_config  # noqa: E402
from strl_jax.envs.push_curriculum import LEVEL, PushCurriculum  # noqa: E402
from strl_jax.runners.programs import evaluation_env, training_env  # noqa: E402
from strl_jax.train import main as train_main  # noqa: E402

BLOCK = "tests.user_envs.pushed_block:PushedBlock"
KICK = 0.4  # the block's push_config.magnitude_range, both ends
UP, DOWN = 0.25, 0.5
STEPS = 80
SMALL = [
    "env.num_envs=4",
    "env.episode_length=32",
    "policy.actor_hidden_dims=[8]",
    "policy.critic_hidden_dims=[8]",
    "runner.num_steps_per_env=8",
    "algorithm.num_mini_batches=2",
    "algorithm.num_learning_epochs=1",
    "runner.eval_interval=0",
    "runner.save_interval=2",
    "runner.print_interval=1000",
]


def block_config(*overrides: str):
    curriculum = f"env.push_curriculum={{start: 0.0, up: {UP}, down: {DOWN}}}"
    return resolve_config(
        BLOCK, overrides=["env.num_envs=16", "env.episode_length=24", curriculum, *overrides]
    )


def planar_velocity(obs: dict) -> np.ndarray:
    return np.asarray(obs["policy"])[..., :2]


def rollout(env, steps: int) -> dict:
    """Zero actions for `steps` steps: each step's incoming info, its result and the next state's
    info, stacked over steps."""
    state, obs = env.reset(jax.random.PRNGKey(3))

    def body(carry, _):
        state, obs = carry
        before = state.brax_state.info
        nxt, result = env.step(state, jnp.zeros((env.num_envs, env.action_size)))
        if env.auto_reset == "pool":
            nxt = env.refresh_pool(nxt)
        seen = {"obs": obs, "before": before, "result": result, "after": nxt.brax_state.info}
        return (nxt, result.obs), seen

    _, out = jax.jit(lambda s, o: jax.lax.scan(body, (s, o), None, length=steps))(state, obs)
    return jax.device_get(out)


@pytest.mark.parametrize("auto_reset", ["pool", "in_step"])
def test_levels_rise_at_pushes_drop_at_falls_and_carry_into_the_next_episode(auto_reset):
    env = training_env(block_config(f"env.auto_reset={auto_reset}"))
    assert isinstance(env.env, PushCurriculum) and env.carried_info == (LEVEL,)
    out = rollout(env, STEPS)
    before, after, result = out["before"], out["after"], out["result"]
    at_push = (np.mod(before["push_step"] + 1, before["push_interval_steps"]) == 0).astype(np.float32)
    fell = result.terminated.astype(np.float32)
    expected = np.clip(before[LEVEL] + UP * at_push - DOWN * fell, 0.0, 1.0)
    np.testing.assert_allclose(after[LEVEL], expected, atol=1e-6)
    # the kick: the task's push (direction drawn, magnitude KICK) times the level it was pushed at
    kick = np.linalg.norm(planar_velocity(result.final_obs) - planar_velocity(out["obs"]), axis=-1)
    np.testing.assert_allclose(kick, KICK * before[LEVEL] * at_push, atol=1e-5)
    finished = result.terminated | result.truncated
    assert np.all(after["push_step"][finished] == 0)  # a new episode, the level carried into it
    # every branch taken: pushes at level 0 and above, falls, time-outs, levels carried above 0
    assert at_push.sum() > 50 and ((at_push > 0) & (before[LEVEL] > 0)).sum() > 20
    assert result.terminated.sum() >= 5 and result.truncated.sum() >= 5
    assert (after[LEVEL][finished] > 0).sum() >= 5


def test_the_evaluation_pushes_as_the_task_does():
    cfg = block_config()
    env = evaluation_env(training_env(cfg), cfg)
    assert not isinstance(env.env, PushCurriculum) and env.carried_info == ()
    out = rollout(env, 12)
    before = out["before"]
    at_push = np.mod(before["push_step"] + 1, before["push_interval_steps"]) == 0
    kick = np.linalg.norm(planar_velocity(out["result"].final_obs) - planar_velocity(out["obs"]), axis=-1)
    first_episode = np.cumsum(out["result"].terminated | out["result"].truncated, axis=0) == 0
    np.testing.assert_allclose(kick[first_episode], (KICK * at_push)[first_episode], atol=1e-5)
    assert at_push[first_episode].sum() >= 16


def test_a_run_logs_the_level_and_resumes_it_exactly(tmp_path):
    curriculum = f"env.push_curriculum={{up: {UP}, down: {DOWN}}}"
    args = ["--task", BLOCK, "--quiet", *SMALL, curriculum]
    rows = rows_after_resume(args, tmp_path)
    levels = [r["episode/push_level"] for r in rows if "episode/push_level" in r]
    assert levels and max(levels) > 0  # finished episodes were pushed above the start level


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ["--task", "tests.user_envs.slider:Slider"],
            "task 'tests.user_envs.slider:Slider' does not push its robot",
        ),
        (["--task", "inverted_pendulum"], "not of Brax task 'inverted_pendulum'"),
        (
            ["--task", BLOCK, "env.playground={push_config.enable: false}"],
            "runs with its pushes off",
        ),
        (["--task", BLOCK, "env.push_curriculum={upp: 0.1}"], "unknown env.push_curriculum key 'upp'"),
        (["--task", BLOCK, "env.push_curriculum={start: 2.0}"], "env.push_curriculum.start must be a level"),
        (
            ["--task", BLOCK, "env.push_curriculum={down: -1}"],
            "env.push_curriculum.down must be a number >= 0",
        ),
    ],
)
def test_bad_settings_are_refused_by_name(overrides, message, tmp_path, capsys):
    argv = [*overrides, "--quiet", *SMALL, "--log_dir", str(tmp_path)]
    if not any(o.startswith("env.push_curriculum") for o in overrides):
        argv.append("env.push_curriculum={up: 0.1}")
    assert train_main(argv) == 2
    err = capsys.readouterr().err
    assert message in err, err
    if "does not push" in message:
        assert "BerkeleyHumanoidJoystickFlatTerrain" in err


def test_playgrounds_humanoid_takes_the_curriculum():
    """T1's own state and config carry the push schedule the curriculum reads (traced only)."""
    cfg = resolve_config(
        "T1JoystickFlatTerrain", overrides=["env.num_envs=32", "env.push_curriculum={up: 0.1}"]
    )
    env = training_env(cfg)
    assert isinstance(env.env, PushCurriculum)
    state = jax.eval_shape(env.env.reset, jax.random.PRNGKey(0))
    stepped = jax.eval_shape(env.env.step, state, jnp.zeros(env.action_size))
    assert stepped.info[LEVEL].shape == () and stepped.metrics[LEVEL].dtype == jnp.float32
    assert env.env.quiet_config.push_config.enable is False and env.env.env._config.push_config.enable
