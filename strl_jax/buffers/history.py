"""The update's batch over more than one rollout (st_rl's `buffer_dilation_ratio`,
`QueueRolloutStorage`): the newest rollout and the `chunks - 1` before it.

Each stored rollout keeps what it was acting with: raw observations, executed actions and their
log-probabilities, advantages and returns computed when it was collected, the parts' fields and
the recurrent state it started from. In the update the rollouts sit side by side on the env axis
(`[T, N * chunks]`, env-major), so every column is still one env's contiguous sequence from its
own initial hidden state, feed-forward and recurrent minibatching work unchanged, and the
observations are normalised with the current statistics. Until `chunks - 1` rollouts have been
seen, the newest rollout fills the empty places (st_rl grows its buffer instead: the same data,
with static shapes).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

ENV_AXIS = 1  # every leaf of a PPOBatch: [T, N, ...] steps, [L, N, H] hidden states


@struct.dataclass
class RolloutHistory:
    batch: Any  # a PPOBatch (raw observations) whose leaves have [..., N, chunks - 1, ...]
    filled: jax.Array  # int32: how many of the places hold a rollout already


def empty_history(abstract_batch: Any, chunks: int) -> RolloutHistory:
    """Zeros for `chunks - 1` rollouts shaped like `abstract_batch` (a raw, `[T, N]` PPOBatch)."""

    def zeros(x):
        shape = (*x.shape[: ENV_AXIS + 1], chunks - 1, *x.shape[ENV_AXIS + 1 :])
        return jnp.zeros(shape, x.dtype)

    return RolloutHistory(batch=jax.tree.map(zeros, abstract_batch), filled=jnp.zeros((), jnp.int32))


def with_history(batch: Any, history: RolloutHistory) -> tuple[Any, RolloutHistory]:
    """`(the batch over all stored rollouts and this one, the history for the next update)`."""
    places = jax.tree.leaves(history.batch)[0].shape[ENV_AXIS + 1]
    valid = jnp.arange(places) >= places - history.filled  # the newest `filled` places

    def combine(old, new):
        new = jnp.expand_dims(new, ENV_AXIS + 1)
        mask = valid.reshape((1,) * (ENV_AXIS + 1) + (places,) + (1,) * (old.ndim - ENV_AXIS - 2))
        old = jnp.where(mask, old, new)
        return jnp.concatenate([old, new], axis=ENV_AXIS + 1)

    stacked = jax.tree.map(combine, history.batch, batch)
    merged = jax.tree.map(lambda x: x.reshape((*x.shape[:ENV_AXIS], -1, *x.shape[ENV_AXIS + 2 :])), stacked)
    kept = jax.tree.map(lambda x: x[:, :, 1:], stacked)
    return merged, RolloutHistory(batch=kept, filled=jnp.minimum(history.filled + 1, places))
