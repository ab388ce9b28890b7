"""Diagonal Gaussian action distribution as pure functions of (mean, std).

Log-probabilities and entropies are summed over action dimensions, like rsl_rl.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def gaussian_sample(key: jax.Array, mean: jax.Array, std: jax.Array) -> jax.Array:
    """Draw `mean + std * eps` with eps ~ N(0, I)."""
    return mean + std * jax.random.normal(key, mean.shape, mean.dtype)


def gaussian_log_prob(actions: jax.Array, mean: jax.Array, std: jax.Array) -> jax.Array:
    """Sum over the last axis of the per-dimension normal log-density."""
    z = (actions - mean) / std
    return jnp.sum(-0.5 * z * z - jnp.log(std) - _LOG_SQRT_2PI, axis=-1)


def gaussian_entropy(std: jax.Array) -> jax.Array:
    """Entropy summed over the last axis: 0.5 + log(sqrt(2 pi) std) per dimension."""
    return jnp.sum(0.5 + _LOG_SQRT_2PI + jnp.log(std), axis=-1)


def gaussian_kl(
    old_mean: jax.Array,
    old_std: jax.Array,
    mean: jax.Array,
    std: jax.Array,
    eps: float = 1e-5,
) -> jax.Array:
    """KL(old || new) summed over action dims, as st_rl's adaptive schedule computes it.

    st_rl adds `eps` inside the log ratio; `eps=0` gives the exact KL (current rsl_rl).
    """
    kl = (
        jnp.log(std / old_std + eps)
        + (jnp.square(old_std) + jnp.square(old_mean - mean)) / (2.0 * jnp.square(std))
        - 0.5
    )
    return jnp.sum(kl, axis=-1)
