"""Reshuffled minibatches over a flattened `[T * N]` batch."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def flatten_time_env(tree):
    """Merge the leading `[T, N]` axes of every leaf into one sample axis."""
    return jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), tree)


def shuffle_minibatches(key: jax.Array, batch, num_mini_batches: int):
    """Permute the samples and split them into `[num_mini_batches, batch_size, ...]`.

    Called once per epoch with a new key, so every epoch sees a fresh order.
    """
    size = jax.tree.leaves(batch)[0].shape[0]
    if size % num_mini_batches:
        raise ValueError(f"num_mini_batches={num_mini_batches} must divide the batch size {size}")
    perm = jax.random.permutation(key, size)
    return jax.tree.map(
        lambda x: jnp.take(x, perm, axis=0).reshape(
            (num_mini_batches, size // num_mini_batches) + x.shape[1:]
        ),
        batch,
    )
