"""Checkpoints of every Brax backend's state, and saves that fail.

MJX physics states hold zero-size arrays (e.g. `act` of a model without actuator activations),
which orbax refuses; a run on any backend must checkpoint and continue exactly. A save that
fails stops the run with one `CheckpointError` naming the folder and the cause, and leaves the
previous checkpoint loadable.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import resource
import signal
import threading
from pathlib import Path

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest
from test_checkpoint_resume import assert_trees_equal, read_rows, without_time

from strl_jax.checkpoints.orbax_checkpoints import (
    CHECKPOINT_DIR,
    CheckpointError,
    close_manager,
    finish_saves,
    open_manager,
    read_meta,
    restore_checkpoint,
    save_checkpoint,
)
from strl_jax.checkpoints.tree_layout import check_signatures
from strl_jax.configs.loader import resolve_config
from strl_jax.errors import CheckpointMismatchError
from strl_jax.records.run_logger import RunLogger
from strl_jax.runners.runner import build_programs, run_keys, train
from strl_jax.train import main as train_main

N = 3  # iterations of the uninterrupted runs; the split runs stop after 1 and resume
BACKENDS = ["mjx", "spring"]  # MJX has zero-size leaves; spring is the cheapest of the others


def backend_overrides(backend: str) -> list[str]:
    return [
        f"env.backend={backend}",
        "env.num_envs=4",
        "env.episode_length=20",
        "policy.actor_hidden_dims=[8]",
        "policy.critic_hidden_dims=[8]",
        "runner.num_steps_per_env=4",
        "algorithm.num_mini_batches=1",
        "algorithm.num_learning_epochs=1",
        "runner.save_interval=1",
        "runner.max_checkpoints_to_keep=2",
        "runner.eval_interval=0",
        "runner.print_interval=1000",
    ]


def backend_config(backend: str, *overrides: str):
    return resolve_config("inverted_pendulum", overrides=backend_overrides(backend) + list(overrides))


def restore_run(log_dir: Path, backend: str, step: int | None = None):
    cfg = backend_config(backend)
    train_abs, rollout_abs = jax.eval_shape(build_programs(cfg).init, run_keys(cfg)[0])
    manager = open_manager(Path(log_dir) / CHECKPOINT_DIR, read_only=True)
    try:
        return restore_checkpoint(manager, {"train_state": train_abs, "rollout_state": rollout_abs}, step)
    finally:
        manager.close()


def orbax_writer_threads() -> list[threading.Thread]:
    """Orbax's save helper threads still running (a failed save must not strand any)."""
    from orbax.checkpoint._src.futures import future

    return [t for t in threading.enumerate() if isinstance(t, future._SignalingThread) and t.is_alive()]


@pytest.fixture(scope="module")
def full_runs(tmp_path_factory):
    """`backend -> result` of N iterations without a stop, checkpointing every iteration (each
    backend trained once per module, on first use)."""
    results = {}

    def get(backend: str):
        if backend not in results:
            log_dir = tmp_path_factory.mktemp(f"full_{backend}")
            results[backend] = train(
                backend_config(backend, f"runner.max_iterations={N}"), log_dir, verbose=False
            )
        return results[backend]

    return get


@pytest.mark.parametrize("backend", BACKENDS)
def test_resume_equals_uninterrupted_run(full_runs, backend, tmp_path):
    full = full_runs(backend)
    first = train(backend_config(backend, "runner.max_iterations=1"), tmp_path, verbose=False)
    assert first.checkpoint == 1
    assert train_main(["--resume", str(tmp_path), "--quiet", f"runner.max_iterations={N}"]) == 0

    assert [r["iteration"] for r in read_rows(tmp_path)] == list(range(1, N + 1))
    assert without_time(read_rows(tmp_path)) == without_time(read_rows(full.log_dir))
    state_split, _, step = restore_run(tmp_path, backend)
    assert step == N
    assert_trees_equal(state_split["train_state"], full.train_state)
    assert_trees_equal(state_split["rollout_state"], full.rollout_state)


@pytest.mark.parametrize("backend", BACKENDS)
def test_checkpoint_restores_the_exact_state(full_runs, backend):
    """Structure, shapes, dtypes and values, zero-size physics arrays included."""
    full = full_runs(backend)
    state, meta, step = restore_run(full.log_dir, backend)
    expected = {"train_state": full.train_state, "rollout_state": full.rollout_state}
    assert step == N
    assert jax.tree.structure(state) == jax.tree.structure(expected)
    for (path, a), (_, b) in zip(
        jax.tree_util.tree_leaves_with_path(expected), jax.tree_util.tree_leaves_with_path(state), strict=True
    ):
        assert (np.shape(b), np.asarray(b).dtype) == (a.shape, a.dtype), jax.tree_util.keystr(path)
    assert_trees_equal(state, expected)
    empty = [name for name, entry in meta["layout"].items() if entry["stored"] == "nothing"]
    if backend == "mjx":
        assert "rollout_state.env_state.brax_state.pipeline_state.act" in empty
        assert meta["layout"]["rollout_state.env_state.brax_state.pipeline_state.act"]["shape"] == [4, 0]
    else:
        assert empty == []


