"""Rollout storage, returns and minibatching."""

from strl_jax.buffers.gae import bootstrap_timeouts, compute_gae, normalize_advantages
from strl_jax.buffers.minibatch import flatten_time_env, shuffle_minibatches
from strl_jax.buffers.transitions import Transition

__all__ = [
    "Transition",
    "bootstrap_timeouts",
    "compute_gae",
    "flatten_time_env",
    "normalize_advantages",
    "shuffle_minibatches",
]
