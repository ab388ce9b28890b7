"""Damaged checkpoints, systematically: every file of the newest checkpoint in turn deleted, cut
short and overwritten with random bytes. Resume falls back to the checkpoint before it with a
warning naming the damaged file, and repeats the straight run's rows from there; with no intact
checkpoint the command exits 2 naming each checkpoint's damage, without a traceback.

One straight run is trained per module (checkpoints 2 and 4); each case damages a copy of it, so
a case costs a restore and two iterations of an already compiled program.
"""

from __future__ import annotations

import re
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path

import jax
import numpy as np
import pytest
from test_checkpoint_resume import assert_trees_equal, read_rows, without_time
from tiny_config import tiny

import strl_jax.checkpoints.orbax_checkpoints as checkpoints
from strl_jax.checkpoints.file_record import RECORD, record_items
from strl_jax.checkpoints.orbax_checkpoints import (
    CheckpointError,
    CheckpointWarning,
    close_manager,
    open_manager,
    restore_checkpoint,
    save_checkpoint,
)
from strl_jax.configs.loader import resolve_config
from strl_jax.runners.runner import train
from strl_jax.train import main as train_main

NEWEST, BEFORE = 4, 2  # the straight run's checkpoints (save_interval 2, keep 2)
OVERRIDES = tiny(f"runner.max_iterations={NEWEST}")

# Every file of a checkpoint step, as patterns: orbax's array files are named at random and their
# number varies from save to save, so each `d/*` pattern stands for every file in that folder, each
# damaged in turn. `test_the_patterns_cover_every_file` keeps the list complete.
FILES = (
    "_CHECKPOINT_METADATA",
    "commit_success.txt",
    RECORD,
    "meta/commit_success.txt",
    "meta/metadata",
    "state/_METADATA",
    "state/commit_success.txt",
    "state/d/*",
    "state/manifest.ocdbt",
    "state/ocdbt.process_0/d/*",
    "state/ocdbt.process_0/manifest.ocdbt",
)


def delete(path: Path) -> None:
    path.unlink()


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def overwrite(path: Path) -> None:
    """Random bytes of the file's own length: only its contents change."""
    path.write_bytes(np.random.default_rng(0).bytes(path.stat().st_size))


DAMAGES: dict[str, Callable[[Path], None]] = {
    "deleted": delete,
    "truncated": truncate,
    "random_bytes": overwrite,
}


def step_files(step: Path) -> list[str]:
    return sorted(p.relative_to(step).as_posix() for p in step.rglob("*") if p.is_file())


def matching(step: Path, pattern: str) -> list[str]:
    """The files of `step` (relative paths) that `pattern` stands for."""
    return [
        name
        for name in step_files(step)
        if Path(name).match(pattern) and name.count("/") == pattern.count("/")
    ]


def config():
    return resolve_config("inverted_pendulum", overrides=OVERRIDES)


@pytest.fixture(scope="module")
def straight_run(tmp_path_factory):
    """The run every case damages a copy of, and compares its rows with."""
    return train(config(), tmp_path_factory.mktemp("straight"), verbose=False)


def test_the_patterns_cover_every_file(straight_run):
    for step in (NEWEST, BEFORE):
        folder = straight_run.log_dir / "checkpoints" / str(step)
        covered = [name for pattern in FILES for name in matching(folder, pattern)]
        assert sorted(covered) == step_files(folder)  # each file once
        assert all(matching(folder, pattern) for pattern in FILES)  # no pattern stands for nothing


def resume_with_one_damaged_file(source: Path, tmp_path: Path, name: str, damage: str):
    """Resume a copy of `source` whose newest checkpoint has file `name` damaged."""
    run = tmp_path / name.replace("/", "_")
    shutil.copytree(source, run)
    DAMAGES[damage](run / "checkpoints" / str(NEWEST) / name)
    fallback = f"; falling back to checkpoint {BEFORE}"
    expected = f"checkpoint {NEWEST} in .* cannot be read \\({re.escape(name)} .*{fallback}"
    with pytest.warns(CheckpointWarning, match=expected):
        resumed = train(config(), run, verbose=False, resume=True)
    return run, resumed


