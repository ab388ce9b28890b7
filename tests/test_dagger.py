"""`python -m strl_jax.dagger`: a TPPO student drives, the teacher labels every step.

The teacher and student runs are written as checkpoints of freshly initialised networks (no
training): what is checked is the mixing and labelling, which any parameters exercise. The student
is the recurrent TPPO pendulum student (positions only); the teacher reads the `critic` group.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import jax
import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from strl_jax.agents.coefficient_schedules import make_schedule
from strl_jax.buffers.motion_files import trajectory_files, write_json_atomic
from strl_jax.checkpoints.orbax_checkpoints import CHECKPOINT_DIR, open_manager, save_checkpoint
from strl_jax.configs import config_to_dict, resolve_config
from strl_jax.dagger import dagger, draw_mask, teacher_act_schedule
from strl_jax.dagger import main as dagger_main
from strl_jax.envs import make_env_from_config
from strl_jax.errors import ConfigError
from strl_jax.inference import init_policy_state, load_policy

EPISODE_LENGTH = 20
SMALL = [
    f"env.episode_length={EPISODE_LENGTH}",
    "policy.actor_hidden_dims=[8]",
    "policy.critic_hidden_dims=[8]",
]
COMMON = ["--num_envs", "8", "--chunk_steps", "20"]


def write_checkpoint(run: Path, cfg, step: int, seed: int) -> None:
    """A run folder's checkpoint `step` holding fresh parameters and non-trivial normalisers."""
    env = make_env_from_config(cfg.env, num_envs=1)
    state = init_policy_state(
        jax.random.PRNGKey(seed),
        cfg,
        env.observation_shapes(),
        env.action_size,
        env.components,
        env.component_shapes,
    )
    normalizers = jax.tree.map(lambda x: x + 0.5, state.normalizers)
    manager = open_manager(run / CHECKPOINT_DIR)
    meta = {"window": {}, "wall_time": 0.0, "config": config_to_dict(cfg)}
    save_checkpoint(
        manager, step, {"train_state": {"params": state.params, "normalizers": normalizers}}, meta
    )
    manager.wait_until_finished()
    manager.close()


def student_cfg(teacher_dir: Path):
    overrides = [*SMALL, "policy.rnn_hidden_size=8", f"algorithm.teacher_policy.checkpoint={teacher_dir}"]
    return resolve_config("inverted_pendulum_student_tppo", overrides=overrides)


@pytest.fixture(scope="module")
def teacher_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("teacher")
    write_checkpoint(path, resolve_config("inverted_pendulum_teacher", overrides=SMALL), 5, seed=3)
    return path


def new_student(root: Path, teacher_dir: Path, step: int = 3) -> Path:
    write_checkpoint(root, student_cfg(teacher_dir), step, seed=1)
    return root


@pytest.fixture(scope="module")
def student_dir(tmp_path_factory, teacher_dir):
    return new_student(tmp_path_factory.mktemp("student"), teacher_dir)


def load_all(out: Path) -> list[dict[str, np.ndarray]]:
    return [dict(np.load(p)) for p in trajectory_files(out)]


@functools.cache
def acting_step(run: Path, step: int):
    acting = load_policy(run, step).acting()
    return jax.jit(acting.step), acting.initial_hidden(1)


def student_means(run: Path, step: int, obs: np.ndarray) -> np.ndarray:
    """The student's deterministic actions along one episode, its memory starting from zero."""
    step_fn, hidden = acting_step(run, step)
    actions = []
    for o in obs:
        action, hidden = step_fn(o[None], hidden)
        actions.append(np.asarray(action[0]))
    return np.stack(actions)


def check_labels_and_actions(trajs, teacher_dir: Path, student_dir: Path) -> None:
    """Every label is the teacher's deterministic action on that step's teacher observation; the
    executed action is the label where the teacher acted and the student's mean elsewhere."""
    teacher = jax.jit(load_policy(teacher_dir).policy())
    for t in trajs:
        np.testing.assert_allclose(t["teacher_actions"], teacher(t["teacher_obs"]), atol=1e-5, rtol=0)
        acted = t["teacher_acted"].astype(bool)
        np.testing.assert_array_equal(t["actions"][acted], t["teacher_actions"][acted])
        (iteration,) = set(t["student_iteration"].tolist())
        expected = student_means(student_dir, iteration, t["obs"])
        np.testing.assert_allclose(t["actions"][~acted], expected[~acted], atol=1e-5, rtol=0)


