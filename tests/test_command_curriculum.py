"""`env.command_curriculum` (strl_jax.envs.command_curriculum): the training envs draw their
commands as the task does, times a level per env that moves at each episode's start by the last
episode's record (up after a time-out with the tracking term at the threshold, down after any
other episode: a fall, or a time-out below the threshold)
and is carried from one episode to the next; the reward, the observation (every frame and key that
shows the command) and later draws see the scaled command; the evaluation commands as the task
does; the level is logged and resumes exactly; bad settings and tasks are refused by name.

On `tests/user_envs/commanded_point.py` (a point mass under Go1's rule for redrawing commands) and
on Op3 and Go1, joystick tasks of Playground's (traced only).
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
from strl_jax.envs.command_curriculum import (  # noqa: E402
    FELL,
    LEVEL,
    STEPS,
    TRACKED,
    CommandCurriculum,
)
from strl_jax.runners.programs import evaluation_env, training_env  # noqa: E402
from strl_jax.train import main as train_main  # noqa: E402

POINT = "tests.user_envs.commanded_point:CommandedPoint"
START, UP, DOWN, THRESHOLD = 0.3, 0.25, 0.2, 0.6
WEIGHT = 2.0  # the point's tracking_lin_vel weight
STEPS_RUN = 90
# where the point's observation shows the command: (key, first entry) of each 3-entry copy
SHOWN = (("state", 2), ("state", 7), ("privileged_state", 2))
SMALL = [
    "env.num_envs=4",
    "env.episode_length=16",
    "policy.actor_hidden_dims=[8]",
    "policy.critic_hidden_dims=[8]",
    "runner.num_steps_per_env=8",
    "algorithm.num_mini_batches=2",
    "algorithm.num_learning_epochs=1",
    "runner.eval_interval=0",
    "runner.save_interval=2",
    "runner.print_interval=1000",
]


def point_config(*overrides: str, curriculum: bool = True):
    setting = f"env.command_curriculum={{start: {START}, up: {UP}, down: {DOWN}, threshold: {THRESHOLD}}}"
    chosen = [setting] if curriculum else []
    return resolve_config(POINT, overrides=["env.num_envs=12", "env.episode_length=20", *chosen, *overrides])


def actions(num_envs: int) -> jnp.ndarray:
    """A fixed push per env: the first four envs speed up past the fall speed, the rest stay."""
    push = np.zeros((num_envs, 2), np.float32)
    push[:4] = [[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.7, 0.7]]
    return jnp.asarray(push)


def rollout(env, steps: int) -> dict:
    """Fixed actions for `steps` steps: each step's incoming observation, its result and the next
    state's info, stacked over steps."""
    state, obs = env.reset(jax.random.PRNGKey(3))
    push = actions(env.num_envs)

    def body(carry, _):
        state, obs = carry
        nxt, result = env.step(state, push)
        if env.auto_reset == "pool":
            nxt = env.refresh_pool(nxt)
        return (nxt, result.obs), {"obs": obs, "result": result, "after": nxt.brax_state.info}

    _, out = jax.jit(lambda s, o: jax.lax.scan(body, (s, o), None, length=steps))(state, obs)
    return jax.device_get(out)


def shown(obs: dict, key: str, first: int) -> np.ndarray:
    group = {"state": "policy", "privileged_state": "critic"}[key]
    return np.asarray(obs[group])[..., first : first + 3]


@pytest.mark.parametrize("auto_reset", ["pool", "in_step"])
def test_commands_are_the_tasks_times_a_level_that_moves_with_each_episodes_record(auto_reset):
    env = training_env(point_config(f"env.auto_reset={auto_reset}"))
    assert isinstance(env.env, CommandCurriculum)
    assert env.carried_info == (LEVEL, TRACKED, STEPS, FELL)
    own = training_env(point_config(f"env.auto_reset={auto_reset}", curriculum=False))
    out, task = rollout(env, STEPS_RUN), rollout(own, STEPS_RUN)
    result, task_result = out["result"], task["result"]
    # the same episodes (the actions do not read the observation), so the same draws
    np.testing.assert_array_equal(result.terminated, task_result.terminated)
    np.testing.assert_array_equal(result.truncated, task_result.truncated)
    level = result.metrics[LEVEL]  # the level of the episode each step belongs to
    # the reward tracked the task's command times the level, and so did every observation of it,
    # the first of each episode included (the task's reset built it from its unscaled draw)
    for name in ("tracked_vx", "tracked_vy"):
        np.testing.assert_allclose(result.metrics[name], task_result.metrics[name] * level, atol=1e-6)
    for key, first in SHOWN:
        np.testing.assert_allclose(
            shown(out["obs"], key, first), shown(task["obs"], key, first) * level[..., None], atol=1e-6
        )
    # the level moves at each episode's first step by the episode before: up after a time-out
    # that tracked at the threshold on average, down after any other (a fall, or a time-out below
    # the threshold), clipped to [0, 1]
    finished = result.terminated | result.truncated
    after = out["after"]
    record_level, tracked, steps, fell = (after[k] for k in (LEVEL, TRACKED, STEPS, FELL))
    good = (fell == 0) & (tracked >= THRESHOLD * steps)
    expected_next = np.clip(record_level + UP * good - DOWN * ~good, 0.0, 1.0)
    t, e = np.nonzero(finished[:-1])
    np.testing.assert_allclose(level[t + 1, e], expected_next[t, e], atol=1e-6)
    np.testing.assert_allclose(fell[t, e], result.terminated[t, e])
    # the record: the episode's mean of the tracking term (unweighted) and its length
    tracking = result.metrics["reward/tracking_lin_vel"] / WEIGHT
    lengths = np.zeros(env.num_envs)
    sums = np.zeros(env.num_envs)
    for step in range(STEPS_RUN):
        lengths += 1
        sums += tracking[step]
        done = finished[step]
        np.testing.assert_allclose(after[STEPS][step][done], lengths[done])
        np.testing.assert_allclose(after[TRACKED][step][done], sums[done], rtol=1e-5)
        lengths[done], sums[done] = 0, 0
    # within an episode the level holds; the first episodes are at the start level
    same_episode = ~finished[:-1]
    np.testing.assert_array_equal(level[1:][same_episode], level[:-1][same_episode])
    np.testing.assert_allclose(level[0], START)
    # every branch taken: steps up, steps down, levels clipped at 0, time-outs below the threshold
    moved = level[t + 1, e] - record_level[t, e]
    assert (moved > 0).sum() >= 5 and (moved < 0).sum() >= 5
    assert (level == 0).sum() > 0 and (good[t, e] == 0).sum() >= 5
    timed_out_below = result.truncated[t, e] & ~good[t, e]
    assert timed_out_below.sum() >= 2
    assert (moved[timed_out_below] < 0).sum() >= 1  # a time-out below the bar steps down


