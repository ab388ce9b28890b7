"""rsl_rl `Distillation`: behaviour cloning of a teacher with truncated backpropagation in time.

rsl_rl's update walks the stored rollout step by step (all environments at once), for
`num_learning_epochs` passes that each restart from the hidden state the rollout started
with. The per-step losses are summed, and every `gradient_length` steps (counted across epoch
boundaries) the sum is backpropagated, clipped to `max_grad_norm` and applied; the hidden state
is then detached. Steps after the last full window are evaluated but never backpropagated.
Here the same walk is a `lax.scan` over windows of a fixed step order, each window a
differentiable `lax.scan` over its steps. Every step's loss may carry terms of the run's other
parts besides the cloning loss (EstimatorDistillation: the estimator's regression on the same
step), summed with their coefficients before the window's gradient.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from strl_jax.agents.ppo import weighted_total
from strl_jax.collectives import pmean

LOSS_TYPES = ("mse", "huber")

# (params, one step's observation groups, its stored draws, hidden) -> (actions [N, A], hidden',
# (other terms' losses, their coefficients, their metrics)): the student at one step
ActFn = Callable[[Any, dict, dict, Any], tuple[jax.Array, Any, tuple[dict, dict, dict]]]
ResetFn = Callable[[Any, jax.Array], Any]


def behavior_loss(loss_type: str, actions: jax.Array, labels: jax.Array) -> jax.Array:
    """torch's `mse_loss` / `huber_loss` (delta 1) with mean reduction over envs and dims."""
    chex.assert_equal_shape([actions, labels])
    diff = actions - labels
    if loss_type == "mse":
        return jnp.mean(jnp.square(diff))
    if loss_type == "huber":
        a = jnp.abs(diff)
        return jnp.mean(jnp.where(a < 1.0, 0.5 * jnp.square(diff), a - 0.5))
    raise ValueError(f"unknown loss_type {loss_type!r}; valid choices: {list(LOSS_TYPES)}")


def step_order(num_steps: int, num_epochs: int, gradient_length: int) -> tuple[np.ndarray, np.ndarray]:
    """`(windows [K, gradient_length], rest [R])` of rollout step indices in rsl_rl's update order.

    The order is `0..T-1` repeated `num_epochs` times; the windows are its consecutive full
    chunks, `rest` the `(num_epochs * T) % gradient_length` steps that are never backpropagated.
    """
    order = np.tile(np.arange(num_steps, dtype=np.int32), num_epochs)
    full = len(order) // gradient_length * gradient_length
    return order[:full].reshape(-1, gradient_length), order[full:]


@struct.dataclass
class DistillationBatch:
    """One rollout for the update: `[T, N, ...]` step fields and the hidden state before step 0."""

    obs: dict  # normalised observation groups
    labels: jax.Array  # [T, N, A] teacher actions
    dones: jax.Array  # [T, N]
    hidden0: Any  # student's hidden state at the start of the rollout ({} feed-forward)
    draws: dict = struct.field(default_factory=dict)  # the policy's replacement masks while acting


def _walk(act: ActFn, reset: ResetFn, loss_type: str, params, batch: DistillationBatch, hidden, steps):
    """Run the student over `steps` (rollout indices) from `hidden`: `(weighted loss sum,
    (hidden', per-step cloning losses, per-step metrics of the other terms))`."""

    def body(h, t):
        # Step 0 of every epoch restarts from the rollout's initial state (rsl_rl's `reset(hidden_state)`).
        h = jax.tree.map(lambda h0, x: jnp.where(t == 0, h0, x), batch.hidden0, h)
        obs_t, draws_t = jax.tree.map(lambda x: x[t], (batch.obs, batch.draws))
        actions, h, (losses, coefs, metrics) = act(params, obs_t, draws_t, h)
        cloning = behavior_loss(loss_type, actions, batch.labels[t])
        total = cloning + weighted_total(losses, coefs)
        return reset(h, batch.dones[t]), (total, cloning, metrics)

    hidden, (totals, cloning, metrics) = jax.lax.scan(body, hidden, steps)
    return jnp.sum(totals), (hidden, cloning, metrics)


def bptt_update(
    act: ActFn,
    reset: ResetFn,
    optimizer: optax.GradientTransformation,
    loss_type: str,
    params,
    opt_state,
    learning_rate: jax.Array,
    batch: DistillationBatch,
    windows: np.ndarray,
    rest: np.ndarray,
    axis_name: str | None = None,
):
    """All optimiser steps of one update: `(params, opt_state, per-step cloning losses
    [epochs * T], per-step metrics of the other terms {name: [epochs * T]})`.

    With `axis_name`, gradients, losses and metrics are averaged over the devices' environments.
    """

    def window(carry, steps):
        params, opt_state, hidden = carry
        hidden = jax.lax.stop_gradient(hidden)  # truncation: no gradient into earlier windows
        grads, (hidden, losses, metrics) = jax.grad(
            lambda p: _walk(act, reset, loss_type, p, batch, hidden, steps), has_aux=True
        )(params)
        grads, losses, metrics = pmean((grads, losses, metrics), axis_name)
        direction, opt_state = optimizer.update(grads, opt_state, params)
        params = optax.apply_updates(params, jax.tree.map(lambda u: -learning_rate * u, direction))
        return (params, opt_state, hidden), (losses, metrics)

    hidden = batch.hidden0
    parts = []
    if len(windows):
        (params, opt_state, hidden), walked = jax.lax.scan(
            window, (params, opt_state, hidden), jnp.asarray(windows)
        )
        parts.append(jax.tree.map(lambda x: x.reshape(-1), walked))
    if len(rest):
        _, (_, *walked) = _walk(act, reset, loss_type, params, batch, hidden, jnp.asarray(rest))
        parts.append(pmean(tuple(walked), axis_name))
    losses, metrics = jax.tree.map(lambda *xs: jnp.concatenate(xs), *parts)
    return params, opt_state, losses, metrics