@pytest.mark.parametrize("damage", list(DAMAGES))
@pytest.mark.parametrize("pattern", FILES)
def test_a_damaged_file_falls_back_to_the_checkpoint_before(straight_run, tmp_path, pattern, damage):
    names = matching(straight_run.log_dir / "checkpoints" / str(NEWEST), pattern)
    assert names
    for name in names:
        run, resumed = resume_with_one_damaged_file(straight_run.log_dir, tmp_path, name, damage)
        assert [r["iteration"] for r in resumed.rows] == list(range(BEFORE + 1, NEWEST + 1)), name
        assert without_time(read_rows(run)) == without_time(read_rows(straight_run.log_dir)), name
        assert_trees_equal(resumed.train_state, straight_run.train_state)


def test_no_intact_checkpoint_exits_2_naming_each_damage(straight_run, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(straight_run.log_dir, run)
    newest, before = (run / "checkpoints" / str(s) for s in (NEWEST, BEFORE))
    overwrite(newest / "meta/metadata")
    array = matching(before, "state/d/*")[0]
    delete(before / array)

    with pytest.warns(CheckpointWarning):
        code = train_main(["--resume", str(run), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert f"error: no readable checkpoint in {str(run / 'checkpoints')!r}:\n" in err
    assert f"\n  checkpoint {NEWEST}: meta/metadata does not hold the bytes that were written\n" in err
    assert f"\n  checkpoint {BEFORE}: {array} is missing\n" in err


# ------------------------------------------------------------------- steps without a full record
SMALL = {"w": np.arange(300, dtype=np.float32).reshape(3, 100)}


def save_small(directory: Path) -> None:
    manager = open_manager(directory)
    for step in (1, 2):
        save_checkpoint(manager, step, {"w": SMALL["w"] * step}, {"window": {}})
    close_manager(manager)


def restore_small(directory: Path):
    manager = open_manager(directory, read_only=True)
    try:
        abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), SMALL)
        return restore_checkpoint(manager, abstract)
    finally:
        manager.close()


def test_a_step_whose_writer_died_after_the_commit_is_intact(tmp_path):
    """Killed between orbax's commit and the record's completion: the record lists the item files
    only, and the commit's own files (orbax's bookkeeping) are not needed to restore."""
    save_small(tmp_path)
    step = tmp_path / "2"
    record_items(step)  # the record as it stands before the commit
    (step / "commit_success.txt").unlink()
    with warnings.catch_warnings():
        warnings.simplefilter("error", CheckpointWarning)
        state, _, found = restore_small(tmp_path)
    assert found == 2
    np.testing.assert_array_equal(state["w"], SMALL["w"] * 2)


def test_a_step_written_before_records_falls_back_on_any_read_failure(tmp_path, monkeypatch):
    """Steps of format 2 hold no record: they are read in full, and whatever that raises (here a
    `UnicodeDecodeError` from orbax's JSON reader) is their damage."""
    monkeypatch.setattr(checkpoints, "FORMAT_VERSION", 2)
    save_small(tmp_path)
    for step in (1, 2):
        (tmp_path / str(step) / RECORD).unlink()
    overwrite(tmp_path / "2" / "meta" / "metadata")
    expected = "checkpoint 2 .* cannot be read \\(its meta item cannot be read \\(UnicodeDecodeError: "
    with pytest.warns(CheckpointWarning, match=expected + ".*falling back to checkpoint 1"):
        state, _, found = restore_small(tmp_path)
    assert found == 1
    np.testing.assert_array_equal(state["w"], SMALL["w"])
    (tmp_path / "1" / "state" / "manifest.ocdbt").unlink()
    with pytest.raises(
        CheckpointError, match="checkpoint 1: state/.* cannot be read \\(ValueError: NOT_FOUND"
    ):
        restore_small(tmp_path)
