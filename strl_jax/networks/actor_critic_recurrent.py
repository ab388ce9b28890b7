"""Recurrent actor-critic (st_rl `ActorCriticRecurrent`): separate memories for actor and critic."""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax

from strl_jax.networks.actor_critic import std_from_parameter, std_parameter
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
        self.memory_a = Memory(self.rnn_type, self.rnn_hidden_size, self.rnn_num_layers)
        self.memory_c = Memory(self.rnn_type, self.rnn_hidden_size, self.rnn_num_layers)
        self.actor = MLP(tuple(self.actor_hidden_dims), self.action_dim, self.activation, 0.01)
        self.critic = MLP(tuple(self.critic_hidden_dims), 1, self.activation, 1.0)
        self.std_param = std_parameter(self)

    def __call__(self, policy_obs, critic_obs, hidden_a, hidden_c):
        """Used for initialisation: touches every parameter."""
        mean, std, _ = self.distribution(policy_obs, hidden_a)
        value, _ = self.value(critic_obs, hidden_c)
        return mean, std, value

    def distribution(self, policy_obs: jax.Array, hidden_a):
        """Action mean and std for one step, and the actor's next hidden state."""
        features, hidden_a = self.memory_a(policy_obs, hidden_a)
        mean = self.actor(features)
        return mean, std_from_parameter(self.std_param, self.noise_std_type, mean.shape), hidden_a

    def value(self, critic_obs: jax.Array, hidden_c):
        """State value for one step, and the critic's next hidden state."""
        features, hidden_c = self.memory_c(critic_obs, hidden_c)
        return self.critic(features)[..., 0], hidden_c