def test_zero_size_leaves_of_every_dtype_round_trip(tmp_path):
    tree = {
        "physics": {
            "act": np.zeros((4, 0), np.float32),
            "ten_wrapadr": np.zeros((4, 0), np.int32),
            "eq_active": np.zeros((4, 0), bool),
            "keys": np.zeros((0, 2), np.uint32),
            "qpos": np.arange(8, dtype=np.float32).reshape(4, 2),
        },
        "info": {"done": np.array([True, False, True, True]), "rng": np.array([[1, 2**32 - 1]], np.uint32)},
        "typed_keys": jax.random.split(jax.random.key(7), 3),
        "no_typed_keys": jax.random.split(jax.random.key(7), 0),
        "steps": np.int32(5),
    }
    manager = open_manager(tmp_path / CHECKPOINT_DIR)
    save_checkpoint(manager, 1, {"state": tree}, {})
    finish_saves(manager)
    state, _, _ = restore_checkpoint(manager, {"state": jax.eval_shape(lambda: tree)})
    close_manager(manager)

    restored = state["state"]
    assert jax.tree.structure(restored) == jax.tree.structure(tree)
    for (path, a), (_, b) in zip(
        jax.tree_util.tree_leaves_with_path(tree), jax.tree_util.tree_leaves_with_path(restored), strict=True
    ):
        assert (np.shape(b), b.dtype) == (np.shape(a), a.dtype), jax.tree_util.keystr(path)
    typed = ("typed_keys", "no_typed_keys")
    assert_trees_equal(
        {k: v for k, v in restored.items() if k not in typed},
        {k: v for k, v in tree.items() if k not in typed},
    )
    for name in typed:
        np.testing.assert_array_equal(jax.random.key_data(restored[name]), jax.random.key_data(tree[name]))


def test_zero_size_shapes_are_checked_like_the_others(tmp_path):
    manager = open_manager(tmp_path / CHECKPOINT_DIR)
    save_checkpoint(manager, 1, {"state": {"act": np.zeros((4, 0), np.float32), "q": np.ones(2)}}, {})
    finish_saves(manager)
    other = {
        "state": {
            "act": jax.ShapeDtypeStruct((8, 0), np.float32),
            "q": jax.ShapeDtypeStruct((2,), np.float64),
        }
    }
    with pytest.raises(
        CheckpointMismatchError,
        match=r"state.act: checkpoint has shape \(4, 0\) float32, "
        r"the config needs shape \(8, 0\) float32",
    ):
        restore_checkpoint(manager, other)
    close_manager(manager)


def test_unstorable_leaf_is_named_before_anything_is_written(tmp_path):
    manager = open_manager(tmp_path / CHECKPOINT_DIR)
    with pytest.raises(CheckpointError, match="state entry state.info.name cannot be checkpointed"):
        save_checkpoint(manager, 1, {"state": {"info": {"name": np.array(["a", "b"])}}}, {})
    close_manager(manager)
    assert not [p for p in (tmp_path / CHECKPOINT_DIR).iterdir() if p.name[0].isdigit()]


def test_failing_save_reports_the_cause_and_keeps_the_previous_step(tmp_path, monkeypatch):
    manager = open_manager(tmp_path / CHECKPOINT_DIR)
    save_checkpoint(manager, 1, {"x": np.arange(3.0)}, {})
    finish_saves(manager)

    def disk_full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ocp.CheckpointManager, "save", disk_full)
    with pytest.raises(CheckpointError) as caught:
        save_checkpoint(manager, 2, {"x": np.arange(3.0) + 1}, {})
    monkeypatch.undo()
    close_manager(manager)
    message = str(caught.value)
    assert f"checkpoint 2 could not be written to {str(tmp_path / CHECKPOINT_DIR)!r}" in message
    assert "No space left on device" in message
    assert f"checkpoint 1 is intact: continue from it with --resume {tmp_path}" in message
    manager = open_manager(tmp_path / CHECKPOINT_DIR, read_only=True)
    state, meta, step = restore_checkpoint(manager, {"x": jax.ShapeDtypeStruct((3,), np.float64)})
    manager.close()
    assert step == 1 and meta["iteration"] == 1
    np.testing.assert_array_equal(state["x"], np.arange(3.0))


