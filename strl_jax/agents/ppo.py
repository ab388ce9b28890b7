"""PPO's loss (a pure function of the trainable parameters and one minibatch, as brax's
`compute_ppo_loss`), its terms, the adaptive-KL learning rate and optimiser construction (st_rl
semantics)."""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Any, ClassVar

import chex
import jax
import jax.numpy as jnp
import optax
from flax import struct

from strl_jax.agents.parts import AugmentContext, LossContext, Part
from strl_jax.buffers.gae import compute_gae, normalize_advantages
from strl_jax.buffers.minibatch import select_columns
from strl_jax.networks.normalizer import InputNormalization

OPTIMIZERS = ("adam", "adamw", "sgd")
POLICY = "policy"  # the policy's key among the trainable parameters


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


@struct.dataclass
class MinibatchInputs:
    """Everything one minibatch's loss reads besides the trainable parameters."""

    batch: PPOBatch
    iteration: jax.Array  # completed iterations before this update
    train_parts: dict  # the parts' train states before the update, by part name
    part_inputs: dict  # each part's `minibatch_inputs`, by part name
    units: Any = None  # the estimator stages' unit conversions under the normalisers
    normalizers: dict | None = None  # what the batch's observations are normalised by (None: raw)
    entropy_key: jax.Array | None = None  # the sample of a squashed distribution's entropy (brax's)
    resample_key: jax.Array | None = None  # `hidden_state_resample_prob`'s draws (None: off)
    resample_prob: float = struct.field(pytree_node=False, default=0.0)


@dataclasses.dataclass(frozen=True)
class PPOLossSettings:
    """What shapes the loss: the policy, the parts and the algorithm's settings (static)."""

    model: Any  # networks.policy.PolicyModel
    parts: tuple[Part, ...]
    alg: Any  # configs.schema.AlgorithmConfig
    ppo_terms: bool  # False: only the parts' terms (TPPO's `using_ppo: false`, DAgger)
    gae_horizon: int  # steps per GAE segment when advantages are recomputed per minibatch
    normalization: InputNormalization  # how observations a part brings become network inputs
    axis_name: str | None = None  # reduce over devices with this axis (None: one device)


def ppo_terms(
    settings: PPOLossSettings,
    batch: PPOBatch,
    mean: jax.Array,
    std: jax.Array,
    values: jax.Array,
    entropy_key: jax.Array,
    originals: int,
) -> tuple[dict, dict, dict]:
    """PPO's own terms `(losses, coefficients, metrics)`: the clipped surrogate and value losses
    over every column, the entropy bonus over the `originals` (not augmented) columns."""
    alg, dist = settings.alg, settings.model.action_dist
    entropy = jnp.mean(dist.entropy(mean[:, :originals], std[:, :originals], entropy_key))
    surrogate = surrogate_loss(
        dist.log_prob(batch.actions, mean, std),
        batch.old_log_prob,
        batch.advantages,
        alg.clip_param,
        alg.dual_clip,
    )
    value = value_loss(values, batch.old_values, batch.returns, alg.clip_param, alg.use_clipped_value_loss)
    losses = {"surrogate_loss": surrogate, "value_loss": value, "entropy": -entropy}
    coefs = {
        "surrogate_loss": alg.surrogate_loss_coef,
        "value_loss": alg.value_loss_coef,
        "entropy": alg.entropy_coef,
    }
    metrics = {"surrogate": surrogate, "value_function": value, "entropy": entropy}
    return losses, coefs, metrics


def policy_mean(model: Any, params: Any, batch: PPOBatch, units: Any, originals: int, obs: dict) -> jax.Array:
    """The action mean of the policy `params` on normalised observations `obs` `[T, k * originals]`
    (e.g. mirrored copies of the minibatch's), with the minibatch's resets and draws repeated."""
    copies = jax.tree.leaves(obs)[0].shape[1] // originals
    fit = functools.partial(jax.tree.map, lambda x: jnp.concatenate([x[:, :originals]] * copies, 1))
    return model.sequence(params, obs, batch.hidden, fit(batch.resets), fit(batch.draws), units, None)[0]


