"""Rollout storage, returns and minibatching."""

from strl_jax.buffers.gae import bootstrap_timeouts, compute_gae, normalize_advantages
from strl_jax.buffers.minibatch import merge_time_env, minibatch_indices, select_columns
from strl_jax.buffers.transitions import Transition

__all__ = [
    "Transition",
    "bootstrap_timeouts",
    "compute_gae",
    "merge_time_env",
    "minibatch_indices",
    "normalize_advantages",
    "select_columns",
]
