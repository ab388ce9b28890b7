"""One calling convention for feed-forward and recurrent actor-critics.

The learner, evaluation and export only talk to `PolicyModel`: a step function over a batch of
environments with an explicit (possibly empty) hidden state, a value function that does not
advance the hidden state, and a sequence function for the update. For a feed-forward network
the hidden state is `{}` and a "sequence" is any stack of samples.
"""

from __future__ import annotations

from typing import Any

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import struct

from strl_jax.networks.actor_critic import ActorCritic
from strl_jax.networks.actor_critic_recurrent import ActorCriticRecurrent
from strl_jax.networks.memory import initial_hidden, reset_hidden

POLICY_CLASSES = ("ActorCritic", "ActorCriticRecurrent")

Hidden = dict[str, Any]  # {"actor": h, "critic": h} for recurrent policies, {} otherwise


@struct.dataclass
class PolicyModel:
    """Pure functions of `(params, normalised observation groups, hidden)`."""

    module: nn.Module = struct.field(pytree_node=False)

    @property
    def recurrent(self) -> bool:
        return isinstance(self.module, ActorCriticRecurrent)

    @property
    def noise_std_type(self) -> str:
        return self.module.noise_std_type

    def initial_hidden(self, batch: int) -> Hidden:
        if not self.recurrent:
            return {}
        m = self.module
        make = lambda: initial_hidden(m.rnn_type, m.rnn_num_layers, batch, m.rnn_hidden_size)
        return {"actor": make(), "critic": make()}

    def init(self, key: jax.Array, obs_shapes: dict[str, tuple[int, ...]]):
        dummy = {k: jnp.zeros((1,) + tuple(s)) for k, s in obs_shapes.items()}
        if not self.recurrent:
            return self.module.init(key, dummy["policy"], dummy["critic"])
        hidden = self.initial_hidden(1)
        return self.module.init(key, dummy["policy"], dummy["critic"], hidden["actor"], hidden["critic"])

    def distribution(self, params, nobs: dict, hidden: Hidden):
        """`(mean, std, hidden')` for one step; only the actor's part of `hidden` changes."""
        if not self.recurrent:
            mean, std = self.module.apply(params, nobs["policy"], method=ActorCritic.distribution)
            hidden_out = hidden
        else:
            mean, std, h_a = self.module.apply(
                params, nobs["policy"], hidden["actor"], method=ActorCriticRecurrent.distribution
            )
            hidden_out = {**hidden, "actor": h_a}
        chex.assert_equal_shape([mean, std])
        chex.assert_shape(mean, (*nobs["policy"].shape[:-1], self.module.action_dim))
        return mean, std, hidden_out

    def value_and_hidden(self, params, nobs: dict, hidden: Hidden):
        """`(value, hidden')` for one step; only the critic's part of `hidden` changes."""
        if not self.recurrent:
            return self.module.apply(params, nobs["critic"], method=ActorCritic.value), hidden
        value, h_c = self.module.apply(
            params, nobs["critic"], hidden["critic"], method=ActorCriticRecurrent.value
        )
        return value, {**hidden, "critic": h_c}

    def value(self, params, nobs: dict, hidden: Hidden) -> jax.Array:
        """Value of `nobs` without advancing the hidden state (bootstrapping must not move it)."""
        return self.value_and_hidden(params, nobs, hidden)[0]

    def step(self, params, nobs: dict, hidden: Hidden):
        """`(mean, std, value, hidden')` for one acting step."""
        mean, std, hidden = self.distribution(params, nobs, hidden)
        value, hidden = self.value_and_hidden(params, nobs, hidden)
        return mean, std, value, hidden

    def sequence(self, params, nobs: dict, hidden0: Hidden, resets: jax.Array):
        """Re-evaluate stored `[T, B]` steps: `(mean, std, value)`, each `[T, B, ...]`.

        Recurrent: a scan from the stored initial state, zeroing the carry of sequences whose
        previous step ended an episode (`resets[t] = done[t-1]`): the same numbers as rsl_rl's
        split-and-pad evaluation, without padding.
        """
        chex.assert_shape(resets, nobs["policy"].shape[:2])
        if not self.recurrent:
            mean, std, _ = self.distribution(params, nobs, hidden0)
            return mean, std, self.value(params, nobs, hidden0)

        def body(hidden, xs):
            obs_t, reset_t = xs
            hidden = reset_hidden_groups(hidden, reset_t)
            mean, std, value, hidden = self.step(params, obs_t, hidden)
            return hidden, (mean, std, value)

        _, (mean, std, value) = jax.lax.scan(body, hidden0, (nobs, resets))
        return mean, std, value


def reset_hidden_groups(hidden: Hidden, done: jax.Array) -> Hidden:
    """Zero actor and critic hidden states of finished environments."""
    return {k: reset_hidden(v, done) for k, v in hidden.items()}


def make_policy_model(action_dim: int, cfg) -> PolicyModel:
    """Build from a `PolicyConfig` (`class_name` picks feed-forward or recurrent)."""
    common = dict(
        action_dim=action_dim,
        actor_hidden_dims=tuple(cfg.actor_hidden_dims),
        critic_hidden_dims=tuple(cfg.critic_hidden_dims),
        activation=cfg.activation,
        init_noise_std=cfg.init_noise_std,
        noise_std_type=cfg.noise_std_type,
    )
    if cfg.class_name == "ActorCritic":
        return PolicyModel(ActorCritic(**common))
    if cfg.class_name == "ActorCriticRecurrent":
        return PolicyModel(
            ActorCriticRecurrent(
                **common,
                rnn_type=cfg.rnn_type,
                rnn_hidden_size=cfg.rnn_hidden_size,
                rnn_num_layers=cfg.rnn_num_layers,
            )
        )
    raise ValueError(f"unknown policy.class_name {cfg.class_name!r}; valid choices: {list(POLICY_CLASSES)}")
