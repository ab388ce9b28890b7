"""Checkpoints and resume: an interrupted run continues with exactly the numbers of an
uninterrupted one, damaged checkpoints are skipped, and a checkpoint that does not fit the
config is refused with a message naming the entry.

Every run here shares one tiny config, so the compiled iteration is built once per process.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import jax
import numpy as np
import pytest
from tiny_config import tiny

from strl_jax.checkpoints.orbax_checkpoints import (
    CheckpointError,
    CheckpointWarning,
    close_manager,
    open_manager,
    read_meta,
    restore_checkpoint,
    save_checkpoint,
)
from strl_jax.configs.loader import config_to_dict, resolve_config
from strl_jax.errors import CheckpointMismatchError
from strl_jax.records.run_logger import RunLogger
from strl_jax.runners.runner import build_programs, run_keys, train
from strl_jax.train import main as train_main

K = 3  # the split runs stop after K iterations and resume for K more
TINY = tiny("runner.eval_interval=3")
TIME_KEYS = {"wall_time", "fps", "iteration_time"}


def tiny_config(*overrides: str):
    return resolve_config("inverted_pendulum", overrides=TINY + list(overrides))


def read_rows(log_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (Path(log_dir) / "metrics.jsonl").read_text().splitlines()]


def without_time(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if k not in TIME_KEYS} for row in rows]


def assert_trees_equal(a, b) -> None:
    la, lb = jax.tree_util.tree_leaves_with_path(a), jax.tree_util.tree_leaves_with_path(b)
    assert len(la) == len(lb)
    for (path, x), (_, y) in zip(la, lb, strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=jax.tree_util.keystr(path))


def restore_step(log_dir: Path, step: int | None = None):
    cfg = tiny_config()
    train_abs, rollout_abs = jax.eval_shape(build_programs(cfg).init, run_keys(cfg)[0])
    manager = open_manager(Path(log_dir) / "checkpoints", read_only=True)
    try:
        return restore_checkpoint(manager, {"train_state": train_abs, "rollout_state": rollout_abs}, step)
    finally:
        manager.close()


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    """2K iterations without a stop."""
    log_dir = tmp_path_factory.mktemp("full")
    result = train(tiny_config(f"runner.max_iterations={2 * K}"), log_dir, verbose=False)
    return result


def test_resume_equals_uninterrupted_run(full_run, tmp_path):
    first = train(tiny_config(f"runner.max_iterations={K}"), tmp_path, verbose=False)
    assert first.checkpoint == K and first.interrupted is None
    assert train_main(["--resume", str(tmp_path), "--quiet", f"runner.max_iterations={2 * K}"]) == 0

    full_rows, split_rows = read_rows(full_run.log_dir), read_rows(tmp_path)
    assert [r["iteration"] for r in split_rows] == list(range(1, 2 * K + 1))
    assert without_time(split_rows) == without_time(full_rows)
    assert [r["iteration"] for r in full_rows if "eval_reward" in r] == [K, 2 * K]
    state_full, _, _ = restore_step(full_run.log_dir, 2 * K)
    state_split, meta, _ = restore_step(tmp_path, 2 * K)
    assert_trees_equal(state_split, state_full)
    assert meta["config"]["runner"]["max_iterations"] == 2 * K
    assert (tmp_path / "config.yaml").read_text().count(f"max_iterations: {2 * K}") == 1


def test_checkpoint_holds_the_complete_state(full_run):
    state, meta, step = restore_step(full_run.log_dir)
    assert step == 2 * K
    assert_trees_equal(state["train_state"], full_run.train_state)
    assert_trees_equal(state["rollout_state"], full_run.rollout_state)
    assert state["rollout_state"].env_state.pool_used.shape == (16,)  # the initial-state pool too
    assert int(state["train_state"].iteration) == 2 * K
    assert meta["iteration"] == 2 * K
    assert meta["config"] == config_to_dict(tiny_config(f"runner.max_iterations={2 * K}"))
    assert set(meta["window"]) == {"episodes", "return_sum", "length_sum", "metrics"}
    manager = open_manager(full_run.log_dir / "checkpoints", read_only=True)
    assert manager.all_steps() == [4, 6]  # save_interval 2, keep the last 2
    manager.close()


def test_saved_meta_is_a_snapshot(tmp_path):
    """The writer runs in the background while the loop keeps filling its logging window."""
    manager = open_manager(tmp_path / "checkpoints")
    window = {"episodes": 1.0}
    save_checkpoint(manager, 1, {"x": np.zeros(3)}, {"window": window})
    window["episodes"] = 99.0
    manager.wait_until_finished()
    assert read_meta(manager, 1)["window"] == {"episodes": 1.0}
    manager.close()


def test_signal_saves_then_resume_is_exact(tmp_path, monkeypatch):
    """SIGINT in the middle of a logging window: checkpoint, stop; the resumed run loses nothing."""
    cfg = tiny_config("runner.max_iterations=6", "runner.log_interval=2")
    reference = train(cfg, tmp_path / "ref", verbose=False)
    progress = RunLogger.progress

    def interrupt_at_3(self, iteration):
        if iteration == 3:
            os.kill(os.getpid(), signal.SIGINT)
        progress(self, iteration)

    monkeypatch.setattr(RunLogger, "progress", interrupt_at_3)
    before = signal.getsignal(signal.SIGINT)  # SIG_IGN when started in a background job
    stopped = train(cfg, tmp_path / "run", verbose=False)
    monkeypatch.undo()
    assert stopped.interrupted == "SIGINT" and stopped.checkpoint == 3
    assert signal.getsignal(signal.SIGINT) is before
    assert [r["iteration"] for r in read_rows(tmp_path / "run")] == [2]

    resumed = train(cfg, tmp_path / "run", verbose=False, resume=True)
    assert [r["iteration"] for r in resumed.rows] == [4, 6]
    assert without_time(read_rows(tmp_path / "run")) == without_time(read_rows(tmp_path / "ref"))
    assert_trees_equal(resumed.train_state, reference.train_state)


def _steps(log_dir: Path) -> list[int]:
    folder = log_dir / "checkpoints"
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit()) if folder.is_dir() else []


def test_sigkill_between_checkpoints_resumes_from_the_last_one(tmp_path):
    log_dir = tmp_path / "killed"
    no_eval = "runner.eval_interval=0"  # spares the subprocess a compile
    cmd = [
        sys.executable,
        "-m",
        "strl_jax.train",
        "--log_dir",
        str(log_dir),
        "--quiet",
        *TINY,
        "runner.max_iterations=100000",
        "runner.save_interval=5",
        no_eval,
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 150
    while len(_steps(log_dir)) < 2:
        if proc.poll() is not None:
            pytest.fail(f"training exited early ({proc.returncode}): {proc.stderr.read()[-2000:]}")
        if time.time() > deadline:
            proc.kill()
            pytest.fail("training wrote no checkpoints in time")
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    steps = _steps(log_dir)
    last = steps[-1]
    lines = (log_dir / "metrics.jsonl").read_text().splitlines()
    assert len(lines) >= last  # rows past the checkpoint are dropped on resume
    end = last + 3
    cfg = resolve_config(None, [str(log_dir / "config.yaml")], [f"runner.max_iterations={end}"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CheckpointWarning)
        resumed = train(cfg, log_dir, verbose=False, resume=True)
    context = f"steps {steps}, {len(lines)} rows at the kill, warnings {[str(w.message) for w in caught]}"
    assert resumed.rows[0]["iteration"] == last + 1, context
    reference = train(tiny_config(f"runner.max_iterations={end}", no_eval), tmp_path / "ref", verbose=False)
    assert [r["iteration"] for r in read_rows(log_dir)] == list(range(1, end + 1)), context
    assert without_time(read_rows(log_dir)) == without_time(read_rows(tmp_path / "ref")), context
    assert_trees_equal(resumed.train_state, reference.train_state)


def test_sigterm_from_the_cli_checkpoints_and_exits_with_143(tmp_path, monkeypatch, capsys):
    progress = RunLogger.progress

    def terminate_at_2(self, iteration):
        if iteration == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        progress(self, iteration)

    monkeypatch.setattr(RunLogger, "progress", terminate_at_2)
    before = signal.getsignal(signal.SIGTERM)
    code = train_main(["--log_dir", str(tmp_path), "--quiet", *TINY, "runner.max_iterations=50"])
    assert code == 128 + signal.SIGTERM
    assert f"--resume {tmp_path}" in capsys.readouterr().err
    assert _steps(tmp_path) == [2] and [r["iteration"] for r in read_rows(tmp_path)] == [1, 2]
    assert signal.getsignal(signal.SIGTERM) is before


@pytest.mark.parametrize("damage", ["garbage_metadata", "missing_arrays"])
def test_damaged_newest_checkpoint_falls_back_with_a_warning(full_run, tmp_path, damage):
    run = tmp_path / "run"
    shutil.copytree(full_run.log_dir, run)
    newest = run / "checkpoints" / str(2 * K)
    if damage == "garbage_metadata":
        (newest / "state" / "_METADATA").write_text("{not json")
    else:
        shutil.rmtree(newest / "state" / "d")
    (run / "checkpoints" / f"{2 * K + 2}.orbax-checkpoint-tmp-1700000000").mkdir()  # a save cut short

    cfg = tiny_config(f"runner.max_iterations={2 * K}")
    expected = f"checkpoint {2 * K} .* cannot be read.*falling back to checkpoint 4"
    with pytest.warns(CheckpointWarning, match=expected):
        resumed = train(cfg, run, verbose=False, resume=True)
    assert [r["iteration"] for r in resumed.rows] == [5, 6]
    assert without_time(read_rows(run)) == without_time(read_rows(full_run.log_dir))
    assert_trees_equal(resumed.train_state, full_run.train_state)
    assert (run / "superseded_checkpoints" / str(2 * K)).is_dir()
    assert not list((run / "checkpoints").glob("*tmp*"))


def test_mismatched_checkpoint_names_the_entry(full_run, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(full_run.log_dir, run)
    code = train_main(["--resume", str(run), "--quiet", "policy.actor_hidden_dims=[32]"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert "train_state.params.params.actor.hidden_0.kernel: checkpoint has shape (4, 16) float32" in err
    assert "the config needs shape (4, 32) float32" in err

    cfg = tiny_config("policy.actor_hidden_dims=[32]")  # shares the build with the CLI call above
    train_abs, rollout_abs = jax.eval_shape(build_programs(cfg).init, run_keys(cfg)[0])
    manager = open_manager(run / "checkpoints", read_only=True)
    with pytest.raises(CheckpointMismatchError, match="does not fit the configured task/network"):
        restore_checkpoint(manager, {"train_state": train_abs, "rollout_state": rollout_abs})
    manager.close()
    with pytest.raises(CheckpointMismatchError, match="train_state.params.params.actor.output.kernel"):
        train(cfg, tmp_path / "warm", verbose=False, load=run)


def test_warm_start_takes_params_and_normalizers_not_optimizer(full_run, tmp_path):
    warm = train(tiny_config("runner.max_iterations=1"), tmp_path, verbose=False, load=full_run.log_dir)
    per_iteration = 16 * 8
    full_count = float(full_run.train_state.normalizers["policy"].count)
    assert float(warm.train_state.normalizers["policy"].count) == full_count + per_iteration
    assert int(warm.train_state.iteration) == 1
    adam_count = int(warm.train_state.opt_state[1].count)
    assert adam_count == 2 * 2  # epochs x minibatches of one iteration: a fresh optimiser
    assert [r["iteration"] for r in warm.rows] == [1]
    # the same warm start named by the config (a preset's runner.load)
    configured = tiny_config("runner.max_iterations=1", f"runner.load={full_run.log_dir}")
    same = train(configured, tmp_path / "configured", verbose=False)
    jax.tree.map(np.testing.assert_array_equal, same.train_state.params, warm.train_state.params)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--resume", "{tmp}/nowhere"], "does not exist"),
        (["--resume", "{tmp}/empty"], "has no config.yaml"),
        (["--resume", "{tmp}/no_checkpoints"], "no checkpoints to resume from"),
        (["--resume", "{full}", "--checkpoint", "5"], "no checkpoint 5 in"),
        (["--checkpoint", "4"], "use it with --resume"),
        (["--resume", "{full}", "--task", "ant"], "drop --task"),
        (["--load", "{tmp}/nowhere"], "nothing to warm-start from at"),
        (["runner.load={tmp}/nowhere"], "nothing to warm-start from at"),
        (["--log_dir", "{full}"], "already holds checkpoints"),
    ],
)
def test_cli_errors_are_messages_not_tracebacks(full_run, tmp_path, capsys, argv, needle):
    (tmp_path / "empty").mkdir()
    (tmp_path / "no_checkpoints").mkdir()
    (tmp_path / "no_checkpoints" / "config.yaml").write_text((full_run.log_dir / "config.yaml").read_text())
    argv = [a.format(tmp=tmp_path, full=full_run.log_dir) for a in argv]
    if "--resume" not in argv:
        argv += TINY + ["--quiet"] + ([] if "--log_dir" in argv else ["--log_dir", str(tmp_path / "new")])
    assert train_main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_evaluation_rows_and_tensorboard_tags(full_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    rows = read_rows(full_run.log_dir)
    evals = [r for r in rows if "eval_reward" in r]
    assert [r["iteration"] for r in evals] == [3, 6]
    for row in evals:
        assert 1.0 <= row["eval_episode_length"] <= 50.0
        # inverted_pendulum pays 1 per step alive: the return is the length
        assert row["eval_reward"] == pytest.approx(row["eval_episode_length"], rel=1e-6)
    events = EventAccumulator(str(full_run.log_dir))
    events.Reload()
    assert [e.step for e in events.Scalars("Eval/episode_reward")] == [3, 6]
    assert [e.step for e in events.Scalars("Eval/episode_length")] == [3, 6]


def test_evaluation_equals_an_independent_deterministic_rollout(full_run):
    """The runner's eval number is the mean return of mean-action episodes from fold_in(eval_key, i)."""
    from strl_jax.play import make_rollout

    cfg = tiny_config()
    state = full_run.train_state
    env = build_programs(cfg).env.replace(num_envs=cfg.runner.num_eval_envs)
    key = jax.random.fold_in(run_keys(cfg)[1], 2 * K)
    returns, lengths, _, _ = make_rollout(env, cfg)(state.params, state.normalizers, key)
    row = read_rows(full_run.log_dir)[-1]
    assert row["eval_reward"] == pytest.approx(float(np.mean(returns)), rel=1e-5)
    assert row["eval_episode_length"] == pytest.approx(float(np.mean(lengths)), rel=1e-6)


