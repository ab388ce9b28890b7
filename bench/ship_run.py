"""Ship a trained run in the repository (as `examples/go1_walk`): one checkpoint, its config, its
training log up to that checkpoint and the exported policy, small enough to commit.

A checkpoint holds the rollout state of every training env (MJX data and the reset pool: tens of
kB per Go1 env, about 170 MB at 8192 envs). `play`, `deploy` and `export` read only the params
and normalisers, so the shipped checkpoint keeps the first `--envs` envs of the rollout state
while its config keeps the run's `env.num_envs`: the folder is for playing, exporting and
deploying, not for resuming the run.

    python bench/ship_run.py RUN_DIR --checkpoint 1483 --out examples/go1_walk
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import jax
import numpy as np
import orbax.checkpoint as ocp

ROLLOUT = "rollout_state"
COPIED = ("config.yaml",)


def cut_rollout(raw: dict, layout: dict, envs: int) -> tuple[dict, dict]:
    """The stored state with every rollout-state leaf (and its `layout` entry: leaves stored as
    nothing or key data) cut to the first `envs` envs along its leading axis."""
    if envs < 1:
        raise SystemExit(f"error: --envs {envs}: keep at least one env of the rollout state")
    state = dict(raw)
    state[ROLLOUT] = jax.tree.map(lambda x: np.asarray(x)[:envs], raw[ROLLOUT])
    cut = {
        name: {**entry, "shape": [min(entry["shape"][0], envs), *entry["shape"][1:]]}
        if name.startswith(ROLLOUT + ".") and entry["shape"]
        else entry
        for name, entry in layout.items()
    }
    return state, cut


def log_rows_until(path: Path, iteration: int) -> list[str]:
    """metrics.jsonl's rows up to `iteration` (rows without one, such as evaluations, are kept
    when they come before it)."""
    rows = []
    for line in path.read_text().splitlines():
        row = json.loads(line)
        if row.get("iteration", 0) > iteration:
            break
        rows.append(line)
    return rows


def ship(run: Path, checkpoint: int, out: Path, envs: int, export: bool = True) -> list[Path]:
    """Write `out` (it must not exist) from `run`'s `checkpoint` (with `export`, the exported
    policy too); the written files."""
    from strl_jax.checkpoints.file_record import complete_record, record_items
    from strl_jax.checkpoints.orbax_checkpoints import CHECKPOINT_DIR, open_manager, restore_raw
    from strl_jax.export import export_run
    from strl_jax.inference import load_policy

    if out.exists():
        raise SystemExit(f"error: {out} exists; remove it first (the shipped folder is written whole)")
    source = open_manager(run / CHECKPOINT_DIR, read_only=True)
    steps = list(source.all_steps())
    if checkpoint not in steps:
        raise SystemExit(
            f"error: no checkpoint {checkpoint} in {run / CHECKPOINT_DIR}; there are {sorted(steps)}"
        )
    raw, meta = restore_raw(source, checkpoint)
    source.close()
    state, layout = cut_rollout(raw, meta["layout"], envs)
    out.mkdir(parents=True)
    for name in COPIED:
        shutil.copy2(run / name, out / name)
    if (run / "metrics.jsonl").is_file():
        (out / "metrics.jsonl").write_text(
            "\n".join(log_rows_until(run / "metrics.jsonl", checkpoint)) + "\n"
        )
    target = open_manager(out / CHECKPOINT_DIR)
    args = ocp.args.Composite(
        state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave({**meta, "layout": layout})
    )
    target.save(checkpoint, args=args, force=True)
    target.wait_until_finished()
    target.close()
    # the record of the step's files, which restores check (the run's own saves write it as they go)
    step_folder = out / CHECKPOINT_DIR / str(checkpoint)
    record_items(step_folder)
    complete_record(step_folder)
    if export:
        export_run(load_policy(out, checkpoint), out / "exported")
    return sorted(p for p in out.rglob("*") if p.is_file())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run", type=Path, help="the run folder (its config.yaml and checkpoints/)")
    p.add_argument("--checkpoint", type=int, required=True, help="the checkpoint (iteration) to ship")
    p.add_argument("--out", type=Path, required=True, help="the folder to write (must not exist)")
    p.add_argument("--envs", type=int, default=16, help="envs of the rollout state kept (default 16)")
    args = p.parse_args(argv)
    files = ship(args.run, args.checkpoint, args.out, args.envs)
    total = sum(f.stat().st_size for f in files)
    print(f"{args.out}: {len(files)} files, {total / 2**20:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