def test_the_evaluation_commands_as_the_task_does():
    cfg = point_config()
    env = evaluation_env(training_env(cfg), cfg)
    assert not isinstance(env.env, CommandCurriculum) and env.carried_info == ()
    own = point_config(curriculum=False)
    task = evaluation_env(training_env(own), own)
    out, expected = rollout(env, 12), rollout(task, 12)
    tracked, task_tracked = (r["result"].metrics["tracked_vx"] for r in (out, expected))
    np.testing.assert_array_equal(tracked, task_tracked)
    np.testing.assert_array_equal(out["obs"]["policy"], expected["obs"]["policy"])


def test_a_run_logs_the_level_and_resumes_it_exactly(tmp_path):
    curriculum = f"env.command_curriculum={{start: {START}, up: {UP}, threshold: {THRESHOLD}}}"
    args = ["--task", POINT, "--quiet", *SMALL, curriculum]
    rows = rows_after_resume(args, tmp_path)
    levels = [r["episode/command_level"] for r in rows if "episode/command_level" in r]
    assert levels and max(levels) > START  # finished episodes were commanded above the start level


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ["--task", "tests.user_envs.pushed_block:PushedBlock"],
            "which task 'tests.user_envs.pushed_block:PushedBlock' does not keep",
        ),
        (["--task", "inverted_pendulum"], "not of Brax task 'inverted_pendulum'"),
        (
            ["--task", POINT, "env.playground={reward_config.scales.tracking_lin_vel: 0.0}"],
            "weighs it 0",
        ),
        (
            ["--task", POINT, "env.command_curriculum={upp: 0.1}"],
            "unknown env.command_curriculum key 'upp'",
        ),
        (
            ["--task", POINT, "env.command_curriculum={start: 1.5}"],
            "env.command_curriculum.start must be a level",
        ),
        (
            ["--task", POINT, "env.command_curriculum={threshold: 2}"],
            "env.command_curriculum.threshold must be a fraction",
        ),
        (
            ["--task", POINT, 'env.obs_layout={state: [["frames", 10]], privileged_state: [["frame", 5]]}'],
            "shows no `command` component",
        ),
    ],
)
def test_bad_settings_are_refused_by_name(overrides, message, tmp_path, capsys):
    argv = [*overrides, "--quiet", *SMALL, "--log_dir", str(tmp_path)]
    if not any(o.startswith("env.command_curriculum") for o in overrides):
        argv.append("env.command_curriculum={up: 0.1}")
    assert train_main(argv) == 2
    err = capsys.readouterr().err
    assert message in err, err


@pytest.mark.parametrize(
    "task, entries",
    [
        # Op3 shows the command in each of its three stacked frames (49 entries each)
        ("Op3Joystick", {"state": [6, 7, 8, 55, 56, 57, 104, 105, 106]}),
        # Go1 at the end of its state and of the privileged copy of it
        ("Go1JoystickFlatTerrain", {"state": [45, 46, 47], "privileged_state": [45, 46, 47]}),
    ],
)
def test_playgrounds_joystick_tasks_take_the_curriculum(task, entries):
    """The registry layouts say where each task shows its command (traced only)."""
    cfg = resolve_config(task, overrides=["env.num_envs=32", "env.command_curriculum={up: 0.1}"])
    env = training_env(cfg)
    assert isinstance(env.env, CommandCurriculum)
    assert {k: v.tolist() for k, v in env.env.entries.items()} == entries
    state = jax.eval_shape(env.env.reset, jax.random.PRNGKey(0))
    stepped = jax.eval_shape(env.env.step, state, jnp.zeros(env.action_size))
    assert stepped.info[LEVEL].shape == () and stepped.metrics[LEVEL].dtype == jnp.float32
