"""`python -m strl_jax.collect` on a real (tiny) run: files, metadata, resume, loading back."""

from __future__ import annotations

import json
from pathlib import Path

import brax.envs
import numpy as np
import pytest
from tiny_config import tiny

from strl_jax.buffers.motion_files import load_motion_library, trajectory_files
from strl_jax.collect import main as collect_main
from strl_jax.configs.loader import resolve_config
from strl_jax.dataset_sessions import TrajectoryCutter
from strl_jax.inference import load_policy
from strl_jax.runners.runner import train

EPISODE_LENGTH = 20
TINY = tiny(
    f"env.episode_length={EPISODE_LENGTH}",
    "algorithm.num_learning_epochs=1",
    "runner.save_interval=1",
    "runner.max_iterations=1",
)
# inverted_pendulum has a fixed base (no default AMP frame): the pole's angle and angular velocity
COMMON = ["--num_envs", "8", "--amp_obs_components", "joint_pos,joint_vel"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("run")
    return train(resolve_config("inverted_pendulum", overrides=TINY), log_dir, verbose=False).log_dir


def load_all(out):
    return [dict(np.load(p)) for p in trajectory_files(out)]


def test_collect_writes_resumes_and_loads_back(run_dir, tmp_path, capsys):
    out = tmp_path / "demo"
    # sampled actions (std ~1 after one iteration) let some episodes fail before the time limit
    args = [str(run_dir), "--out", str(out), *COMMON, "--sample_actions"]
    assert collect_main([*args, "--min_timesteps", "60", "--min_episodes", "3"]) == 0
    meta = json.loads((out / "metadata.json").read_text())
    trajs = load_all(out)
    assert meta["num_trajectories"] == len(trajs) >= 3
    assert meta["num_timesteps"] == sum(len(t["actions"]) for t in trajs) >= 60
    assert meta["task"] == "inverted_pendulum" and meta["amp_obs_components"] == ["joint_pos", "joint_vel"]
    assert meta["amp_obs_dim"] == 2 and meta["checkpoint"] == 1
    assert meta["frame_duration"] == pytest.approx(
        float(brax.envs.get_environment("inverted_pendulum", backend=meta["backend"]).dt)
    )
    assert meta["options"]["success_traj_only"] is False and meta["options"]["sample_actions"] is True
    assert len(meta["sessions"]) == 1 and meta["sessions"][0]["checkpoint"] == 1
    for t in trajs:
        steps = len(t["actions"])
        assert 1 <= steps <= EPISODE_LENGTH
        assert t["amp_obs"].shape == (steps + 1, 2) and t["obs"].shape == (steps, 4)
        assert "critic_obs" not in t  # the critic sees the policy's observation
        assert t["rewards"].shape == t["dones"].shape == t["timeouts"].shape == (steps,)
        assert t["dones"][-1] == 1 and t["dones"][:-1].sum() == 0
        assert steps == EPISODE_LENGTH or not t["timeouts"][-1]  # time-outs only at the limit
        # frame t is the state step t acted on: the pole angle / velocity of the observation
        np.testing.assert_allclose(t["amp_obs"][:-1], t["obs"][:, [1, 3]], atol=1e-6)
        # the last frame is the state the last action reached (before the reset)
        if not t["timeouts"][-1]:
            assert abs(t["amp_obs"][-1, 0]) > 0.2  # inverted_pendulum terminates at |angle| > 0.2
    assert any(not t["timeouts"][-1] for t in trajs)
    # samples around the policy's (clipped) mean, not the mean itself; the mean recorded beside
    obs = np.concatenate([t["obs"] for t in trajs])
    actions = np.concatenate([t["actions"] for t in trajs])
    mean = np.asarray(load_policy(run_dir).policy()(obs))
    assert np.all(np.abs(actions) <= 1.0) and np.mean(np.abs(actions - mean)) > 0.1
    recorded = np.concatenate([t["mean_actions"] for t in trajs])
    assert recorded.dtype == np.float32 and recorded.shape == actions.shape
    np.testing.assert_allclose(recorded, mean, atol=1e-5, rtol=0)

    before = {p.name for p in trajectory_files(out)}
    assert collect_main([*args, "--min_timesteps", str(meta["num_timesteps"] + 50)]) == 0
    meta2 = json.loads((out / "metadata.json").read_text())
    files = trajectory_files(out)
    assert before < {p.name for p in files}
    assert [p.name for p in files] == [f"traj_{i:06d}.npz" for i in range(len(files))]
    assert meta2["num_trajectories"] == len(files)
    assert (
        meta2["num_timesteps"] == sum(len(t["actions"]) for t in load_all(out)) >= meta["num_timesteps"] + 50
    )
    assert len(meta2["sessions"]) == 2 and meta2["sessions"][1]["added_trajectories"] == len(files) - len(
        before
    )
    # a new session draws other initial states, so it does not repeat the first one's episodes
    first_new = np.load(files[len(before)])["obs"][0]
    assert not any(np.array_equal(first_new, t["obs"][0]) for t in trajs)

    capsys.readouterr()
    assert collect_main([*args, "--min_timesteps", "10"]) == 0
    assert "nothing to collect" in capsys.readouterr().out

    lib = load_motion_library(out)
    assert lib.num_motions == len(files) and lib.frame_dim == 2
    np.testing.assert_allclose(float(np.sum(lib.weight)), 1.0, rtol=1e-5)
    lengths = np.asarray(lib.num_frames) - 1
    np.testing.assert_allclose(np.asarray(lib.weight), lengths / lengths.sum(), rtol=1e-5)


def test_collect_records_the_deterministic_policy_actions(run_dir, tmp_path):
    out = tmp_path / "mean"
    assert (
        collect_main(
            [str(run_dir), "--out", str(out), *COMMON, "--min_timesteps", "0", "--min_episodes", "2"]
        )
        == 0
    )
    policy = load_policy(run_dir).policy()
    for t in load_all(out):
        np.testing.assert_allclose(t["actions"], np.asarray(policy(t["obs"])), atol=1e-5, rtol=0)
        np.testing.assert_array_equal(t["mean_actions"], t["actions"])  # executed = mean


def test_collect_success_only_with_sampled_actions(run_dir, tmp_path):
    out = tmp_path / "success"
    argv = [str(run_dir), "--out", str(out), *COMMON, "--min_timesteps", "0", "--min_episodes", "2"]
    assert collect_main([*argv, "--success_traj_only", "--sample_actions", "--seed", "3"]) == 0
    trajs = load_all(out)
    assert len(trajs) >= 2
    for t in trajs:
        assert len(t["actions"]) == EPISODE_LENGTH and t["timeouts"][-1] == 1
    meta = json.loads((out / "metadata.json").read_text())
    assert meta["options"]["sample_actions"] and meta["options"]["success_traj_only"]
    assert meta["sessions"][0]["finished_episodes"] > len(trajs)  # the failed ones were dropped


def test_trajectory_cutter_joins_pieces_across_chunks():
    def chunk(done_steps, offset):
        done = np.zeros((4, 2), bool)
        for t, i in done_steps:
            done[t, i] = True
        steps = offset + np.arange(4)[:, None] + 10 * np.arange(2)[None, :]
        return {"step": steps, "terminated": done, "truncated": np.zeros_like(done)}

    cutter = TrajectoryCutter(2)
    first = cutter.feed(chunk([(1, 0)], 0))
    assert [(t, i, list(e["step"])) for t, i, e in first] == [(1, 0, [0, 1])]
    second = cutter.feed(chunk([(0, 1), (2, 0), (3, 0)], 4))
    assert [(t, i, list(e["step"])) for t, i, e in second] == [
        (0, 1, [10, 11, 12, 13, 14]),  # env 1's episode spans both chunks
        (2, 0, [2, 3, 4, 5, 6]),
        (3, 0, [7]),
    ]
    assert [list(p["step"]) for p in cutter.pieces[1]] == [[15, 16, 17]]


@pytest.mark.parametrize(
    ("argv", "needle", "code"),
    [
        (["{tmp}/nowhere", "--out", "{tmp}/o"], "does not exist", 2),
        (["{run}", "--out", "{tmp}/o", "--checkpoint", "7"], "no checkpoint 7", 2),
        (["{run}", "--out", "{tmp}/o"], "has no default AMP observation", 2),
        (["{run}", "--out", "{tmp}/o", "--amp_obs_components", "joint_pos,elbow"], "valid components", 2),
        (["{run}", "--out", "{tmp}/o", "--num_envs", "0"], "--num_envs must be at least 1", 2),
    ],
)
def test_collect_errors(run_dir, tmp_path, capsys, argv, needle, code):
    assert collect_main([a.format(tmp=tmp_path, run=run_dir) for a in argv]) == code
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_collect_refuses_amp_frames_of_a_playground_run_by_name(tmp_path, capsys):
    shipped = Path(__file__).resolve().parents[1] / "examples" / "go1_walk"
    argv = [str(shipped), "--out", str(tmp_path / "o"), "--amp_obs_components", "joint_pos"]
    assert collect_main(argv) == 2
    err = capsys.readouterr().err
    assert "AMP frames are built from a Brax body layout" in err and "'Go1JoystickFlatTerrain'" in err
    assert "Traceback" not in err and not (tmp_path / "o").exists()


def test_collect_refuses_foreign_or_mismatched_folders(run_dir, tmp_path, capsys):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    assert collect_main([str(run_dir), "--out", str(foreign), *COMMON]) == 2
    assert "holds no metadata.json" in capsys.readouterr().err

    out = tmp_path / "demo"
    assert collect_main([str(run_dir), "--out", str(out), *COMMON, "--min_timesteps", "1"]) == 0
    other = [str(run_dir), "--out", str(out), "--num_envs", "8", "--amp_obs_components", "joint_pos"]
    assert collect_main([*other, "--min_timesteps", "1000"]) == 2
    assert "amp_obs_components is ['joint_pos', 'joint_vel']" in capsys.readouterr().err


def test_collect_gives_up_after_max_env_steps(run_dir, tmp_path, capsys):
    out = tmp_path / "never"
    argv = [str(run_dir), "--out", str(out), *COMMON, "--min_timesteps", "100000", "--max_env_steps", "20"]
    assert collect_main(argv) == 1
    assert "--max_env_steps" in capsys.readouterr().err
    meta = json.loads((out / "metadata.json").read_text())
    assert meta["num_trajectories"] == len(trajectory_files(out)) > 0
