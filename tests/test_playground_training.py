"""Go1JoystickFlatTerrain trained by strl_jax on the CPU at a small size: the run learns, its
Playground metrics and locomotion evaluation reach metrics.jsonl, each env keeps its own physics,
the iteration compiles once, a resumed run continues exactly, `play` writes a trajectory and
`collect` a dataset that two-stage pretraining reads.

One config (64 envs, 24 steps, [128, 128] networks) for every run here, so the compiled programs
are built once per process (about 3-4 minutes from an empty compilation cache on 2 cores).
"""

from __future__ import annotations

import json
from pathlib import Path

import jax
import numpy as np
import pytest
from extras import require_playground

require_playground()

from learning_runs import GO1_ITERATIONS as ITERATIONS  # noqa: E402
from learning_runs import GO1_SAVE_INTERVAL as K  # noqa: E402
from learning_runs import GO1_TASK as TASK  # noqa: E402
from learning_runs import go1_config, go1_flat_run  # noqa: E402
from test_checkpoint_resume import assert_trees_equal, without_time  # noqa: E402

from strl_jax.buffers.motion_files import read_metadata, trajectory_files  # noqa: E402
from strl_jax.buffers.rollout_dataset import load_dataset_arrays, pretrain_settings  # noqa: E402
from strl_jax.checkpoints.orbax_checkpoints import open_manager, restore_checkpoint  # noqa: E402
from strl_jax.collect import main as collect_main  # noqa: E402
from strl_jax.play import main as play_main  # noqa: E402
from strl_jax.runners.devices import local_copy  # noqa: E402
from strl_jax.runners.runner import build_programs, run_keys, train  # noqa: E402
from strl_jax.train import main as train_main  # noqa: E402


def read_rows(log_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (Path(log_dir) / "metrics.jsonl").read_text().splitlines()]


def restore_step(log_dir: Path, step: int):
    cfg = go1_config()
    train_abs, rollout_abs = jax.eval_shape(build_programs(cfg).init, run_keys(cfg)[0])
    manager = open_manager(Path(log_dir) / "checkpoints", read_only=True)
    try:
        return restore_checkpoint(manager, {"train_state": train_abs, "rollout_state": rollout_abs}, step)
    finally:
        manager.close()


@pytest.fixture(scope="module")
def learning_run(tmp_path_factory):
    """`learning_runs.go1_flat_run`, also measured by bench/learning_spread.py (case `go1_flat`)."""
    return go1_flat_run(tmp_path_factory.mktemp("go1"))


def test_go1_learns_above_the_random_policy(learning_run):
    """Go1's reward is clipped at 0 and its penalties outweigh its rewards while the legs jitter,
    so a fresh (random) policy earns almost nothing per step and Playground's own PPO shows no
    return for its first million steps. What moves at this size is the reward per env step: a
    policy that stops thrashing keeps the sum of terms above the clip on more steps."""
    _, rows = learning_run
    # BENCHMARKS.md, Learning spread: Go1 flat step reward: seeds 1-4, 4.94 / 5.08 / 5.38 x, margin
    # 2.94; Go1 flat falls: 0.086 / 0.136 / 0.216 x, margin 0.284 (case `go1_flat`).
    step_reward = np.array([r["mean_step_reward"] for r in rows])
    falls = np.array([r["episodes"] for r in rows])
    assert step_reward[-10:].mean() > 2.0 * step_reward[1:11].mean(), step_reward
    assert falls[-10:].mean() < 0.5 * falls[1:11].mean(), falls


def test_metrics_jsonl_holds_the_playground_terms_and_the_trained_policys_evaluation(learning_run):
    """What reaches metrics.jsonl, not how good it is: 120 iterations on 64 envs stay on Go1's
    standing plateau (a standing Go1 scores velrmsd about 1.05, BENCHMARKS.md), so no bound on
    velrmsd or CoT tells this policy from a standing one. The last evaluation row holds the numbers
    of the policy the run ended with, under the run's evaluation key for that iteration: evaluated
    again from the final train state, every eval_ value is the same; falls and episode lengths agree
    over the 4 evaluation episodes of 1000 steps."""
    result, rows = learning_run
    for term in ("tracking_lin_vel", "tracking_ang_vel", "orientation", "feet_air_time", "termination"):
        assert any(f"episode/reward/{term}" in r for r in rows), term
    evals = [r for r in rows if "eval_reward" in r]
    assert [r["iteration"] for r in evals] == [60, 120]
    for r in evals:
        falls = r["eval_falls"] * 4  # episodes of the 4 that ended early
        assert falls == round(falls)
        assert (r["eval_episode_length"] == 1000) == (falls == 0), r
        assert r["eval_episode_length"] <= 1000 - falls / 4, r
    # the run's evaluation key for that iteration (a function of the seed and the iteration)
    key = jax.random.fold_in(run_keys(go1_config())[1], ITERATIONS)
    params, normalizers = local_copy((result.train_state.params, result.train_state.normalizers))
    again = jax.device_get(build_programs(go1_config()).evaluate(params, normalizers, key))
    logged = evals[-1]
    assert logged["eval_reward"] == float(again["episode_reward"])
    assert logged["eval_episode_length"] == float(again["episode_length"])
    for name in ("velrmsd", "CoT", "falls"):
        assert logged[f"eval_{name}"] == float(again[name]), name


