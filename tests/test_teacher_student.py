"""End to end, small: train a PPO teacher that sees the whole state, then students whose actor
sees positions only (recurrent) learn from it with TPPO and with rsl_rl Distillation, through
the same runner, checkpoints and logging as `python -m strl_jax.train`."""

from __future__ import annotations

import json

import chex
import pytest
from learning_runs import PENDULUM_EPISODE, STUDENTS, student_cfg, teacher_return_on_student_env
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from strl_jax.runners.runner import build_programs, train


@pytest.fixture(scope="module")
def teacher(pendulum_expert):
    """`(checkpoint folder, deterministic return on the students' env)` of the pendulum expert."""
    path, _ = pendulum_expert
    return path, teacher_return_on_student_env(path)


@pytest.mark.parametrize("preset", sorted(STUDENTS))
def test_student_reaches_80_percent_of_the_teacher(teacher, preset, tmp_path):
    teacher_dir, teacher_return = teacher
    # BENCHMARKS.md, Learning spread: teacher: 200 / 200 / 200 over 6 runs: margin 20 to 180
    assert teacher_return >= 0.9 * PENDULUM_EPISODE, "the teacher itself did not learn"
    cfg = student_cfg(preset, teacher_dir)
    assert cfg.env.obs_groups["policy"] == [0, 1]  # no velocities for the student's actor
    result = train(cfg, tmp_path, verbose=False)
    # Its best evaluation (every 5 iterations): after the hand-over a TPPO student's deterministic
    # return swings between ~140 and 200 from one evaluation to the next with some seeds, but
    # every seed and rounding variant measured reached 200 by iteration 15 (BENCHMARKS.md, Learning
    # spread: students: TPPO 200 / 200 / 200 over 12 runs, Distillation 198 / 200 / 200 over 6:
    # margin 38 to 80% of the teacher's 200).
    best = max(r["eval_reward"] for r in result.rows if "eval_reward" in r)
    assert best >= 0.8 * teacher_return, (best, teacher_return)
    (part,) = build_programs(cfg).learner.parts
    chex.assert_trees_all_equal(
        result.train_state.parts["teacher"], part.teacher.initial_state
    )  # never updated

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
