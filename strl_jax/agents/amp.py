"""AMP (st_rl APPO / ATPPO): discriminator loss terms, style reward and AMP normalisers.

Vocabulary follows st_rl: `ref_obs` are the policy's AMP observations (one per rollout step),
`ref_motion` the expert's (pairs of frames drawn from a motion library). An AMP observation is
`concat(s, s')` of two consecutive frames.

Recommended use by a learner:
- rollout: store the *raw* AMP observation of every step (the pre-reset one for finished
  episodes); reward with `predict_style_reward` (normalised with the current statistics inside);
- update: per minibatch, draw policy AMP observations from the replay buffer and expert ones from
  the motion library, normalise both with `normalize_amp_obs` and add
  `discriminator_loss_terms` (and `mimic_loss` / `dagger_loss` where their coefficients are
  non-zero) to the PPO terms, weighted by `amp_loss_coefs`;
- after the update: `update_amp_normalizers` with the same raw batches (normaliser statistics
  change after the optimisation step, as for the observation normalisers).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import chex
import jax
import jax.numpy as jnp
from flax import struct

from strl_jax.networks.normalizer import NormalizerState, init_normalizer, normalize, update_normalizer

DiscriminatorApply = Callable[[Any, jax.Array], jax.Array]  # (params, amp_obs[B, D]) -> score[B]

# Loss keys in st_rl's `<name>` / `<name>_coef` convention (st_rl spells the third
# `discriminator_grad_len_loss`), and the short names they are logged under (`Loss/<short>`).
EXPERT_LOSS = "discriminator_expert_loss"
POLICY_LOSS = "discriminator_policy_loss"
GRAD_PEN_LOSS = "discriminator_grad_pen_loss"
DISCRIMINATOR_LOSSES = (EXPERT_LOSS, POLICY_LOSS, GRAD_PEN_LOSS)
LOSS_LOG_NAMES = {
    EXPERT_LOSS: "discriminator_expert",
    POLICY_LOSS: "discriminator_policy",
    GRAD_PEN_LOSS: "discriminator_grad_pen",
    "mimic_loss": "mimic",
    "dagger_loss": "dagger",
}


def lsgan_losses(d_expert: jax.Array, d_policy: jax.Array) -> tuple[jax.Array, jax.Array]:
    """`(0.5 * mean((D(expert) - 1)^2), 0.5 * mean((D(policy) + 1)^2))`: LSGAN with targets +-1.

    st_rl: `0.5 * MSELoss(expert_d, 1)` and `0.5 * MSELoss(policy_d, -1)`, kept as two terms.
    """
    return 0.5 * jnp.mean(jnp.square(d_expert - 1.0)), 0.5 * jnp.mean(jnp.square(d_policy + 1.0))


def gradient_penalty(disc_fn: Callable[[jax.Array], jax.Array], expert_amp_obs: jax.Array, coef: float):
    """`coef * mean_i ||grad_x D(x_i)||_2^2` over expert samples x_i (zero-centred, no 0.5).

    As st_rl's `compute_grad_pen` (from AMP_for_hardware): `lambda_ * grad.norm(2, dim=1).pow(2)
    .mean()` with lambda = `discriminator_grad_pen` multiplied in here. Differentiable with respect
    to the discriminator's parameters (double backward). `disc_fn` scores each row independently,
    so the gradient of the summed scores is the per-sample input gradient.
    """
    chex.assert_rank(expert_amp_obs, 2)
    grads = jax.grad(lambda x: jnp.sum(disc_fn(x)))(expert_amp_obs)
    return coef * jnp.mean(jnp.sum(jnp.square(grads), axis=-1))


def style_reward(d_policy: jax.Array, coef: float) -> jax.Array:
    """`coef * max(0, 1 - 0.25 * (d - 1)^2)`: `coef` where D scores the motion as expert (d = 1),
    0 where |d - 1| >= 2. A reward, so no gradient flows back into the discriminator."""
    d = jax.lax.stop_gradient(d_policy)
    return coef * jnp.maximum(0.0, 1.0 - 0.25 * jnp.square(d - 1.0))


def mix_rewards(style: jax.Array, task: jax.Array, task_reward_lerp: float) -> jax.Array:
    """`(1 - lerp) * r_style + lerp * r_task` (st_rl `task_reward_lerp`; 0 drops the task reward)."""
    return (1.0 - task_reward_lerp) * style + task_reward_lerp * task


def discriminator_accuracy(d_expert: jax.Array, d_policy: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Fractions classified correctly: expert samples with D > 0, policy samples with D < 0."""
    return jnp.mean((d_expert > 0).astype(jnp.float32)), jnp.mean((d_policy < 0).astype(jnp.float32))


def mimic_loss(ref_obs: jax.Array, ref_motion: jax.Array) -> jax.Array:
    """`mean_i ||ref_obs_i - ref_motion_i||_2` (st_rl `mimic_loss`, paired row by row)."""
    return jnp.mean(jnp.linalg.norm(ref_obs - ref_motion, axis=-1))


def dagger_loss(action_mean: jax.Array, action_labels: jax.Array) -> jax.Array:
    """`mean_i ||mu_i - label_i||_2` (st_rl `dagger_loss`: the policy mean vs the stored label)."""
    return jnp.mean(jnp.linalg.norm(action_mean - action_labels, axis=-1))


def discriminator_loss_terms(
    disc_apply: DiscriminatorApply,
    disc_params: Any,
    policy_amp_obs_normalized: jax.Array,
    expert_amp_obs_normalized: jax.Array,
    grad_pen_coef: float,
) -> tuple[dict[str, jax.Array], dict[str, jax.Array]]:
    """The discriminator's loss terms on one minibatch, and its accuracies.

    losses: `discriminator_expert_loss`, `discriminator_policy_loss` (`lsgan_losses`) and
    `discriminator_grad_pen_loss` (`gradient_penalty` with `grad_pen_coef` =
    `discriminator_grad_pen` already applied); weight them with `amp_loss_coefs`.
    metrics: `discriminator_accuracy_expert`, `discriminator_accuracy_policy`, and the mean scores
    `discriminator_expert_score`, `discriminator_policy_score`.
    Both inputs must already be normalised (each with its own `AmpNormalizers` half).
    """
    chex.assert_rank([policy_amp_obs_normalized, expert_amp_obs_normalized], 2)
    chex.assert_equal_shape_suffix([policy_amp_obs_normalized, expert_amp_obs_normalized], 1)
    d_policy = disc_apply(disc_params, policy_amp_obs_normalized)
    d_expert = disc_apply(disc_params, expert_amp_obs_normalized)
    expert_loss, policy_loss = lsgan_losses(d_expert, d_policy)
    grad_pen = gradient_penalty(
        lambda x: disc_apply(disc_params, x), expert_amp_obs_normalized, grad_pen_coef
    )
    acc_expert, acc_policy = discriminator_accuracy(d_expert, d_policy)
    losses = {EXPERT_LOSS: expert_loss, POLICY_LOSS: policy_loss, GRAD_PEN_LOSS: grad_pen}
    metrics = {
        "discriminator_accuracy_expert": acc_expert,
        "discriminator_accuracy_policy": acc_policy,
        "discriminator_expert_score": jnp.mean(d_expert),
        "discriminator_policy_score": jnp.mean(d_policy),
    }
    return losses, metrics


def amp_loss_coefs(alg_cfg) -> dict[str, float]:
    """Coefficients of the AMP terms for `weighted_total`.

    `discriminator_loss_coef` multiplies all three discriminator terms. st_rl uses it as an on/off
    switch and weights each term by its own `<name>_coef` (default 1): both agree for 0 and 1.
    """
    coef = alg_cfg.discriminator_loss_coef
    return {
        **{name: coef for name in DISCRIMINATOR_LOSSES},
        "mimic_loss": alg_cfg.mimic_loss_coef,
        "dagger_loss": alg_cfg.dagger_loss_coef,
    }


# ------------------------------------------------------------------------------ normalisers
@struct.dataclass
class AmpNormalizers:
    """Separate running statistics of the policy's AMP observations (st_rl `ref_obs_normalizer`)
    and of the expert's (`ref_motion_normalizer`), both over the whole `concat(s, s')` vector.

    As in st_rl, each side is standardised by its own statistics, so a policy whose motion differs
    from the expert's only by a shift or scale per feature looks like the expert to the
    discriminator (AMP_for_hardware instead shares one normaliser fed with both).
    """

    policy: NormalizerState
    expert: NormalizerState


def init_amp_normalizers(amp_obs_dim: int) -> AmpNormalizers:
    return AmpNormalizers(policy=init_normalizer(amp_obs_dim), expert=init_normalizer(amp_obs_dim))


def update_amp_normalizers(
    norms: AmpNormalizers,
    policy_amp_obs_raw: jax.Array,
    expert_amp_obs_raw: jax.Array,
    until: float | None = 1.0e8,
    axis_name: str | None = None,
) -> AmpNormalizers:
    """Fold *raw* (un-normalised) batches into each half's statistics.

    Pass the same arrays that were normalised for the loss, not the normalised results: feeding
    normalised data drives the statistics towards mean 0 / variance 1 of the already-scaled data, so
    the normaliser stops tracking the real scale (amp-rsl-rl PR #36, AMP_for_hardware #27).
    `until` is st_rl's 1e8 samples.
    """
    return AmpNormalizers(
        policy=update_normalizer(norms.policy, policy_amp_obs_raw, until, axis_name),
        expert=update_normalizer(norms.expert, expert_amp_obs_raw, until, axis_name),
    )


def normalize_amp_obs(
    norms: AmpNormalizers, policy_amp_obs_raw: jax.Array, expert_amp_obs_raw: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """`(policy normalised with the policy statistics, expert normalised with the expert's)`."""
    return normalize(norms.policy, policy_amp_obs_raw), normalize(norms.expert, expert_amp_obs_raw)


def predict_style_reward(
    disc_apply: DiscriminatorApply,
    disc_params: Any,
    norms: AmpNormalizers,
    policy_amp_obs_raw: jax.Array,
    task_reward: jax.Array,
    style_reward_coef: float,
    task_reward_lerp: float,
) -> tuple[jax.Array, jax.Array]:
    """`(mixed reward, style reward)` of rollout steps from their raw AMP observations [..., D].

    st_rl's `discriminator.predict_style_reward(ref_obs, rewards)`: normalise with the policy
    statistics, score, `style_reward`, then `mix_rewards` with the task reward.
    """
    d = disc_apply(disc_params, normalize(norms.policy, policy_amp_obs_raw))
    style = style_reward(d, style_reward_coef)
    return mix_rewards(style, task_reward, task_reward_lerp), style