def test_each_env_keeps_its_own_physics_and_the_iteration_compiles_once(learning_run):
    result, _ = learning_run
    physics = result.rollout_state.env_state.physics
    masses = np.asarray(physics["body_mass"])
    assert masses.shape[0] == 64 and len(np.unique(masses[:, 1])) == 64
    friction = np.asarray(physics["geom_friction"])[:, 0, 0]
    assert 0.4 <= friction.min() and friction.max() <= 1.0 and friction.std() > 0.1
    programs = build_programs(go1_config())
    assert programs.iteration._cache_size() == 1  # reset's and step's states share one signature
    assert programs.sharded.refresh._cache_size() == 1  # the initial-state pool's, likewise


def test_resume_is_exact(learning_run, tmp_path):
    result, rows = learning_run
    first = train(go1_config(f"runner.max_iterations={K}"), tmp_path, verbose=False)
    assert first.checkpoint == K
    assert train_main(["--resume", str(tmp_path), "--quiet", f"runner.max_iterations={2 * K}"]) == 0
    # Rows equal but for the evaluation every run makes when it stops (here at iteration K).
    split = [{k: v for k, v in r.items() if not k.startswith("eval_")} for r in read_rows(tmp_path)]
    assert without_time(split) == without_time(rows[: 2 * K])
    state_full, _, _ = restore_step(result.log_dir, 2 * K)
    state_split, _, _ = restore_step(tmp_path, 2 * K)
    assert_trees_equal(state_split, state_full)


@pytest.mark.quick_compile
def test_play_writes_a_playground_trajectory(learning_run, capsys):
    result, _ = learning_run
    out = result.log_dir / "play_test"
    argv = [str(result.log_dir), "--episodes", "2", "--no-video", "--out", str(out)]
    argv += ["--command", "1", "0", "0"]
    assert play_main(argv) == 0
    printed = capsys.readouterr().out
    assert "2 deterministic episodes, command (1, 0, 0) held" in printed
    assert "velrmsd " in printed and "falls " in printed
    episode = np.load(out / "episode.npz")
    steps = episode["qpos"].shape[0]
    assert 1 <= steps <= 1000 and episode["qpos"].shape[1] == 19 and episode["qvel"].shape == (steps, 18)
    assert str(episode["task"]) == TASK and float(episode["dt"]) == pytest.approx(0.02)
    np.testing.assert_allclose(np.diff(episode["time"]), 0.02, atol=1e-4)


@pytest.mark.quick_compile
def test_collect_records_a_playground_dataset_for_pretraining(learning_run, tmp_path):
    """A Playground run's dataset: observations of both groups, executed actions, rewards and dones,
    no AMP frames (those are built from a Brax body layout); two-stage pretraining's loader takes
    it for the same task's observation groups."""
    result, _ = learning_run
    out = tmp_path / "data"
    argv = [str(result.log_dir), "--out", str(out), "--num_envs", "4", "--min_timesteps", "1"]
    assert collect_main([*argv, "--max_env_steps", "1000", "--sample_actions"]) == 0
    meta = read_metadata(out)
    assert meta["task"] == TASK and meta["amp_obs_components"] == [] and meta["amp_obs_dim"] == 0
    files = trajectory_files(out)
    assert len(files) == meta["num_trajectories"] >= 1
    with np.load(files[0]) as t:
        steps = t["actions"].shape[0]
        assert "amp_obs" not in t.files and 1 <= steps <= 1000
        assert t["obs"].shape == (steps, 48) and t["critic_obs"].shape == (steps, 123)
        assert t["actions"].shape == (steps, 12) and t["rewards"].shape == (steps,)
        assert t["dones"][-1] == 1 and t["dones"][:-1].sum() == 0
    arrays = load_dataset_arrays(
        pretrain_settings({"data_dir": str(out)}), {"policy": (48,), "critic": (123,)}, 12, seed=0
    )
    assert arrays.actions.shape[1] == 12 and arrays.num_trajectories == meta["num_trajectories"]
