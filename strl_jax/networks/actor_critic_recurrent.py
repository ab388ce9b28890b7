"""Recurrent actor-critic (st_rl `ActorCriticRecurrent`): separate memories for actor and critic."""

from __future__ import annotations

import jax

from strl_jax.networks.actor_critic import (
    ActorCriticFields,
    actor_head,
    embed_critic,
    setup_actor_head,
    setup_encoders,
)
from strl_jax.networks.encoded_inputs import embed
from strl_jax.networks.estimators import Stage, StageUnits, run_stages
from strl_jax.networks.memory import Memory
from strl_jax.networks.mlp import MLP


class ActorCriticRecurrent(ActorCriticFields):
    """obs -> memory -> MLP for both actor and critic; one step per call, hidden states explicit.
    Its stages are StateAcRecurrent's and PrivilegeStateAcRecurrent's estimator / adaptor."""

    rnn_type: str = "lstm"
    rnn_hidden_size: int = 256
    rnn_num_layers: int = 1

    def setup(self) -> None:
        self.memory_a = Memory(self.rnn_type, self.rnn_hidden_size, self.rnn_num_layers)
        self.memory_c = Memory(self.rnn_type, self.rnn_hidden_size, self.rnn_num_layers)
        setup_actor_head(self)
        self.critic = MLP(tuple(self.critic_hidden_dims), 1, self.activation, 1.0)
        memory = dict(rnn_type=self.rnn_type, rnn_hidden_size=self.rnn_hidden_size)
        self.stage = {s.name: Stage(s, **memory, rnn_num_layers=self.rnn_num_layers) for s in self.stages}
        setup_encoders(self)

    def __call__(self, policy_obs, critic_obs, hidden: dict):
        """Used for initialisation: touches every parameter."""
        mean, std, _, _ = self.forward(policy_obs, hidden, None, None)
        value, _ = self.value(critic_obs, hidden["critic"])
        return mean, std, value

    def forward(self, policy_obs: jax.Array, hidden: dict, draws: dict | None, units: StageUnits | None):
        """`(mean, std, hidden', estimates)` for one step: the stages that read the observation,
        the actor's memory, the stage that reads the memory's output (`use_actor_rnn`), the actor.
        Only the actor's and the stages' memories in `hidden` change."""
        x, hidden, estimates = run_stages(self.stage, self.stages, policy_obs, hidden, draws, units)
        x, latents = embed(x, self.encoders, self.encoder)
        features, hidden["actor"] = self.memory_a(x, hidden["actor"])
        for s in self.stages:
            if s.reads_actor_memory:
                estimates[s.name] = self.stage[s.name](features, None)[0]
        mean, std = actor_head(self, features)
        return mean, std, hidden, {**estimates, **latents}

    def value(self, critic_obs: jax.Array, hidden_c):
        """State value for one step, and the critic's next hidden state."""
        features, hidden_c = self.memory_c(embed_critic(self, critic_obs), hidden_c)
        return self.critic(features)[..., 0], hidden_c
