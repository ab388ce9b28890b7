"""Minibatches as columns of a time-major `[T, B]` batch.

Feed-forward batches are first merged to one row of `T * N` columns (any sample can land in
any minibatch); recurrent batches keep `[T, N]` so a column is a whole environment's sequence.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def merge_time_env(tree):
    """`[T, N, ...]` -> `[1, T * N, ...]` for every leaf (row-major: sample t*N + n)."""
    return jax.tree.map(lambda x: x.reshape((1, -1) + x.shape[2:]), tree)


def minibatch_indices(key: jax.Array, num_columns: int, num_mini_batches: int) -> jax.Array:
    """A fresh random partition of the columns: `[num_mini_batches, num_columns // num_mini_batches]`."""
    if num_columns % num_mini_batches:
        raise ValueError(f"num_mini_batches={num_mini_batches} must divide the {num_columns} batch columns")
    return jax.random.permutation(key, num_columns).reshape(num_mini_batches, -1)


def select_columns(tree, idx: jax.Array, axis: int = 1):
    """The columns `idx` along `axis` of every leaf."""
    return jax.tree.map(lambda x: jnp.take(x, idx, axis=axis), tree)
