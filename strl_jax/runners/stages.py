"""Two-stage runs (st_rl's TwoStageRunner): the first iterations learn from a demonstration
dataset, then the env takes over. The stage is host state, stored in every checkpoint's meta."""

from __future__ import annotations

from typing import Any

import jax

from strl_jax.buffers.rollout_dataset import load_dataset_arrays, pretrain_settings
from strl_jax.configs.schema import TrainConfig


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


def pretrain_dataset(cfg: TrainConfig, programs: Any) -> Any:
    """The demonstration dataset's arrays, replicated on the mesh (`buffers.rollout_dataset`)."""
    learner = programs.learner
    shapes = learner.policy_groups(learner.env.observation_shapes())
    settings = pretrain_settings(cfg.runner.pretrain_dataset)
    arrays = load_dataset_arrays(settings, shapes, learner.env.action_size, cfg.seed)
    replicated = jax.sharding.NamedSharding(programs.sharded.mesh, jax.sharding.PartitionSpec())
    return jax.tree.map(
        lambda x: jax.make_array_from_callback(x.shape, replicated, lambda idx: x[idx]), arrays
    )
