"""Diagonal Gaussian action distribution as pure functions of (mean, std), and the two action
distributions built on it (`ActionDistribution`: rsl_rl's Gaussian, brax's tanh-squashed one).

Log-probabilities and entropies are summed over action dimensions, like rsl_rl.
"""

from __future__ import annotations

import dataclasses
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


# ---------------------------------------------------------------------------- action distributions
GAUSSIAN, TANH_GAUSSIAN = "gaussian", "tanh_gaussian"
DISTRIBUTIONS = (GAUSSIAN, TANH_GAUSSIAN)
TANH_MIN_STD = 0.001  # brax NormalTanhDistribution's `min_std`: std = softplus(x) + 0.001
_LOG_2 = math.log(2.0)


def tanh_log_det_jacobian(x: jax.Array) -> jax.Array:
    """log |d tanh(x) / dx| per dimension, in brax's overflow-free form."""
    return 2.0 * (_LOG_2 - x - jax.nn.softplus(-2.0 * x))


def tanh_std(pre_activation: jax.Array) -> jax.Array:
    """brax's state-dependent std from the actor's second half of outputs."""
    return jax.nn.softplus(pre_activation) + TANH_MIN_STD


def tanh_std_bias(init_std: float | jax.Array) -> jax.Array:
    """The std pre-activation giving `init_std` (inverse of `tanh_std`); 0 gives brax's initial
    std log(2) + 0.001."""
    return jnp.log(jnp.expm1(jnp.asarray(init_std, jnp.float32) - TANH_MIN_STD))


@dataclasses.dataclass(frozen=True)
class ActionDistribution:
    """How actions follow from the actor's `(mean, std)`, as pure functions.

    `gaussian` (rsl_rl): samples are the actions (the env clips them). `tanh_gaussian` (brax's
    `NormalTanhDistribution`): the env receives `tanh(raw sample)`; log-probabilities are of the
    raw sample and include the tanh log-det-Jacobian, so the rollout stores the raw sample; the
    entropy is brax's one-sample estimate. Both share the Gaussian KL: tanh is invertible, so the
    KL of two squashed Gaussians is that of the Gaussians.
    """

    name: str = GAUSSIAN

    def __post_init__(self) -> None:
        if self.name not in DISTRIBUTIONS:
            raise ValueError(
                f"unknown policy.distribution {self.name!r}; valid choices: {list(DISTRIBUTIONS)}"
            )

    @property
    def squashed(self) -> bool:
        """The env receives `postprocess(sample)`: the update must see the stored raw sample."""
        return self.name == TANH_GAUSSIAN

    def sample(self, key: jax.Array, mean: jax.Array, std: jax.Array) -> jax.Array:
        """A raw (pre-squash) sample."""
        return gaussian_sample(key, mean, std)

    def postprocess(self, raw: jax.Array) -> jax.Array:
        """The action the env receives for a raw sample."""
        return jnp.tanh(raw) if self.squashed else raw

    def mode(self, mean: jax.Array) -> jax.Array:
        """The deterministic action (evaluation, play, export)."""
        return self.postprocess(mean)

    def log_prob(self, raw: jax.Array, mean: jax.Array, std: jax.Array) -> jax.Array:
        log_prob = gaussian_log_prob(raw, mean, std)
        if self.squashed:
            log_prob = log_prob - jnp.sum(tanh_log_det_jacobian(raw), axis=-1)
        return log_prob

    def entropy(self, mean: jax.Array, std: jax.Array, key: jax.Array | None = None) -> jax.Array:
        """Per sample; `tanh_gaussian` adds the log-det-Jacobian at one sample drawn with `key` for
        the whole array (brax's `ParametricDistribution.entropy`)."""
        entropy = gaussian_entropy(std)
        if self.squashed:
            x = gaussian_sample(key, mean, std)
            entropy = entropy + jnp.sum(tanh_log_det_jacobian(x), axis=-1)
        return entropy

    def kl(self, old_mean, old_std, mean, std, eps: float = 1e-5) -> jax.Array:
        """`gaussian_kl`: st_rl's `eps` inside the log ratio, 0 for the exact KL."""
        return gaussian_kl(old_mean, old_std, mean, std, eps)
