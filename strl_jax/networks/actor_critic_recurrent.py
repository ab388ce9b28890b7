"""Recurrent actor-critic (st_rl `ActorCriticRecurrent`): separate memories for actor and critic."""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from strl_jax.networks.actor_critic import NOISE_STD_TYPES
from strl_jax.networks.memory import Memory
from strl_jax.networks.mlp import MLP


class ActorCriticRecurrent(nn.Module):
    """obs -> memory -> MLP for both actor and critic; one step per call, hidden states explicit."""

    action_dim: int
    actor_hidden_dims: Sequence[int] = (256, 256, 256)
    critic_hidden_dims: Sequence[int] = (256, 256, 256)
    activation: str = "elu"
    init_noise_std: float = 1.0
    noise_std_type: str = "scalar"
    rnn_type: str = "lstm"
    rnn_hidden_size: int = 256
    rnn_num_layers: int = 1

    def setup(self) -> None:
        if self.noise_std_type not in NOISE_STD_TYPES:
            raise ValueError(
                f"unknown noise_std_type {self.noise_std_type!r}; valid choices: {list(NOISE_STD_TYPES)}"
            )
        self.memory_a = Memory(self.rnn_type, self.rnn_hidden_size, self.rnn_num_layers)
        self.memory_c = Memory(self.rnn_type, self.rnn_hidden_size, self.rnn_num_layers)
        self.actor = MLP(tuple(self.actor_hidden_dims), self.action_dim, self.activation, 0.01)
        self.critic = MLP(tuple(self.critic_hidden_dims), 1, self.activation, 1.0)
        init_value = self.init_noise_std if self.noise_std_type == "scalar" else jnp.log(self.init_noise_std)
        self.std_param = self.param(
            "std" if self.noise_std_type == "scalar" else "log_std",
            lambda _key, shape: jnp.full(shape, init_value, jnp.float32),
            (self.action_dim,),
        )

    def __call__(self, policy_obs, critic_obs, hidden_a, hidden_c):
        """Used for initialisation: touches every parameter."""
        mean, std, _ = self.distribution(policy_obs, hidden_a)
        value, _ = self.value(critic_obs, hidden_c)
        return mean, std, value

    def distribution(self, policy_obs: jax.Array, hidden_a):
        """Action mean and std for one step, and the actor's next hidden state."""
        features, hidden_a = self.memory_a(policy_obs, hidden_a)
        mean = self.actor(features)
        std = self.std_param if self.noise_std_type == "scalar" else jnp.exp(self.std_param)
        return mean, jnp.broadcast_to(std, mean.shape), hidden_a

    def value(self, critic_obs: jax.Array, hidden_c):
        """State value for one step, and the critic's next hidden state."""
        features, hidden_c = self.memory_c(critic_obs, hidden_c)
        return self.critic(features)[..., 0], hidden_c
