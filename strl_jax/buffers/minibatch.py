"""Minibatches as columns of a time-major `[T, B]` batch, stratified by environment.

Feed-forward batches are first merged to one row of `T * N` columns (any sample can land in
any minibatch); recurrent batches keep `[T, N]` so a column is a whole environment's sequence.
"""

from __future__ import annotations

import math

import chex
import jax
import jax.numpy as jnp


def merge_time_env(tree):
    """`[T, N, ...]` -> `[1, T * N, ...]` for every leaf (row-major: sample t*N + n)."""
    return jax.tree.map(lambda x: x.reshape((1, -1) + x.shape[2:]), tree)


def env_block_size(steps_per_env: int, num_mini_batches: int) -> int:
    """Fewest environments whose `steps_per_env` columns each split evenly over the minibatches."""
    return num_mini_batches // math.gcd(num_mini_batches, steps_per_env)


def minibatch_indices(
    key: jax.Array,
    num_envs: int,
    steps_per_env: int,
    num_mini_batches: int,
    first_env: jax.Array | int = 0,
    segment_length: int = 1,
) -> jax.Array:
    """A fresh random partition of the columns, `[num_mini_batches, num_envs * steps_per_env // M]`.

    Columns are numbered time-major (`t * num_envs + n`, as `merge_time_env` lays them out;
    recurrent batches have `steps_per_env=1`). The environments are cut into blocks of
    `env_block_size` and every minibatch takes an equal random share of every block, each block
    shuffled with a key folded with its global index (`first_env` is this shard's first
    environment). So a minibatch is the union of its per-device parts and the whole update is
    the same on any number of devices; rsl_rl's single permutation of all samples is the
    unstratified version of this.

    `segment_length` h > 1 partitions whole segments instead of single steps: the steps
    [k h, (k + 1) h) of one environment always share a minibatch (brax's minibatches of
    `unroll_length`-step trajectories; the segments are shuffled like the steps above).
    """
    if steps_per_env % segment_length:
        raise ValueError(f"segment_length={segment_length} must divide steps_per_env={steps_per_env}")
    if segment_length > 1:
        segments = minibatch_indices(
            key, num_envs, steps_per_env // segment_length, num_mini_batches, first_env
        )
        first_step = (segments // num_envs) * segment_length
        steps = first_step[..., None] + jnp.arange(segment_length)
        columns = steps * num_envs + (segments % num_envs)[..., None]
        return columns.reshape(num_mini_batches, -1)
    block = env_block_size(steps_per_env, num_mini_batches)
    if num_envs % block:
        raise ValueError(
            f"num_mini_batches={num_mini_batches} needs the environments of each device in blocks of "
            f"{block} (so that {steps_per_env} steps per env split evenly), but a device has {num_envs}"
        )
    num_blocks, per_block = num_envs // block, block * steps_per_env
    first_block = jnp.asarray(first_env, jnp.int32) // block

    def block_order(b):
        position = jax.random.permutation(jax.random.fold_in(key, first_block + b), per_block)
        env = b * block + position // steps_per_env
        return (position % steps_per_env) * num_envs + env

    order = jax.vmap(block_order)(jnp.arange(num_blocks, dtype=jnp.int32))
    order = order.reshape(num_blocks, num_mini_batches, per_block // num_mini_batches)
    order = order.transpose(1, 0, 2).reshape(num_mini_batches, -1)
    chex.assert_shape(order, (num_mini_batches, num_envs * steps_per_env // num_mini_batches))
    return order


def select_columns(tree, idx: jax.Array, axis: int = 1):
    """The columns `idx` along `axis` of every leaf."""
    return jax.tree.map(lambda x: jnp.take(x, idx, axis=axis), tree)