def test_dataset_mixes_student_and_teacher_and_labels_every_step(teacher_dir, student_dir, tmp_path, capsys):
    out = tmp_path / "dagger"
    # --teacher defaults to the student's algorithm.teacher_policy.checkpoint
    args = ["--training_policy_logdir", str(student_dir), "--out", str(out), *COMMON]
    assert dagger_main([*args, "--teacher_act_prob", "0.5", "--min_timesteps", "150"]) == 0
    meta = json.loads((out / "metadata.json").read_text())
    trajs = load_all(out)
    assert meta["writer"] == "strl_jax.dagger" and meta["teacher_run"] == str(teacher_dir.resolve())
    assert meta["teacher_obs_group"] == "critic" and meta["student_obs_group"] == "policy"
    assert meta["num_trajectories"] == len(trajs) and meta["num_timesteps"] == sum(
        len(t["rewards"]) for t in trajs
    )
    assert meta["num_timesteps"] >= 150
    rounds = meta["sessions"][0]["rounds"]
    assert all(r["iteration"] == 3 and r["teacher_act_prob"] == 0.5 for r in rounds)
    assert all(r["teacher_act_fraction"] * 8 == round(r["teacher_act_fraction"] * 8) for r in rounds)
    for t in trajs:
        steps = len(t["rewards"])
        assert t["obs"].shape == (steps, 2) and t["teacher_obs"].shape == (steps, 4)
        assert t["actions"].shape == t["teacher_actions"].shape == (steps, 1)
        assert t["teacher_acted"].shape == t["student_iteration"].shape == t["dones"].shape == (steps,)
        assert t["dones"][-1] == 1 and t["dones"][:-1].sum() == 0
        assert "amp_obs" not in t
        # the student sees the positions of the teacher's full state
        np.testing.assert_allclose(t["obs"], t["teacher_obs"][:, :2], atol=1e-6)
    acted = np.concatenate([t["teacher_acted"] for t in trajs])
    assert 0 < acted.sum() < len(acted)
    check_labels_and_actions(trajs, teacher_dir, student_dir)

    capsys.readouterr()
    assert dagger_main([*args, "--teacher_act_prob", "0.5", "--min_timesteps", "100"]) == 0
    assert "nothing to collect" in capsys.readouterr().out


@pytest.mark.parametrize("prob", [1.0, 0.0])
def test_all_teacher_or_all_student_with_noise(teacher_dir, student_dir, tmp_path, prob):
    out = tmp_path / "pure"
    std = 0.3
    meta = dagger(
        student_dir,
        out,
        teacher=teacher_dir,
        teacher_act_prob=prob,
        action_sample_std=std,
        num_envs=8,
        chunk_steps=20,
        min_timesteps=80,
        log=lambda _: None,
    )
    assert {r["teacher_act_fraction"] for r in meta["sessions"][0]["rounds"]} == {prob}
    trajs = load_all(out)
    for t in trajs:
        assert np.all(t["teacher_acted"] == prob)
        assert np.all(np.abs(t["actions"]) <= 1.0)
    if prob == 1.0:
        check_labels_and_actions(trajs, teacher_dir, student_dir)
        return
    noise = np.concatenate([t["actions"] - student_means(student_dir, 3, t["obs"]) for t in trajs])
    unclipped = np.abs(np.concatenate([t["actions"] for t in trajs])) < 1.0
    assert np.std(noise[unclipped]) == pytest.approx(std, rel=0.25)
    assert abs(np.mean(noise[unclipped])) < 0.1


