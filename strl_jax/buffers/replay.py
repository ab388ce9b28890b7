"""Device-resident circular replay buffer of the policy's AMP observations.

The discriminator sees policy motion from the last many iterations, not only the current rollout,
so that it does not chase the policy (AMP_for_hardware keeps ~1e5-1e6 transitions). Capacity and
row size are static; the write position and fill level are arrays, so insert and sample are
jit-safe and the buffer can live in the train state (and its checkpoint).
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
from flax import struct


@struct.dataclass
class ReplayBuffer:
    """`data[capacity, dim]`; rows `[0, size)` are filled, `position` is the next row written."""

    data: jax.Array
    position: jax.Array  # int32 scalar
    size: jax.Array  # int32 scalar

    @property
    def capacity(self) -> int:
        return int(self.data.shape[0])


def init_replay_buffer(capacity: int, dim: int, dtype=jnp.float32) -> ReplayBuffer:
    if capacity < 1 or dim < 1:
        raise ValueError(
            f"replay buffer needs capacity >= 1 and dim >= 1, got capacity={capacity}, dim={dim}"
        )
    return ReplayBuffer(
        data=jnp.zeros((capacity, dim), dtype),
        position=jnp.zeros((), jnp.int32),
        size=jnp.zeros((), jnp.int32),
    )


def replay_insert(buf: ReplayBuffer, batch: jax.Array) -> ReplayBuffer:
    """Append `batch[n, dim]`, overwriting the oldest rows once full.

    The result equals inserting the rows one at a time: a batch longer than the capacity leaves
    only its newest `capacity` rows, placed where sequential inserts would have put them.
    """
    chex.assert_rank(batch, 2)
    chex.assert_axis_dimension(batch, 1, buf.data.shape[1])
    n, cap = batch.shape[0], buf.capacity
    if n == 0:
        return buf
    kept = batch[-cap:] if n > cap else batch
    first = (buf.position + (n - kept.shape[0])) % cap
    rows = (first + jnp.arange(kept.shape[0], dtype=jnp.int32)) % cap
    return ReplayBuffer(
        data=buf.data.at[rows].set(kept.astype(buf.data.dtype), unique_indices=True),
        position=((buf.position + n) % cap).astype(jnp.int32),
        size=jnp.minimum(buf.size + n, cap).astype(jnp.int32),
    )


def replay_sample(buf: ReplayBuffer, key: jax.Array, n: int) -> jax.Array:
    """`n` rows drawn uniformly with replacement from the filled part (row 0, zeros, if empty)."""
    idx = jax.random.randint(key, (n,), 0, jnp.maximum(buf.size, 1))
    return buf.data[idx]
