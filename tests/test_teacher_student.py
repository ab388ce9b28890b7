"""End to end, small: train a PPO teacher that sees the whole state, then students whose actor
sees positions only (recurrent) learn from it with TPPO and with rsl_rl Distillation, through
the same runner, checkpoints and logging as `python -m strl_jax.train`."""

from __future__ import annotations

import json

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from strl_jax.configs import resolve_config
from strl_jax.train_loops.runner import train

EPISODE = 200
COMMON = [
    f"env.episode_length={EPISODE}",
    "env.num_envs=128",
    "runner.num_eval_envs=16",
    "runner.save_interval=0",
    "runner.print_interval=1000",
]
TEACHER = [*COMMON, "runner.num_steps_per_env=16", "runner.max_iterations=40", "runner.eval_interval=40"]
STUDENT = [
    *COMMON,
    "runner.num_steps_per_env=24",
    "policy.rnn_hidden_size=32",
    "policy.actor_hidden_dims=[32]",
    "policy.critic_hidden_dims=[32]",
    "runner.max_iterations=25",
    "runner.eval_interval=25",
]
STUDENTS = {
    # episodes end (and masks are redrawn) every ~8 iterations: a short schedule hands over sooner
    "inverted_pendulum_student_tppo": ["algorithm.update_times_scale=5"],
    "inverted_pendulum_student_distillation": [],
}


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    """`(run folder, deterministic eval return)` of a full-state PPO teacher."""
    path = tmp_path_factory.mktemp("teacher")
    result = train(resolve_config("inverted_pendulum_teacher", overrides=TEACHER), path, verbose=False)
    return path, result.last_eval_reward


@pytest.mark.parametrize("preset", sorted(STUDENTS))
def test_student_reaches_80_percent_of_the_teacher(teacher, preset, tmp_path):
    teacher_dir, teacher_return = teacher
    assert teacher_return >= 0.9 * EPISODE, "the teacher itself did not learn"
    cfg = resolve_config(
        preset,
        overrides=[*STUDENT, *STUDENTS[preset], f"algorithm.teacher_policy.checkpoint={teacher_dir}"],
    )
    assert cfg.env.obs_groups["policy"] == [0, 1]  # no velocities for the student's actor
    result = train(cfg, tmp_path, verbose=False)
    assert result.last_eval_reward >= 0.8 * teacher_return, (result.last_eval_reward, teacher_return)

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