def ppo_loss(trainable: dict, inputs: MinibatchInputs, settings: PPOLossSettings):
    """Weighted loss of one minibatch of `[T, B]` steps; aux: `(losses, metrics, mean, std)`.

    PPO's terms (unless `ppo_terms` is off), then each part's, summed with st_rl's `<name>_coef`
    weights. The parts' `augment` may append columns (rsl_rl's symmetry): the surrogate and value
    terms average over all of them, the entropy and the returned `(mean, std)` (the KL) see the
    original `B` (advantages are normalised per minibatch before augmenting, as in rsl_rl).
    """
    alg, model = settings.alg, settings.model
    batch, train_parts, units = inputs.batch, inputs.train_parts, inputs.units
    resample = None if inputs.resample_key is None else (inputs.resample_key, inputs.resample_prob)
    per_minibatch = settings.ppo_terms and alg.normalize_advantage_per_mini_batch
    if per_minibatch and not alg.recompute_advantages:
        batch = batch.replace(advantages=normalize_advantages(batch.advantages, settings.axis_name))
    originals = batch.actions.shape[1]
    augment_ctx = AugmentContext(normalizers=inputs.normalizers or {})
    for p in settings.parts:
        batch = p.augment(train_parts[p.name], batch, augment_ctx)
    mean, std, values, estimates = model.sequence(
        trainable[POLICY], batch.obs, batch.hidden, batch.resets, batch.draws, units, resample
    )
    chex.assert_equal_shape([mean, std, batch.actions])
    chex.assert_equal_shape([values, batch.returns])
    if alg.recompute_advantages:
        batch = recomputed_advantages(trainable[POLICY], batch, values, settings)
    losses, coefs, metrics = {}, {}, {}
    if settings.ppo_terms:
        losses, coefs, metrics = ppo_terms(settings, batch, mean, std, values, inputs.entropy_key, originals)

    ctx = LossContext(
        batch=batch,
        mean=mean,
        std=std,
        values=values,
        iteration=inputs.iteration,
        estimates=estimates,
        originals=originals,
        policy_mean=functools.partial(policy_mean, model, trainable[POLICY], batch, units, originals),
        normalize=functools.partial(settings.normalization.groups, inputs.normalizers or {}),
        critic_value=lambda nobs: model.value(trainable[POLICY], nobs, {}),
    )
    for p in settings.parts:
        part_losses, part_coefs, part_metrics = p.losses(
            trainable.get(p.name), train_parts[p.name], ctx, inputs.part_inputs[p.name]
        )
        losses |= part_losses
        coefs |= part_coefs
        metrics |= part_metrics
    return weighted_total(losses, coefs), (losses, metrics, mean[:, :originals], std[:, :originals])


def recomputed_advantages(
    params: Any, batch: PPOBatch, values: jax.Array, settings: PPOLossSettings
) -> PPOBatch:
    """brax's PPO: GAE over the minibatch's whole segments (`[1, segments * h]`, segment-major)
    with the values of the critic being trained (no gradient through them) and V(s_{t+h}) of
    each segment's next observation; the advantages normalised over the minibatch."""
    alg = settings.alg
    horizon = settings.gae_horizon
    count = values.shape[1] // horizon

    def segments(x: jax.Array) -> jax.Array:  # [1, count * h, ...] -> [h, count, ...]
        return jnp.swapaxes(x.reshape((count, horizon) + x.shape[2:]), 0, 1)

    def columns(x: jax.Array) -> jax.Array:  # the inverse
        return jnp.swapaxes(x, 0, 1).reshape(1, -1)

    inputs = jax.lax.stop_gradient(batch.gae_inputs)
    last_obs = jax.tree.map(lambda x: segments(x)[-1], inputs["next_obs"])
    last_values = jax.lax.stop_gradient(settings.model.value(params, last_obs, {}))
    masked = inputs.get("masked")
    advantages, returns = compute_gae(
        segments(inputs["rewards"]),
        segments(jax.lax.stop_gradient(values)),
        segments(inputs["dones"]),
        last_values,
        alg.gamma,
        alg.lam,
        None,
        None if masked is None else segments(masked),
        alg.advantage_estimator,
    )
    advantages = normalize_advantages(columns(advantages), settings.axis_name)
    return batch.replace(advantages=advantages, returns=columns(returns))


def surrogate_loss(
    log_prob: jax.Array,
    old_log_prob: jax.Array,
    advantages: jax.Array,
    clip_param: float,
    dual_clip: float | None = None,
):
    """Clipped surrogate `mean(max(-A r, -A clip(r, 1-eps, 1+eps)))`; with `dual_clip` c (dual-clip
    PPO), each negative advantage's term is at most `-c A`. That is the ratio capped at c: with
    A < 0 the term is `|A| max(r, clip(r))`, with A > 0 it is already flat above 1 + eps < c, and
    above c every term's gradient is 0 either way. The cap is taken on the log ratio, so the ratio
    of a very unlikely executed action no longer overflows to inf (whose 0 x inf gradient is NaN)."""
    chex.assert_equal_shape([log_prob, old_log_prob, advantages])
    log_ratio = log_prob - old_log_prob
    if dual_clip is not None:
        log_ratio = jnp.minimum(log_ratio, math.log(dual_clip))
    ratio = jnp.exp(log_ratio)
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
