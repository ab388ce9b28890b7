"""The runner's st_rl extras: random episode starts, code state, checkpoint manipulators,
`--more_iterations`, and malformed config files as exit-2 messages."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from tiny_config import tiny

import strl_jax
from strl_jax.checkpoints.manipulators import copy_overlap
from strl_jax.checkpoints.orbax_checkpoints import (
    load_params_and_normalizers,
)
from strl_jax.checkpoints.tree_layout import as_nested_dict
from strl_jax.configs.loader import resolve_config
from strl_jax.errors import CheckpointMismatchError
from strl_jax.inference import get_inference_policy
from strl_jax.records.code_state import repository_root, store_code_state
from strl_jax.runners.runner import build_programs, run_keys, train
from strl_jax.train import main as train_main

EPISODE = 50
WIDE = tiny(
    f"env.episode_length={EPISODE}",
    "policy.actor_hidden_dims=[64]",
    "policy.critic_hidden_dims=[64]",
    "runner.init_at_random_ep_len=true",
    "runner.eval_interval=0",
)
# the same task with an observation component appended: the policy input grows from 4 to 6
GROWN = [*WIDE, "env.obs_groups.policy={state: [0, 1, 2, 3], pole: [1, 3]}"]
TIME_KEYS = {"wall_time", "fps", "iteration_time"}


def config(*overrides: str):
    return resolve_config("inverted_pendulum", overrides=[*WIDE, *overrides])


def rows_of(log_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (log_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in TIME_KEYS} for r in rows]


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("random_starts")
    return train(config("runner.max_iterations=4"), log_dir, verbose=False)


# ---------------------------------------------------------------- random episode starts
def test_random_episode_starts_spread_the_first_time_outs():
    cfg = config()
    train_state, rollout_state = build_programs(cfg).init(run_keys(cfg)[0])
    counts = np.asarray(rollout_state.env_state.step_count)
    assert counts.min() >= 0 and counts.max() < EPISODE
    assert len(set(counts.tolist())) >= 10  # 16 envs: time-outs at many different steps, not one
    env = build_programs(cfg).env
    state, _ = env.reset(jax.random.PRNGKey(0))
    whole = env.random_episode_starts(state, jax.random.PRNGKey(1))
    half = env.replace(num_envs=8)
    shard, _ = half.reset(jax.random.PRNGKey(0), 8)
    shard = half.random_episode_starts(shard, jax.random.PRNGKey(1), 8)
    np.testing.assert_array_equal(shard.step_count, whole.step_count[8:])  # device-count invariant


def test_resume_with_random_starts_and_more_iterations_is_exact(full_run, tmp_path):
    first = train(config("runner.max_iterations=2"), tmp_path, verbose=False)
    assert first.checkpoint == 2
    assert train_main(["--resume", str(tmp_path), "--quiet", "--more_iterations", "2"]) == 0
    assert rows_of(tmp_path) == rows_of(full_run.log_dir)
    assert "max_iterations: 4" in (tmp_path / "config.yaml").read_text()


def test_more_iterations_and_max_iterations_exclude_each_other(capsys):
    assert train_main(["--more_iterations", "3", "--max_iterations", "5"]) == 2
    assert "give one of them" in capsys.readouterr().err
    assert train_main(["--more_iterations", "0"]) == 2


# ---------------------------------------------------------------- checkpoint manipulator
def test_manipulator_maps_a_first_layer_onto_a_wider_input(full_run, tmp_path, capsys):
    grown = resolve_config("inverted_pendulum", overrides=GROWN)
    programs = build_programs(grown)
    abstract, _ = jax.eval_shape(programs.init, run_keys(grown)[0])
    with pytest.raises(CheckpointMismatchError, match=r"hidden_0.kernel: checkpoint has shape \(4, 64\)"):
        load_params_and_normalizers(full_run.log_dir, abstract)

    fresh, _ = programs.init(run_keys(grown)[0])
    current = {"params": as_nested_dict(fresh.params), "normalizers": as_nested_dict(fresh.normalizers)}
    params, normalizers, step = load_params_and_normalizers(
        full_run.log_dir, abstract, manipulate=lambda loaded: copy_overlap(loaded, current)
    )
    assert step == 4
    old = np.asarray(full_run.train_state.params["params"]["actor"]["hidden_0"]["kernel"])
    new = np.asarray(params["params"]["actor"]["hidden_0"]["kernel"])
    assert old.shape == (4, 64) and new.shape == (6, 64)
    np.testing.assert_array_equal(new[:4], old)
    np.testing.assert_array_equal(
        new[4:], np.asarray(fresh.params["params"]["actor"]["hidden_0"]["kernel"])[4:]
    )
    np.testing.assert_array_equal(
        np.asarray(normalizers["policy"].mean)[:4],
        np.asarray(full_run.train_state.normalizers["policy"].mean),
    )

    manipulator = "runner.ckpt_manipulator=strl_jax.checkpoints.manipulators:copy_overlap"
    load = ["--load", str(full_run.log_dir), "--quiet", *GROWN]
    assert (
        train_main([*load, manipulator, "runner.max_iterations=2", "--log_dir", str(tmp_path / "grown")]) == 0
    )
    rows = rows_of(tmp_path / "grown")
    assert [r["iteration"] for r in rows] == [1, 2]
    assert all(np.isfinite(r["surrogate"]) for r in rows)

    missing = "runner.ckpt_manipulator=strl_jax.nowhere:fn"
    assert train_main([*load, missing, "--log_dir", str(tmp_path / "bad")]) == 2
    assert "cannot import module 'strl_jax.nowhere'" in capsys.readouterr().err


def test_zero_new_inputs_keep_the_loaded_policy_acting_as_it_did(full_run):
    """`new_inputs: zero`: the grown policy's actions ignore the appended component at first, so
    they are the loaded policy's on the old inputs; freshly initialised rows change them."""
    grown = resolve_config("inverted_pendulum", overrides=GROWN)
    programs = build_programs(grown)
    abstract, _ = jax.eval_shape(programs.init, run_keys(grown)[0])
    fresh, _ = programs.init(run_keys(grown)[0])
    current = {"params": as_nested_dict(fresh.params), "normalizers": as_nested_dict(fresh.normalizers)}
    old_state = jax.device_get(full_run.train_state)
    obs = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    grown_obs = np.concatenate([obs, 3.0 * obs[:, [1, 3]] + 1.0], axis=1)
    expected = np.asarray(get_inference_policy(config(), old_state.params, old_state.normalizers)(obs))
    mapped = {}

    def actions(new_inputs: str) -> np.ndarray:
        def manipulate(loaded: dict) -> dict:
            mapped[new_inputs] = copy_overlap(loaded, current, new_inputs=new_inputs)
            return mapped[new_inputs]

        params, normalizers, _ = load_params_and_normalizers(
            full_run.log_dir, abstract, manipulate=manipulate
        )
        return np.asarray(get_inference_policy(grown, params, normalizers)(grown_obs))

    np.testing.assert_allclose(actions("zero"), expected, rtol=0, atol=1e-6)
    assert np.abs(actions("fresh") - expected).max() > 1e-3
    first = {k: mapped[k]["params"]["params"]["actor"]["hidden_0"]["kernel"] for k in mapped}
    assert first["zero"].shape == (6, 64) and not first["zero"][4:].any() and first["fresh"][4:].all()
    with pytest.raises(ValueError, match="new_inputs must be one of fresh, zero, not 'zeros'"):
        copy_overlap(mapped["zero"], current, new_inputs="zeros")