def test_resume_from_an_explicit_older_checkpoint(full_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(full_run.log_dir, run)
    with pytest.warns(CheckpointWarning, match="moved newer checkpoints \\[6\\]"):
        code = train_main(["--resume", str(run), "--checkpoint", "4", "--quiet"])
    assert code == 0
    assert without_time(read_rows(run)) == without_time(read_rows(full_run.log_dir))
    with pytest.raises(CheckpointError, match="no checkpoints in"):
        restore_step(tmp_path / "nothing")


# ----------------------------------------------------------------------------- damage or bug
SMALL = {"train_state": {"w": np.arange(300, dtype=np.float32).reshape(3, 100), "b": np.ones(3, np.float32)}}


@pytest.fixture
def two_steps(tmp_path) -> Path:
    """Steps 1 and 2 of a small state (no training): step 2 is the one the tests damage."""
    manager = open_manager(tmp_path / "checkpoints")
    for step in (1, 2):
        save_checkpoint(manager, step, jax.tree.map(lambda x, s=step: x * s, SMALL), {"window": {}})
    close_manager(manager)
    return tmp_path / "checkpoints"


def restore_small(directory: Path, step: int | None = None):
    manager = open_manager(directory, read_only=True)
    try:
        abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), SMALL)
        return restore_checkpoint(manager, abstract, step)
    finally:
        manager.close()