def test_newer_student_checkpoints_are_used_and_logged(teacher_dir, tmp_path):
    run = new_student(tmp_path / "student", teacher_dir, step=3)
    rounds_seen = []

    def after_round(message: str) -> None:
        rounds_seen.append(message)
        if len(rounds_seen) == 1:  # the student trains on: a newer checkpoint appears
            write_checkpoint(run, student_cfg(teacher_dir), 7, seed=2)

    out = tmp_path / "dagger"
    meta = dagger(
        run,
        out,
        teacher_act_prob="exp",
        update_times_scale=10,
        log_to_tensorboard=True,
        num_envs=8,
        chunk_steps=20,
        min_timesteps=300,
        log=after_round,
    )
    rounds = meta["sessions"][0]["rounds"]
    assert [r["iteration"] for r in rounds[:2]] == [3, 7] and len(rounds) == len(rounds_seen)
    schedule = make_schedule("exp", 10)
    for r in rounds:
        assert r["teacher_act_prob"] == pytest.approx(float(schedule(r["iteration"])), abs=1e-7)
    trajs = load_all(out)
    assert {3, 7} <= set(np.concatenate([t["student_iteration"] for t in trajs]).tolist())
    # episodes driven by one student only replay with that student's parameters
    whole = [t for t in trajs if len(set(t["student_iteration"].tolist())) == 1]
    assert any(t["student_iteration"][0] == 7 for t in whole)
    check_labels_and_actions(whole, teacher_dir, run)

    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"Dagger/teacher_act_prob", "Episode/return", "Episode/return_max", "Episode/length_min"} <= tags
    probs = events.Scalars("Dagger/teacher_act_prob")
    assert [e.step for e in probs][:2] == [3, 7]
    assert probs[1].value == pytest.approx(float(schedule(7)), abs=1e-6)


def test_mask_draws_follow_the_probability():
    for p in (0.0, 0.3, 1.0):
        mask = np.asarray(draw_mask(jax.random.PRNGKey(0), p, 20000))
        assert mask.mean() == pytest.approx(p, abs=0.01)


def test_schedule_argument():
    assert float(teacher_act_schedule("linear", 10)(5)) == pytest.approx(0.5)
    assert float(teacher_act_schedule(0.25, 10)(99)) == pytest.approx(0.25)
    with pytest.raises(ConfigError, match=r"valid choices: \['linear', 'exp', 'tanh'\]"):
        teacher_act_schedule("cosine", 10)


@pytest.fixture(scope="module")
def hopper_run(tmp_path_factory):
    path = tmp_path_factory.mktemp("hopper")
    write_checkpoint(path, resolve_config("hopper", overrides=SMALL), 1, seed=0)
    return path


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--training_policy_logdir", "{tmp}/nowhere"], "does not exist"),
        (["--teacher", "{tmp}/nowhere"], "teacher: '"),
        (["--teacher_act_prob", "cosine"], "valid choices: ['linear', 'exp', 'tanh']"),
        (["--teacher_act_prob", "1.5"], "must be in [0, 1]"),
        (["--action_sample_std", "-0.1"], "--action_sample_std must be >= 0"),
        (["--teacher_obs_group", "privileged"], "group 'privileged', which the student's env does not"),
        (
            ["--teacher_obs_group", "policy"],
            "shape (4,), but the student's env's 'policy' group has shape (2,)",
        ),
        (
            ["--teacher", "{hopper}"],
            "the teacher has 3 actions but the student's env (inverted_pendulum) has 1",
        ),
        (["--training_policy_logdir", "{teacher}"], "no teacher: give --teacher RUN"),
        (["--num_envs", "0"], "--num_envs must be at least 1"),
    ],
)
def test_errors(teacher_dir, student_dir, hopper_run, tmp_path, capsys, argv, needle):
    base = ["--training_policy_logdir", str(student_dir), "--out", str(tmp_path / "o"), *COMMON]
    fill = {"tmp": tmp_path, "hopper": hopper_run, "teacher": teacher_dir}
    assert dagger_main([*base, *(a.format(**fill) for a in argv)]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_refuses_a_folder_of_another_writer(student_dir, tmp_path, capsys):
    out = tmp_path / "demo"
    out.mkdir()
    write_json_atomic(out / "metadata.json", {"format": "strl_jax.motion_dataset", "frame_duration": 0.02})
    assert dagger_main(["--training_policy_logdir", str(student_dir), "--out", str(out), *COMMON]) == 2
    assert "written by strl_jax.collect, not by strl_jax.dagger" in capsys.readouterr().err
