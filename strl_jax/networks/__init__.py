"""Pure flax.linen networks, distributions and observation normalisers."""

from strl_jax.networks.actor_critic import ActorCritic
from strl_jax.networks.gaussian import (
    gaussian_entropy,
    gaussian_kl,
    gaussian_log_prob,
    gaussian_sample,
)
from strl_jax.networks.mlp import MLP, resolve_activation
from strl_jax.networks.normalizer import (
    NormalizerState,
    init_normalizer,
    normalize,
    update_normalizer,
)

__all__ = [
    "MLP",
    "ActorCritic",
    "NormalizerState",
    "gaussian_entropy",
    "gaussian_kl",
    "gaussian_log_prob",
    "gaussian_sample",
    "init_normalizer",
    "normalize",
    "resolve_activation",
    "update_normalizer",
]