def test_manipulator_spec_is_checked_with_the_config(capsys):
    assert train_main(["--quiet", "runner.ckpt_manipulator=not a function"]) == 2
    assert "must name a function as 'package.module:function'" in capsys.readouterr().err


# ---------------------------------------------------------------- code state
def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def test_code_state_of_a_temporary_repository(tmp_path):
    repo = tmp_path / "robot_tasks"
    (repo / "pkg").mkdir(parents=True)
    _git(tmp_path, "init", "-q", str(repo))
    _git(repo, "config", "user.email", "dev@example.com")
    _git(repo, "config", "user.name", "dev")
    (repo / "pkg" / "task.py").write_text("reward = 1\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "first")
    commit = _git(repo, "rev-parse", "HEAD").strip()
    (repo / "pkg" / "task.py").write_text("reward = 2\n")
    (repo / "pkg" / "new_file.py").write_text("x = 1\n")

    log_dir = tmp_path / "log"
    written, notes = store_code_state(log_dir, [repo / "pkg" / "task.py", repo, tmp_path / "not_a_repo"])
    text = (log_dir / "git" / "robot_tasks.diff").read_text()
    assert text.startswith(f"--- git commit ---\n{commit}\n")
    assert "--- git status ---" in text and "modified:   pkg/task.py" in text and "new_file.py" in text
    assert "-reward = 1\n+reward = 2" in text
    assert len([p for p in written if p.name == "robot_tasks.diff"]) == 1  # one file per checkout
    assert notes == [
        f"runner.git_status_repos: {tmp_path / 'not_a_repo'} is not inside a git checkout; skipped"
    ]
    own = repository_root(Path(strl_jax.__file__).parent)
    assert (own is not None) == any(p.name == f"{own.name if own else ''}.diff" for p in written)

    resumed, _ = store_code_state(log_dir, [repo], resumed_at=120)
    assert (log_dir / "git" / "robot_tasks.resume120.diff") in resumed
    assert (log_dir / "git" / "robot_tasks.diff").read_text() == text  # the first run's state is kept


def test_code_state_without_git(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty_bin"))
    written, notes = store_code_state(tmp_path / "log", [tmp_path])
    assert written == [] and len(notes) == 1


def test_training_run_records_its_code_state(full_run):
    own = repository_root(Path(strl_jax.__file__).parent)
    files = sorted(p.name for p in (full_run.log_dir / "git").glob("*.diff")) if own else []
    assert files == ([f"{own.name}.diff"] if own else [])


# ---------------------------------------------------------------- malformed config files
def test_malformed_yaml_exits_2_naming_file_line_and_column(tmp_path, capsys):
    bad = tmp_path / "overrides.yaml"
    bad.write_text("algorithm:\n  learning_rate: 1e-3\n   gamma: 0.9\n")
    assert train_main(["--config", str(bad), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:3:9: not valid YAML" in err and "Traceback" not in err


def test_a_key_given_twice_exits_2_naming_it_and_both_lines(tmp_path, capsys):
    """PyYAML keeps the last of two values silently; a run's config.yaml edited by hand (a field
    added beside the one already there) would train with whichever came last."""
    bad = tmp_path / "config.yaml"
    bad.write_text("runner:\n  normalizer_clip: 3.0\n  save_interval: 5\n  normalizer_clip: null\n")
    assert train_main(["--config", str(bad), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:4:3: not valid YAML: the key 'normalizer_clip' is given twice" in err
    assert "(first on line 2)" in err and "Traceback" not in err
    merged = tmp_path / "merged.yaml"  # YAML's merge keys may repeat a key by design
    merged.write_text("base: &b {gamma: 0.9}\nalgorithm:\n  <<: *b\n  gamma: 0.95\n")
    from strl_jax.configs.loader import load_yaml_file

    assert load_yaml_file(merged)["algorithm"] == {"gamma": 0.95}


# ---------------------------------------------------------------- loggers
def test_training_run_logs_to_wandb_offline(tmp_path, monkeypatch):
    import wandb  # noqa: F401 - installed by the test extra

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    result = train(config("runner.max_iterations=1", "runner.logger=wandb"), tmp_path / "run", verbose=False)
    assert [r["iteration"] for r in result.rows] == [1]
    runs = list((tmp_path / "run" / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and list(runs[0].glob("*.wandb"))
    assert (tmp_path / "run" / "wandb_run_id.txt").is_file()


# ---------------------------------------------------------------- start-up chatter
def test_known_import_chatter_is_dropped_and_real_warnings_stay():
    script = (
        "import sys, warnings\n"
        "sys.modules['warp'] = None  # as on a machine without NVIDIA Warp\n"
        "import strl_jax.envs\n"
        "from strl_jax.envs.brax_env import make_brax_env\n"
        "make_brax_env('inverted_pendulum', 'positional', 2, 10)\n"
        "print('stdout still works')\n"
        "warnings.warn('a real warning')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True
    )
    out = done.stdout + done.stderr
    assert "Failed to import" not in out and "not actively being maintained" not in out
    assert "stdout still works" in done.stdout and "a real warning" in done.stderr
