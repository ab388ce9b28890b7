"""Two-stage runs (st_rl's TwoStageRunner): the first iterations learn from a demonstration
dataset replayed as their rollout (`train_loops.dataset_rollout.DatasetSource`, with the dataset's
part `agents.demonstrations.DatasetPart`), then the env takes over. The stage is host state,
stored in every checkpoint's meta."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

from strl_jax.buffers.rollout_dataset import load_dataset_arrays, pretrain_settings
from strl_jax.configs.schema import TrainConfig
from strl_jax.train_loops.dataset_rollout import DatasetSource

# TensorBoard sections of what the stages add to the rows.
STAGE_SECTIONS = {"pretraining": "Perf"}


def fresh_stage() -> dict[str, Any]:
    """Pretraining progress: iterations that learned from the dataset, and whether the env has
    taken over (the iterations ran out or the dataset was used up)."""
    return {"pretrained": 0, "over": False}


def pretraining(runner: Any, stage: dict[str, Any], iteration: int) -> bool:
    """Whether the iteration after `iteration` learns from the dataset."""
    return runner.pretrain_iterations > 0 and not stage["over"] and iteration < runner.pretrain_iterations


def advance_stage(stage: dict[str, Any], runner: Any, metrics: dict, iteration: int) -> None:
    """Count a pretraining iteration (its metrics report `dataset_used_up`); the env takes over
    after `pretrain_iterations` of them, or once the dataset is used up."""
    used_up = metrics["scalars"].get("dataset_used_up")
    if used_up is None:
        return
    stage["pretrained"] += 1
    if float(used_up) > 0 or iteration >= runner.pretrain_iterations:
        stage["over"] = True


def dataset_iterations(stage: dict[str, Any]) -> int:
    """Iterations that learned from the dataset (they took no env steps)."""
    return stage["pretrained"]


def stage_row(metrics: dict) -> dict[str, float]:
    """What a metrics row of the iteration with `metrics` says of its stage: `pretraining: 1` on
    the dataset's iterations."""
    return {"pretraining": 1.0} if "dataset_used_up" in metrics["scalars"] else {}


def pretrain_source(cfg: TrainConfig, programs: Any) -> DatasetSource:
    """The demonstration dataset's arrays, replicated on the mesh (`buffers.rollout_dataset`), as
    the rollout source of the pretraining iterations, with their fixed rate."""
    learner = programs.learner
    shapes = learner.policy_groups(learner.env.observation_shapes())
    settings = pretrain_settings(cfg.runner.pretrain_dataset)
    arrays = load_dataset_arrays(settings, shapes, learner.env.action_size, cfg.seed)
    replicated = jax.sharding.NamedSharding(programs.sharded.mesh, jax.sharding.PartitionSpec())
    arrays = jax.tree.map(
        lambda x: jax.make_array_from_callback(x.shape, replicated, lambda idx: x[idx]), arrays
    )
    return DatasetSource(dataset=arrays, fixed_rate=settings.learning_rate)


def stage_programs(cfg: TrainConfig, programs: Any, stage: dict[str, Any], iteration: int) -> Callable:
    """`next_iteration(iteration, train_state, rollout_state) -> (train_state', rollout_state',
    metrics)` of a loop that starts after `iteration`: on the dataset while the stage lasts (its
    arrays loaded once, here), then in the env."""
    source = pretrain_source(cfg, programs) if pretraining(cfg.runner, stage, iteration) else None

    def next_iteration(done: int, train_state: Any, rollout_state: Any) -> Any:
        if source is not None and pretraining(cfg.runner, stage, done):
            return programs.sharded.on_source(train_state, rollout_state, source)
        return programs.env_iteration(train_state, rollout_state)

    return next_iteration
