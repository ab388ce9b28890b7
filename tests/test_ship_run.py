"""`bench/ship_run.py` writes a run small enough to commit that plays as the original: the same
train state (params, normalisers, optimiser) and meta, the rollout state cut to a few envs, the
step's record of its files (which every restore checks) written. Its
export is `strl_jax.export`'s (tested in its own module), so it is left out here."""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import ship_run  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "go1_walk_gpu"
STEP = 438


def test_the_shipped_run_keeps_the_policy_and_a_cut_rollout_state(tmp_path):
    from strl_jax.checkpoints.file_record import RECORD
    from strl_jax.checkpoints.orbax_checkpoints import check_step, open_manager, restore_raw

    out = tmp_path / "shipped"
    files = ship_run.ship(EXAMPLE, STEP, out, envs=2, export=False)
    assert out / "config.yaml" in files
    assert len((out / "metrics.jsonl").read_text().splitlines()) == STEP
    # the step holds the record of its files, as a run's own steps do, and its files match it
    assert (out / "checkpoints" / str(STEP) / RECORD).is_file()
    check_step(open_manager(out / "checkpoints", read_only=True), STEP)
    raw, meta = restore_raw(open_manager(out / "checkpoints", read_only=True), STEP)
    assert {x.shape[0] for x in jax.tree.leaves(raw["rollout_state"])} == {2}
    cut = [e["shape"][0] for n, e in meta["layout"].items() if n.startswith("rollout_state.")]
    assert cut and set(cut) == {2}
    original, original_meta = restore_raw(open_manager(EXAMPLE / "checkpoints", read_only=True), STEP)
    flat = lambda tree: jax.tree_util.tree_leaves_with_path(tree)  # noqa: E731
    for (path, a), (_, b) in zip(flat(original["train_state"]), flat(raw["train_state"]), strict=True):
        np.testing.assert_array_equal(a, b, err_msg=jax.tree_util.keystr(path))
    assert {k: v for k, v in meta.items() if k != "layout"} == {
        k: v for k, v in original_meta.items() if k != "layout"
    }


def test_ship_run_refuses_a_missing_checkpoint_and_an_existing_folder(tmp_path):
    with pytest.raises(SystemExit, match=r"no checkpoint 7 in .*; there are \[438\]"):
        ship_run.ship(EXAMPLE, 7, tmp_path / "new", envs=2)
    with pytest.raises(SystemExit, match="exists; remove it first"):
        ship_run.ship(EXAMPLE, STEP, tmp_path, envs=2)
    with pytest.raises(SystemExit, match="keep at least one env"):
        ship_run.cut_rollout({"rollout_state": {}}, {}, 0)
