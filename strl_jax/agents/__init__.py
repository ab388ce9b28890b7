"""Algorithms as loss terms, learning-rate rules and rollout hooks."""

from strl_jax.agents.ppo import (
    PPOBatch,
    adaptive_learning_rate,
    make_optimizer,
    surrogate_loss,
    value_loss,
    weighted_total,
)

__all__ = [
    "PPOBatch",
    "adaptive_learning_rate",
    "make_optimizer",
    "surrogate_loss",
    "value_loss",
    "weighted_total",
]
