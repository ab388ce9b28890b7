"""AMP discriminator (st_rl `AMPDiscriminator`): an MLP scoring one transition of motion.

Its input is the AMP observation of a transition, `concat(s, s')` of two consecutive frames
(`strl_jax.buffers.motion.amp_observation`), normalised by the caller; its output is one
unnormalised score per transition, trained towards +1 on expert motion and -1 on the policy's
(LSGAN, `strl_jax.agents.amp`).
"""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from strl_jax.networks.mlp import MLP


class Discriminator(nn.Module):
    """`amp_obs[..., 2 * frame_dim] -> score[...]`."""

    hidden_dims: Sequence[int] = (1024, 512)
    activation: str = "relu"  # st_rl's discriminator uses ReLU between its linear layers

    @nn.compact
    def __call__(self, amp_obs: jax.Array) -> jax.Array:
        return MLP(tuple(self.hidden_dims), 1, self.activation, name="mlp")(amp_obs)[..., 0]


def make_discriminator(cfg) -> Discriminator:
    """Build from a `policy.amp_discriminator` config section (`AmpDiscriminatorConfig`)."""
    if not cfg.hidden_dims:
        raise ValueError("policy.amp_discriminator.hidden_dims must name at least one hidden layer")
    return Discriminator(hidden_dims=tuple(cfg.hidden_dims), activation=cfg.activation)


def init_discriminator(module: Discriminator, key: jax.Array, amp_obs_dim: int):
    """Parameters for AMP observations of size `amp_obs_dim` (= 2 x the frame size)."""
    return module.init(key, jnp.zeros((1, amp_obs_dim), jnp.float32))
