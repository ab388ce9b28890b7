"""Where a run's loop starts: fresh, resumed from its own checkpoints, or warm-started from
another run's (or an rsl_rl/st_rl `.pt` file's) params and normalisers."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from strl_jax.checkpoints.orbax_checkpoints import (
    CheckpointError,
    load_params_and_normalizers,
    restore_checkpoint,
    supersede_after,
)
from strl_jax.checkpoints.torch_checkpoints import load_torch_params_and_normalizers
from strl_jax.checkpoints.tree_layout import as_nested_dict
from strl_jax.configs.schema import TrainConfig
from strl_jax.runners.devices import is_primary, local_copy, sync_processes
from strl_jax.runners.members import Member, run_keys
from strl_jax.runners.stages import fresh_stage
from strl_jax.user_functions import import_function


def initial_state(
    cfg: TrainConfig,
    programs: Any,
    members: list[Member],
    log_dir: Path,
    resume: bool,
    checkpoint: int | None,
    load: str | Path | None,
) -> tuple[Any, Any, dict[str, Any]]:
    """`(train_state, rollout_state, run meta)` to start the loop from: the meta holds the elapsed
    seconds (`wall_time`) and the two-stage `stage` (`runners.stages`); each member's logging
    window is set from its checkpoint."""
    if resume:
        states, meta = restore_members(programs, members, checkpoint)
        meta = {"wall_time": float(meta["wall_time"]), "stage": meta.get("stage", fresh_stage())}
        return states["train_state"], states["rollout_state"], meta
    for member in members:
        if member.manager.all_steps():
            raise CheckpointError(
                f"{str(member.log_dir)!r} already holds checkpoints; continue that run with --resume "
                f"{log_dir} or choose another --log_dir"
            )
    init_key = jnp.asarray(programs.axis.stack([run_keys(m.cfg)[0] for m in members]))
    fresh = {"wall_time": 0.0, "stage": fresh_stage()}
    if load is None:
        train_state, rollout_state = programs.init(init_key)
        return train_state, rollout_state, fresh
    train_state, rollout_state = warm_started(cfg, programs, len(members), init_key, load)
    return train_state, rollout_state, fresh


def warm_started(cfg: TrainConfig, programs: Any, count: int, init_key: jax.Array, load: str | Path) -> Any:
    """Fresh states whose params and normalisers are those of `load` (every member the same)."""
    abstract, _ = jax.eval_shape(programs.learner.init, jax.random.PRNGKey(0))
    # a file is an rsl_rl/st_rl torch checkpoint, a folder a strl_jax run
    read = load_torch_params_and_normalizers if Path(load).is_file() else load_params_and_normalizers
    if not cfg.runner.ckpt_manipulator:
        params, normalizers, _ = read(load, abstract)  # checked before compiling init
        train_state, rollout_state = programs.init(init_key)
    else:
        train_state, rollout_state = programs.init(init_key)
        params, normalizers, _ = read(
            load,
            abstract,
            manipulate=checkpoint_manipulator(cfg, programs.axis.view(train_state, 0)),
            manipulator_name=f"runner.ckpt_manipulator {cfg.runner.ckpt_manipulator!r}",
        )
    params, normalizers = programs.axis.stack([(params, normalizers)] * count)
    return warm_start(train_state, params, normalizers, programs), rollout_state


def restore_members(
    programs: Any, members: list[Member], checkpoint: int | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Every member's state from the newest checkpoint step they all hold (or `checkpoint`),
    stacked for a population; newer steps are moved aside and metrics rows after it dropped."""
    train_abs, rollout_abs = jax.eval_shape(programs.learner.init, jax.random.PRNGKey(0))
    abstract = {"train_state": train_abs, "rollout_state": rollout_abs}
    placed = {
        "train_state": programs.sharded.train_sharding,
        "rollout_state": programs.sharded.rollout_sharding,
    }
    stacked = programs.axis.stacked
    shardings = None if stacked else placed  # a population's are read to host, stacked, then placed
    common = sorted(set.intersection(*(set(m.manager.all_steps()) for m in members)), reverse=True)
    if stacked and not common:
        raise CheckpointError(f"the members of {str(members[0].log_dir.parent)!r} share no checkpoint step")
    candidates: list[int | None] = [checkpoint] if checkpoint is not None or not stacked else common
    for i, step in enumerate(candidates):
        try:
            restored = [restore_checkpoint(m.manager, abstract, step, shardings) for m in members]
            break
        except CheckpointError:
            if checkpoint is not None or not stacked or i + 1 == len(candidates):
                raise
    found = restored[0][2]
    for member, (_, meta, _) in zip(members, restored, strict=True):
        member.window = meta["window"]
        if is_primary():
            supersede_after(member.manager, member.log_dir, found)
            truncate_metrics(member.log_dir / "metrics.jsonl", found)
    sync_processes("strl_jax_resume")
    for member in members:
        member.manager.reload()
    if not stacked:
        return restored[0][0], restored[0][1]
    states = programs.axis.stack([jax.device_get(state) for state, _, _ in restored])
    return jax.jit(lambda tree: tree, out_shardings=placed)(states), restored[0][1]


def truncate_metrics(path: Path, iteration: int) -> None:
    """Drop rows after `iteration` (written after the checkpoint a run continues from)."""
    if not path.exists():
        return
    kept = []
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # a row cut short by a killed process
        if row.get("iteration", 0) <= iteration:
            kept.append(line)
    tmp = path.with_suffix(".jsonl.tmp")
    tmp.write_text("".join(line + "\n" for line in kept))
    os.replace(tmp, path)


def checkpoint_manipulator(cfg: TrainConfig, fresh: Any) -> Callable[[dict], dict]:
    """st_rl's `ckpt_manipulator`: the user's `fn(loaded, current, **kwargs)`, with `current`
    this run's freshly initialised params and normalisers as nested dicts of numpy arrays."""
    fn = import_function(cfg.runner.ckpt_manipulator, "runner.ckpt_manipulator")
    params, normalizers = jax.device_get(local_copy((fresh.params, fresh.normalizers)))
    current = {"params": as_nested_dict(params), "normalizers": as_nested_dict(normalizers)}
    return lambda loaded: fn(loaded, current, **cfg.runner.ckpt_manipulator_kwargs)


def warm_start(train_state: Any, params: Any, normalizers: Any, programs: Any) -> Any:
    """Another run's params and normalisers with a fresh optimiser, learning rate and counters."""
    shardings = programs.sharded.train_sharding
    place = lambda x, s: jax.make_array_from_callback(np.shape(x), s, lambda idx: np.asarray(x)[idx])  # noqa: E731
    params = jax.tree.map(place, params, shardings.params)
    normalizers = jax.tree.map(place, normalizers, shardings.normalizers)
    init_optimizer = jax.jit(programs.init_optimizer, out_shardings=shardings.opt_state)
    opt_state = init_optimizer(params, train_state.parts)
    return train_state.replace(params=params, normalizers=normalizers, opt_state=opt_state)