def files(folder: Path, data_only: bool = False) -> list[Path]:
    """Files under `folder`; `data_only`: orbax's array data (its `d/` folders), not metadata."""
    return sorted(p for p in folder.rglob("*") if p.is_file() and (p.parent.name == "d" or not data_only))


ARRAY_FILE = r"state/(ocdbt\.process_0/)?d/\w+"  # orbax's array files, named at random
DAMAGE = {
    "meta_folder_missing": (lambda step: shutil.rmtree(step / "meta"), "its meta folder is missing"),
    "array_files_truncated": (
        lambda step: [
            f.write_bytes(f.read_bytes()[: f.stat().st_size // 2]) for f in files(step / "state", True)
        ],
        f"{ARRAY_FILE} is \\d+ bytes long, \\d+ were written",
    ),
    "array_files_zeroed": (
        lambda step: [f.write_bytes(bytes(f.stat().st_size)) for f in files(step / "state", True)],
        f"{ARRAY_FILE} does not hold the bytes that were written",
    ),
    "meta_truncated": (
        lambda step: [f.write_bytes(f.read_bytes()[:10]) for f in files(step / "meta")],
        "meta/commit_success.txt is 10 bytes long",
    ),
}


@pytest.mark.parametrize("name", list(DAMAGE))
def test_named_damage_falls_back_to_the_step_before(two_steps, name):
    damage, reason = DAMAGE[name]
    damage(two_steps / "2")
    with pytest.warns(
        CheckpointWarning, match=f"checkpoint 2 .* cannot be read \\(({reason}).*falling back to checkpoint 1"
    ):
        state, _, step = restore_small(two_steps)
    assert step == 1
    np.testing.assert_array_equal(np.asarray(state["train_state"]["w"]), SMALL["train_state"]["w"])
    with pytest.raises(CheckpointError, match=f"checkpoint 2 .* cannot be read \\(({reason})"):
        restore_small(two_steps, step=2)  # the step asked for is not replaced by another


def test_a_bug_while_restoring_is_not_taken_for_damage(two_steps, monkeypatch):
    """Any other failure propagates with its cause: resuming from an older step would hide it."""
    import strl_jax.checkpoints.orbax_checkpoints as checkpoint_module

    def broken(*args, **kwargs):
        raise KeyError("a restore bug")

    monkeypatch.setattr(checkpoint_module, "fill_from", broken)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CheckpointWarning)
        with pytest.raises(KeyError, match="a restore bug"):
            restore_small(two_steps)
    monkeypatch.setattr(
        checkpoint_module, "restore_raw", lambda *a, **k: (_ for _ in ()).throw(ValueError("bad"))
    )
    with pytest.raises(ValueError, match="^bad$"):
        restore_small(two_steps)