def test_run_whose_save_fails_in_the_background_exits_with_one_message(
    full_runs, tmp_path, monkeypatch, capsys, caplog
):
    """Orbax cannot create step 2's folder (a dangling link sits where it goes), which fails in
    its writer threads: the CLI exits 2 with one line, no orbax thread is left waiting, and once
    the path is cleared the run resumes from checkpoint 1 and ends like an uninterrupted run."""
    backend = BACKENDS[-1]
    checkpoints = tmp_path / CHECKPOINT_DIR
    blocker = checkpoints / "2.orbax-checkpoint-tmp"
    progress = RunLogger.progress

    def block_step_2(self, iteration):
        if iteration == 2:
            blocker.symlink_to(tmp_path / "nowhere")
        progress(self, iteration)

    monkeypatch.setattr(RunLogger, "progress", block_step_2)
    argv = ["--log_dir", str(tmp_path), "--quiet", *backend_overrides(backend), f"runner.max_iterations={N}"]
    with caplog.at_level(logging.INFO):
        code = train_main(argv)
    monkeypatch.undo()
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("error:") == 1 and "Traceback" not in err
    assert f"error: checkpoint 2 could not be written to {str(checkpoints)!r} (FileExistsError" in err
    assert f"checkpoint 1 is intact: continue from it with --resume {tmp_path}" in err
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR and "orbax" in r.pathname]
    assert orbax_writer_threads() == []
    assert meta_iteration(checkpoints, 1) == 1

    blocker.unlink()
    assert train_main(["--resume", str(tmp_path), "--quiet"]) == 0
    reference = full_runs(backend)
    assert without_time(read_rows(tmp_path)) == without_time(read_rows(reference.log_dir))
    state, _, step = restore_run(tmp_path, backend)
    assert step == N
    assert_trees_equal(state["train_state"], reference.train_state)
    assert_trees_equal(state["rollout_state"], reference.rollout_state)


def meta_iteration(directory: Path, step: int) -> int:
    manager = open_manager(directory, read_only=True)
    try:
        return read_meta(manager, step)["iteration"]
    finally:
        manager.close()


@contextlib.contextmanager
def file_size_limit(limit: int):
    """Writes past `limit` bytes fail (EFBIG), for root as for anyone: a folder that refuses
    writes, as a read-only folder (which root writes into) or a full disk do."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # else the kernel stops the process
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)


def test_a_folder_that_refuses_writes_is_reported_with_the_intact_step(tmp_path):
    """The arrays of step 2 cannot be written (the failure comes from orbax's background writer):
    one `CheckpointError` with the cause and the step still intact, no writer thread left."""
    manager = open_manager(tmp_path / CHECKPOINT_DIR)
    save_checkpoint(manager, 1, {"x": np.arange(3.0)}, {})
    finish_saves(manager)
    try:
        with file_size_limit(4096), pytest.raises(CheckpointError) as failed:
            save_checkpoint(manager, 2, {"x": np.arange(300_000.0)}, {})
            finish_saves(manager)
    finally:
        close_manager(manager)
    message = str(failed.value)
    assert message.startswith(f"checkpoint 2 could not be written to {str(tmp_path / CHECKPOINT_DIR)!r} (")
    assert "(ValueError: OUT_OF_RANGE: Error writing" in message and "checkpoint 1 is intact" in message
    assert orbax_writer_threads() == []
    assert meta_iteration(tmp_path / CHECKPOINT_DIR, 1) == 1


def test_a_checkpoint_without_the_initial_state_pool_names_the_setting_to_resume_with():
    key = ((16, 2), "uint32")
    written_in_step = {"rollout_state.env_state.reset_key": key}
    with_pool = {
        **written_in_step,
        "rollout_state.env_state.pool_used": ((16,), "bool"),
        "rollout_state.env_state.pool.obs": ((16, 4), "float32"),
    }
    with pytest.raises(CheckpointMismatchError, match="resume with the override env.auto_reset=in_step"):
        check_signatures(with_pool, written_in_step, "run/2")
    with pytest.raises(CheckpointMismatchError, match="resume with the override env.auto_reset=pool"):
        check_signatures(written_in_step, with_pool, "run/2")
    with pytest.raises(CheckpointMismatchError) as other:
        check_signatures(written_in_step, {"rollout_state.env_state.reset_key": ((8, 2), "uint32")}, "run/2")
    assert "auto_reset" not in str(other.value)
