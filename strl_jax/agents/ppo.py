"""PPO loss terms, the adaptive-KL learning rate and optimiser construction (st_rl semantics)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import chex
import jax
import jax.numpy as jnp
import optax
from flax import struct

from strl_jax.buffers.minibatch import select_columns

OPTIMIZERS = ("adam", "adamw", "sgd")


@struct.dataclass
class PPOBatch:
    """What PPO's update needs. Step fields are `[T, B, ...]`; `hidden` leaves are `[L, B, H]`."""

    obs: dict  # normalised observation groups
    hidden: Any  # recurrent: hidden states before step 0; {} for feed-forward policies
    resets: jax.Array  # 1 where the previous step ended an episode (recurrent carries restart)
    actions: jax.Array
    old_log_prob: jax.Array
    old_mean: jax.Array
    old_std: jax.Array
    old_values: jax.Array
    advantages: jax.Array
    returns: jax.Array
    parts: dict = struct.field(default_factory=dict)  # the parts' step fields by part name
    draws: dict = struct.field(default_factory=dict)  # the policy's stored random draws
    # `algorithm.recompute_advantages`: what each minibatch recomputes GAE from (rewards, dones,
    # masked, next_obs: the normalised critic observation after each step); {} otherwise
    gae_inputs: dict = struct.field(default_factory=dict)

    STEP_FIELDS: ClassVar[tuple[str, ...]] = (
        "obs",
        "resets",
        "actions",
        "old_log_prob",
        "old_mean",
        "old_std",
        "old_values",
        "advantages",
        "returns",
        "parts",
        "draws",
        "gae_inputs",
    )

    def select_columns(self, idx: jax.Array) -> PPOBatch:
        """The minibatch of columns `idx` (samples or environments) of every field."""
        return self.replace(
            hidden=select_columns(self.hidden, idx),
            **{f: select_columns(getattr(self, f), idx) for f in self.STEP_FIELDS},
        )


def surrogate_loss(log_prob: jax.Array, old_log_prob: jax.Array, advantages: jax.Array, clip_param: float):
    """Clipped surrogate `mean(max(-A r, -A clip(r, 1-eps, 1+eps)))`."""
    chex.assert_equal_shape([log_prob, old_log_prob, advantages])
    ratio = jnp.exp(log_prob - old_log_prob)
    unclipped = -advantages * ratio
    clipped = -advantages * jnp.clip(ratio, 1.0 - clip_param, 1.0 + clip_param)
    return jnp.mean(jnp.maximum(unclipped, clipped))


def value_loss(
    values: jax.Array, old_values: jax.Array, returns: jax.Array, clip_param: float, use_clipped: bool
) -> jax.Array:
    """Clipped value loss `mean(max((V-R)^2, (V_old + clip(V-V_old) - R)^2))`, or plain MSE."""
    chex.assert_equal_shape([values, old_values, returns])
    if not use_clipped:
        return jnp.mean(jnp.square(returns - values))
    clipped = old_values + jnp.clip(values - old_values, -clip_param, clip_param)
    return jnp.mean(jnp.maximum(jnp.square(values - returns), jnp.square(clipped - returns)))


def adaptive_learning_rate(learning_rate: jax.Array, kl_mean: jax.Array, desired_kl: float) -> jax.Array:
    """rsl_rl's rule: shrink by 1.5 above 2 kl*, grow by 1.5 in (0, kl*/2), within [1e-5, 1e-2]."""
    shrink = jnp.maximum(1e-5, learning_rate / 1.5)
    grow = jnp.minimum(1e-2, learning_rate * 1.5)
    return jnp.where(
        kl_mean > desired_kl * 2.0,
        shrink,
        jnp.where((kl_mean < desired_kl / 2.0) & (kl_mean > 0.0), grow, learning_rate),
    )


def weighted_total(losses: dict[str, jax.Array], coefs: dict[str, float]) -> jax.Array:
    """`sum_k coef_k * loss_k`, st_rl's `<name>_coef` convention (missing coefficients are 1)."""
    return sum(coefs.get(name, 1.0) * value for name, value in losses.items())


def clip_by_group_norms(max_norm: float, groups: Callable[[Any], Any]) -> optax.GradientTransformation:
    """torch's `clip_grad_norm_` on each group of leaves on its own: a group whose gradient norm
    exceeds `max_norm` is scaled by `max_norm / (norm + 1e-6)`. `groups(updates)` gives every leaf
    its group's name (rsl_rl 5.x clips the actor's and the critic's parameters in two calls)."""

    def update(updates, state, params=None):
        del params
        leaves, treedef = jax.tree.flatten(updates)
        labels = treedef.flatten_up_to(groups(updates))
        scale = {}
        for label in sorted(set(labels)):
            norm = optax.tree.norm([x for x, owner in zip(leaves, labels, strict=True) if owner == label])
            scale[label] = jnp.minimum(1.0, max_norm / (norm + 1e-6))
        clipped = [x * scale[owner] for x, owner in zip(leaves, labels, strict=True)]
        return treedef.unflatten(clipped), state

    return optax.GradientTransformation(lambda params: optax.EmptyState(), update)


def make_optimizer(
    name: str, max_grad_norm: float | None, clip_groups: Callable[[Any], Any] | None = None
) -> optax.GradientTransformation:
    """Gradient clipping then the optimiser's update direction, without the learning rate.

    Clipping is by one global norm, or with `clip_groups` by each group's own norm
    (`clip_by_group_norms`). The learning rate lives in the train state (the adaptive schedule
    changes it every minibatch); the caller applies `-lr * direction`.
    """
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}; valid choices: {list(OPTIMIZERS)}")
    direction = {
        "adam": optax.scale_by_adam(),
        "adamw": optax.chain(optax.scale_by_adam(), optax.add_decayed_weights(0.01)),  # torch AdamW default
        "sgd": optax.identity(),
    }[name]
    if max_grad_norm is None:
        return direction
    if clip_groups is not None:
        return optax.chain(clip_by_group_norms(max_grad_norm, clip_groups), direction)
    return optax.chain(optax.clip_by_global_norm(max_grad_norm), direction)
