"""The GPU presets of the brax tasks (configs/<task>_gpu.yaml): brax's published PPO batch at 4096
envs, valid at their README CPU sizes, and exactly what bench/brax_presets.py writes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from learning_runs import gpu_preset_iteration, readme_cpu_overrides

from strl_jax.configs import available_presets, resolve_config

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import brax_presets  # noqa: E402
from vs_brax import BRAX_PUBLISHED  # noqa: E402

TASKS = brax_presets.TASKS


@pytest.mark.parametrize("task", TASKS)
def test_preset_is_brax_published_batch_at_gpu_size(task):
    pub = BRAX_PUBLISHED[task]
    cfg = resolve_config(f"{task}_gpu")
    assert f"{task}_gpu" in available_presets() and cfg.env.task == task
    assert cfg.env.num_envs >= 4096 and cfg.env.num_envs % pub["num_envs"] == 0
    # one iteration = one brax training step: same env steps, minibatch count and size, epochs
    steps = cfg.env.num_envs * cfg.runner.num_steps_per_env
    assert steps == pub["batch_size"] * pub["num_minibatches"] * pub["unroll_length"]
    assert cfg.runner.num_steps_per_env % pub["unroll_length"] == 0
    assert cfg.algorithm.num_mini_batches == pub["num_minibatches"]
    assert cfg.algorithm.num_learning_epochs == pub["num_updates_per_batch"]
    assert (cfg.algorithm.learning_rate, cfg.algorithm.entropy_coef) == (
        pub["learning_rate"],
        pub["entropy_cost"],
    )
    assert (cfg.algorithm.gamma, cfg.algorithm.reward_scale) == (pub["discounting"], pub["reward_scaling"])
    assert cfg.algorithm.schedule == "fixed" and cfg.runner.empirical_normalization
    budget = brax_presets.peer_settings(task)["num_timesteps"]
    assert (cfg.runner.max_iterations - 1) * steps < budget <= cfg.runner.max_iterations * steps
    assert cfg.env.backend == resolve_config(task).env.backend  # the CPU preset's physics

    small = resolve_config(f"{task}_gpu", overrides=readme_cpu_overrides(task))
    assert small.env.num_envs == 256 and small.runner.num_eval_envs == 16
    small_steps = small.env.num_envs * small.runner.num_steps_per_env
    assert 4e6 < small.runner.max_iterations * small_steps < 6e6


def test_presets_are_what_the_generator_writes():
    for task in TASKS:
        path = REPO / "configs" / f"{brax_presets.preset_name(task)}.yaml"
        assert path.read_text() == brax_presets.preset_text(task), task


def test_gpu_preset_settings_train_an_iteration_at_a_small_size(tmp_path):
    """hopper_gpu's learner settings at the README CPU size shrunk to 32 envs (one whole rollout
    per minibatch), on inverted_pendulum: a new hopper program would cost a minute or two of
    compilation (test_envs covers hopper). `learning_runs.gpu_preset_iteration`, also measured by
    bench/learning_spread.py (case `reward_scale`)."""
    cfg, row = gpu_preset_iteration(tmp_path)
    assert cfg.algorithm.max_grad_norm is None and cfg.algorithm.num_mini_batches == 32
    assert row["env_steps"] == 32 * cfg.runner.num_steps_per_env
    # brax's reward scaling (reward_scaling 10) reaches the value targets: the value loss is 100x
    # the unscaled one. BENCHMARKS.md, Learning spread: reward scale: iteration 1, seeds 0-4,
    # 3925 / 4186 / 4287 (algorithm.reward_scale=1 instead: 39-44): margin 1925 to the worst.
    assert cfg.algorithm.reward_scale == 10
    assert 2000 < row["value_function"] < 8000


def test_learning_curves_give_both_libraries_the_same_budget_evaluations_and_seed():
    import learning_curves

    args = learning_curves.parse_args(
        ["--tasks", "hopper", "--num-timesteps", "400000", "--evals", "3", "--set", "env.num_envs=128"]
    )
    plan = learning_curves.plan_task("hopper", 2, args)
    peer, strl = plan["runs"]
    kw = peer["spec"]["kwargs"]
    assert peer["kind"] == "brax" and kw["seed"] == 2 and kw["num_timesteps"] == plan["budget"] >= 400_000
    assert plan["eval_steps"] * (kw["num_evals"] - 1) == plan["budget"]
    assert strl["spec"]["task"] == "hopper_gpu" and "seed=2" in strl["spec"]["overrides"]
    cfg = resolve_config("hopper_gpu", overrides=strl["spec"]["overrides"])
    per_iteration = cfg.env.num_envs * cfg.runner.num_steps_per_env
    assert cfg.env.num_envs == 128 and cfg.runner.eval_interval * per_iteration == plan["eval_steps"]
    assert cfg.runner.max_iterations * per_iteration == plan["budget"]
    assert peer["spec"]["backend"] == cfg.env.backend

    # the table: returns at the budget, steps and time to the peer's final return
    def record(kind, rewards):
        points = [
            {"env_steps": 100 * (i + 1), "wall_s": 10.0 * (i + 1), "reward": r} for i, r in enumerate(rewards)
        ]
        return {"kind": kind, "budget": 300, "curve": points, "result": {"sps": 1.0, "wall_s": 5.0}}

    rows = learning_curves.task_rows(
        "hopper", [record("brax", [1.0, 2.0, 5.0]), record("strl_jax", [1.0, 6.0, 7.0])]
    )
    assert [r[3] for r in rows] == ["5.00", "7.00"]
    assert rows[1][4].startswith("200 (1/1)") and rows[1][5] == "20.0 (1/1)"


def test_a_killed_run_keeps_the_evaluations_its_log_holds(tmp_path):
    import learning_curves

    log = tmp_path / "brax.log"
    log.write_text(
        'warning\n{"env_steps": 0, "time_s": 5.0, "reward": 1.0}\n'
        '{"env_steps": 10, "time_s": 9.0, "reward": 2.5, "walltime": 3.0}\n{"env_steps": 20, "ti\n'
    )
    assert learning_curves.recovered_evals("brax", {"log": str(log)}, None) == [
        {"env_steps": 10, "time_s": 9.0, "reward": 2.5}
    ]
    rows = [
        {"env_steps": 8, "wall_time": 4.0, "eval_reward": None},
        {"env_steps": 16, "wall_time": 7.0, "eval_reward": 3.0},
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"env_st')
    assert learning_curves.recovered_evals("strl_jax", {}, str(tmp_path)) == [
        {"env_steps": 16, "time_s": 7.0, "reward": 3.0}
    ]
