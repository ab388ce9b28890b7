"""Generalised advantage estimation and time-out bootstrapping (rsl_rl semantics)."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

from strl_jax.collectives import global_mean_std


def bootstrap_timeouts(
    rewards: jax.Array, truncated: jax.Array, bootstrap_values: jax.Array, gamma: float
) -> jax.Array:
    """`r + gamma * V * truncated`: credit a time-limited episode with the value it would have had.

    rsl_rl passes V(s_t) (the value before the step, an approximation); passing the value of the
    observation the step actually reached bootstraps from the true final state.
    """
    return rewards + gamma * bootstrap_values * truncated.astype(rewards.dtype)


def compute_gae(
    rewards: jax.Array,
    values: jax.Array,
    dones: jax.Array,
    last_values: jax.Array,
    gamma: float,
    lam: float,
) -> tuple[jax.Array, jax.Array]:
    """Advantages and returns for time-major `[T, N]` inputs, as a reverse `lax.scan`.

    delta_t = r_t + gamma (1 - d_t) V_{t+1} - V_t;  A_t = delta_t + gamma lam (1 - d_t) A_{t+1};
    R_t = A_t + V_t, with V_T = `last_values` ([N]).
    """
    chex.assert_rank(rewards, 2)
    chex.assert_equal_shape([rewards, values, dones])
    chex.assert_shape(last_values, rewards.shape[1:])
    chex.assert_rank([rewards, values, dones, last_values], [2, 2, 2, 1])
    chex.assert_equal_shape([rewards, values, dones])
    not_done = 1.0 - dones.astype(rewards.dtype)
    next_values = jnp.concatenate([values[1:], last_values[None]], axis=0)
    deltas = rewards + gamma * not_done * next_values - values

    def backward(advantage, xs):
        delta, mask = xs
        advantage = delta + gamma * lam * mask * advantage
        return advantage, advantage

    _, advantages = jax.lax.scan(backward, jnp.zeros_like(last_values), (deltas, not_done), reverse=True)
    return advantages, advantages + values


def normalize_advantages(advantages: jax.Array, axis_name: str | None = None) -> jax.Array:
    """`(A - mean) / (std + 1e-8)` with the unbiased std, like torch's `Tensor.std()` in rsl_rl.

    With `axis_name` the statistics are those of the advantages on all devices together.
    """
    mean, std = global_mean_std(advantages, axis_name, ddof=1)
    return (advantages - mean) / (std + 1e-8)
