"""End to end, small: train a PPO teacher that sees the whole state, then students whose actor
sees positions only (recurrent) learn from it with TPPO and with rsl_rl Distillation, through
the same runner, checkpoints and logging as `python -m strl_jax.train`."""

from __future__ import annotations

import functools
import json

import chex
import jax
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from strl_jax.configs import resolve_config
from strl_jax.envs import make_env_from_config
from strl_jax.train_loops.runner import build_programs, train

EPISODE = 200
COMMON = [
    f"env.episode_length={EPISODE}",
    "env.num_envs=128",
    "runner.num_eval_envs=16",
    "runner.save_interval=0",
    "runner.print_interval=1000",
]
TEACHER = [
    *COMMON,
    # 30 iterations is a small budget: teachers of seeds 3-5 reach 200 by iteration 10-20, those
    # of seeds 1 and 6 may plateau near 140. The test is about the students.
    "seed=4",
    "runner.num_steps_per_env=16",
    "runner.normalizer_until=4e4",
    "runner.max_iterations=30",
    "runner.eval_interval=0",  # measured below, on the students' env
]
STUDENT = [
    *COMMON,
    "runner.num_steps_per_env=24",
    "policy.rnn_hidden_size=32",
    "policy.actor_hidden_dims=[32]",
    "policy.critic_hidden_dims=[32]",
    "runner.normalizer_until=4e4",
    "runner.max_iterations=25",
    "runner.eval_interval=25",
]
STUDENTS = {
    # episodes end (and masks are redrawn) every ~8 iterations: a short schedule hands over sooner
    "inverted_pendulum_student_tppo": ["algorithm.update_times_scale=5"],
    "inverted_pendulum_student_distillation": [],
}


def student_cfg(preset: str, teacher_dir, *overrides: str):
    return resolve_config(
        preset,
        overrides=[
            *STUDENT,
            *STUDENTS[preset],
            f"algorithm.teacher_policy.checkpoint={teacher_dir}",
            *overrides,
        ],
    )


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    """`(run folder, deterministic return on the students' env)` of a full-state PPO teacher."""
    path = tmp_path_factory.mktemp("teacher")
    train(resolve_config("inverted_pendulum_teacher", overrides=TEACHER), path, verbose=False)
    cfg = student_cfg("inverted_pendulum_student_tppo", path)
    learner = build_programs(cfg).learner
    evaluate = jax.jit(functools.partial(learner.evaluate_teacher, make_env_from_config(cfg.env, 16)))
    result = evaluate(learner.guidance.teacher.initial_state, jax.random.PRNGKey(7))
    return path, float(result["episode_reward"])


@pytest.mark.parametrize("preset", sorted(STUDENTS))
def test_student_reaches_80_percent_of_the_teacher(teacher, preset, tmp_path):
    teacher_dir, teacher_return = teacher
    assert teacher_return >= 0.9 * EPISODE, "the teacher itself did not learn"
    cfg = student_cfg(preset, teacher_dir)
    assert cfg.env.obs_groups["policy"] == [0, 1]  # no velocities for the student's actor
    result = train(cfg, tmp_path, verbose=False)
    assert result.last_eval_reward >= 0.8 * teacher_return, (result.last_eval_reward, teacher_return)
    loaded = build_programs(cfg).learner.guidance.teacher.initial_state
    chex.assert_trees_all_equal(result.train_state.teacher, loaded)  # never updated

    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert all("distillation" in r and "action_error" in r for r in rows)
    expected_tags = {"Loss/distillation", "Policy/action_error", "Eval/episode_reward"}
    if cfg.algorithm.class_name == "TPPO":
        assert rows[0]["teacher_act_prob"] == pytest.approx(1.0)
        assert rows[-1]["teacher_act_prob"] < 0.01
        expected_tags |= {"Train/teacher_act_prob", "Loss/surrogate"}
    else:
        assert "surrogate" not in rows[0]
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    assert expected_tags <= set(events.Tags()["scalars"])


@pytest.mark.parametrize("preset", sorted(STUDENTS))
def test_student_run_resumes_exactly(teacher, preset, tmp_path):
    """Teacher state and masks are part of the checkpoint: 3 + 3 iterations equal 6."""

    def cfg(iterations):
        return student_cfg(
            preset, teacher[0], "runner.save_interval=3", f"runner.max_iterations={iterations}"
        )

    keys = ("distillation", "action_error", "surrogate", "teacher_act_fraction", "mean_reward")
    whole = train(cfg(6), tmp_path / "whole", verbose=False)
    train(cfg(3), tmp_path / "parts", verbose=False)
    resumed = train(cfg(6), tmp_path / "parts", verbose=False, resume=True)
    assert [{k: r.get(k) for k in keys} for r in resumed.rows] == [
        {k: r.get(k) for k in keys} for r in whole.rows[3:]
    ]
