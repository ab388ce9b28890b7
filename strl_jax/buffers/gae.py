"""Generalised advantage estimation and time-out bootstrapping (rsl_rl semantics)."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

from strl_jax.collectives import global_mean_std

# What `compute_gae` returns as the advantage (`algorithm.advantage_estimator`).
ADVANTAGE_ESTIMATORS = ("gae", "brax")


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
    horizon: int | None = None,
    masked: jax.Array | None = None,
    estimator: str = "gae",
) -> tuple[jax.Array, jax.Array]:
    """Advantages and returns for time-major `[T, N]` inputs, as a reverse `lax.scan`.

    delta_t = r_t + gamma (1 - d_t) V_{t+1} - V_t;  A_t = delta_t + gamma lam (1 - d_t) A_{t+1};
    R_t = A_t + V_t, with V_T = `last_values` ([N]).
    `horizon` h: the sum restarts every h steps, the last step of each segment bootstrapping from
    V(s_{t+1}) alone (brax's GAE over `unroll_length`-step trajectories); None: one segment.
    `masked` ([T, N], 1 = masked): those steps get A = 0 and R = V and end the sum before them
    (brax's time-out transitions with `bootstrap_on_timeout=False`; they must also be done).
    `estimator="brax"`: the advantage is brax PPO's `r_t + gamma (1 - d_t) R_{t+1} - V_t` (0 where
    masked) with R_{t+1} = V_{t+1} past a segment's end: the first TD step of the GAE sum weighs
    the next step's whole GAE target instead of lam times it; the returns are the same.
    """
    if estimator not in ADVANTAGE_ESTIMATORS:
        raise ValueError(f"unknown advantage estimator {estimator!r}; valid choices: {ADVANTAGE_ESTIMATORS}")
    chex.assert_rank([rewards, values, dones, last_values], [2, 2, 2, 1])
    chex.assert_equal_shape([rewards, values, dones])
    chex.assert_shape(last_values, rewards.shape[1:])
    not_done = 1.0 - dones.astype(rewards.dtype)
    next_values = jnp.concatenate([values[1:], last_values[None]], axis=0)
    deltas = rewards + gamma * not_done * next_values - values
    continues = segment_continues(rewards.shape[0], horizon)[:, None]
    carries = not_done * continues
    keep = jnp.ones_like(rewards)
    if masked is not None:
        chex.assert_equal_shape([rewards, masked])
        keep = 1.0 - masked.astype(rewards.dtype)
        deltas, carries = deltas * keep, carries * keep

    def backward(advantage, xs):
        delta, mask = xs
        advantage = delta + gamma * lam * mask * advantage
        return advantage, advantage

    _, advantages = jax.lax.scan(backward, jnp.zeros_like(last_values), (deltas, carries), reverse=True)
    returns = advantages + values
    if estimator == "brax":
        next_returns = jnp.concatenate([returns[1:], last_values[None]], axis=0)
        next_targets = jnp.where(continues > 0, next_returns, next_values)
        advantages = (rewards + gamma * not_done * next_targets - values) * keep
    return advantages, returns


def segment_continues(steps: int, horizon: int | None) -> jax.Array:
    """`[steps]`: 0 at the last step of every `horizon`-step segment, where GAE stops summing."""
    if horizon is None:
        return jnp.ones((steps,), jnp.float32)
    if horizon < 1 or steps % horizon:
        raise ValueError(f"gae_horizon={horizon} must be a positive divisor of the {steps} rollout steps")
    return (jnp.arange(1, steps + 1) % horizon != 0).astype(jnp.float32)


def normalize_advantages(advantages: jax.Array, axis_name: str | None = None) -> jax.Array:
    """`(A - mean) / (std + 1e-8)` with the unbiased std, like torch's `Tensor.std()` in rsl_rl.

    With `axis_name` the statistics are those of the advantages on all devices together.
    """
    mean, std = global_mean_std(advantages, axis_name, ddof=1)
    return (advantages - mean) / (std + 1e-8)
