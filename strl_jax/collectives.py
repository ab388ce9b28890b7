"""Cross-device reductions and per-environment randomness for code that runs sharded over envs.

The learner runs inside `shard_map` over a device mesh whose axis (`ENV_AXIS`) splits the
environments. Functions here take that axis name, or `None` outside `shard_map` (unit tests,
evaluation), where every reduction is the identity: one device is the one-device case of the
same code.

Random draws that differ per environment are keyed by the environment's *global* index, so the
numbers a run produces do not depend on how many devices share its environments.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

ENV_AXIS = "env"


def psum(tree: Any, axis_name: str | None) -> Any:
    """Sum over devices (identity without an axis)."""
    return tree if axis_name is None else jax.lax.psum(tree, axis_name)


def pmean(tree: Any, axis_name: str | None) -> Any:
    """Mean over devices (identity without an axis); equal-sized shards make it the global mean."""
    return tree if axis_name is None else jax.lax.pmean(tree, axis_name)


def shard_index(axis_name: str | None) -> jax.Array:
    """This device's position along the env axis (0 without an axis)."""
    return jnp.zeros((), jnp.int32) if axis_name is None else jax.lax.axis_index(axis_name)


def global_env_ids(num_local: int, axis_name: str | None) -> jax.Array:
    """Global indices `[num_local]` of the environments this device steps."""
    return shard_index(axis_name) * num_local + jnp.arange(num_local, dtype=jnp.int32)


def env_keys(key: jax.Array, env_ids: jax.Array) -> jax.Array:
    """One key per environment: `fold_in(key, global env index)`, whatever the device count."""
    return jax.vmap(jax.random.fold_in, in_axes=(None, 0))(key, env_ids)


def global_mean_std(x: jax.Array, axis_name: str | None, ddof: int = 1) -> tuple[jax.Array, jax.Array]:
    """Mean and std of all elements of `x` on all devices (two-pass, like `jnp.std`)."""
    n = psum(jnp.asarray(x.size, jnp.float32), axis_name)
    mean = psum(jnp.sum(x), axis_name) / n
    var = psum(jnp.sum(jnp.square(x - mean)), axis_name) / (n - ddof)
    return mean, jnp.sqrt(var)
