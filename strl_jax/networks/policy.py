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
from strl_jax.networks.encoded_inputs import EncoderSpec
from strl_jax.networks.encoder_settings import resolve_encoders
from strl_jax.networks.estimators import (
    StageSpec,
    StageUnits,
    draw_replacements,
    measured_indices,
    stage_units,
)
from strl_jax.networks.gaussian import ActionDistribution
from strl_jax.networks.memory import initial_hidden, reset_hidden
from strl_jax.networks.policy_classes import policy_class, resolve_stages

Hidden = dict[str, Any]  # {"actor": h, "critic": h, <stage>: h} for recurrent policies, {} otherwise
CRITIC_MODULES = ("critic", "memory_c")  # with the critic's own encoders, `critic_encoder_<component>`


def network_of(module: str) -> str:
    """`"critic"` for a top-level module of the critic (its MLP, memory and own encoders), else
    `"actor"` (actor MLP, std, memory, encoders and estimator stages: what acting reads)."""
    return "critic" if module in CRITIC_MODULES or module.startswith("critic_encoder") else "actor"


@struct.dataclass
class PolicyModel:
    """Pure functions of `(params, normalised observation groups, hidden)`.

    `draws` (the replacement masks of the estimator stages, see `networks.estimators`) and `units`
    (their unit conversions) default to inference: every replacing stage replaces, in raw units.
    """

    module: nn.Module = struct.field(pytree_node=False)
    # st_rl's DeterministicPolicyMixin: the rollout executes the mean action (its log-probability
    # under the Gaussian is what the update's ratio compares)
    deterministic: bool = struct.field(pytree_node=False, default=False)

    @property
    def recurrent(self) -> bool:
        return isinstance(self.module, ActorCriticRecurrent)

    @property
    def encoders(self) -> tuple[EncoderSpec, ...]:
        """The encoders of the policy group's components (their latents are named by component)."""
        return tuple(self.module.encoders)

    @property
    def noise_std_type(self) -> str:
        return self.module.noise_std_type

    @property
    def action_dist(self) -> ActionDistribution:
        """How actions, log-probabilities and entropies follow from `(mean, std)`."""
        return ActionDistribution(self.module.action_distribution)

    @property
    def stages(self) -> tuple[StageSpec, ...]:
        return tuple(self.module.stages)

    def initial_hidden(self, batch: int) -> Hidden:
        if not self.recurrent:
            return {}
        m = self.module
        make = lambda: initial_hidden(m.rnn_type, m.rnn_num_layers, batch, m.rnn_hidden_size)
        hidden = {"actor": make(), "critic": make()}
        return hidden | {s.name: make() for s in self.stages if s.memory}

    def init(self, key: jax.Array, obs_shapes: dict[str, tuple[int, ...]]):
        dummy = {k: jnp.zeros((1,) + tuple(s)) for k, s in obs_shapes.items()}
        if not self.recurrent:
            return self.module.init(key, dummy["policy"], dummy["critic"])
        return self.module.init(key, dummy["policy"], dummy["critic"], self.initial_hidden(1))

    def network_labels(self, params) -> Any:
        """`params` with every leaf replaced by the network it belongs to (`network_of`)."""
        return {
            collection: {k: jax.tree.map(lambda _, k=k: network_of(k), v) for k, v in modules.items()}
            for collection, modules in params.items()
        }

    def draw(self, keys: jax.Array) -> dict[str, jax.Array]:
        """This step's replacement masks, one key per env ({} without replacing stages)."""
        return draw_replacements(self.stages, keys)

    @property
    def draws_anything(self) -> bool:
        return any(s.replaces for s in self.stages)

    def units(self, statistics: dict | None, actor_group: str = "policy") -> StageUnits | None:
        """The stages' unit conversions under the statistics the inputs were normalised with
        (`InputNormalization.statistics`; None: raw inputs)."""
        return stage_units(self.stages, statistics, actor_group)

    def measured_indices(self, size: int):
        """Entries of the policy observation that inference reads (see `networks.estimators`)."""
        return measured_indices(self.stages, size)

    def forward(self, params, nobs: dict, hidden: Hidden, draws=None, units=None):
        """`(mean, std, hidden', estimates)` for one step; the critic's memory does not change."""
        method = ActorCriticRecurrent.forward if self.recurrent else ActorCritic.forward
        own = hidden if self.recurrent else {}
        mean, std, new_hidden, estimates = self.module.apply(
            params, nobs["policy"], own, draws, units, method=method
        )
        chex.assert_equal_shape([mean, std])
        chex.assert_shape(mean, (*nobs["policy"].shape[:-1], self.module.action_dim))
        return mean, std, {**hidden, **new_hidden} if self.recurrent else hidden, estimates

    def distribution(self, params, nobs: dict, hidden: Hidden, draws=None, units=None):
        """`(mean, std, hidden')` for one step."""
        mean, std, hidden, _ = self.forward(params, nobs, hidden, draws, units)
        return mean, std, hidden

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

    def step(self, params, nobs: dict, hidden: Hidden, draws=None, units=None):
        """`(mean, std, value, hidden', estimates)` for one acting step."""
        mean, std, hidden, estimates = self.forward(params, nobs, hidden, draws, units)
        value, hidden = self.value_and_hidden(params, nobs, hidden)
        return mean, std, value, hidden, estimates

    def sequence(
        self, params, nobs: dict, hidden0: Hidden, resets: jax.Array, draws=None, units=None, resample=None
    ):
        """Re-evaluate stored `[T, B]` steps: `(mean, std, value, estimates)`, each `[T, B, ...]`.

        Recurrent: a scan from the stored initial state, zeroing the carry of sequences whose
        previous step ended an episode (`resets[t] = done[t-1]`): the same numbers as rsl_rl's
        split-and-pad evaluation, without padding. `draws` are the stored replacement masks.
        `resample = (key, prob)`: st_rl TPPO's `hidden_state_resample_prob`, every trajectory
        (a column's first step, or a step after an episode ended) starts from uniform(-1, 1)
        memories with probability `prob`.
        """
        chex.assert_shape(resets, nobs["policy"].shape[:2])
        if not self.recurrent:
            mean, std, _, estimates = self.forward(params, nobs, hidden0, draws, units)
            return mean, std, self.value(params, nobs, hidden0), estimates
        steps = resets.shape[0]
        starts = resets.at[0].set(1.0)
        keys = jax.random.split(jax.random.PRNGKey(0) if resample is None else resample[0], steps)

        def body(hidden, xs):
            obs_t, reset_t, draws_t, start_t, key_t = xs
            hidden = reset_hidden_groups(hidden, reset_t)
            if resample is not None:
                hidden = resample_hidden(hidden, start_t > 0, key_t, resample[1])
            mean, std, value, hidden, estimates = self.step(params, obs_t, hidden, draws_t, units)
            return hidden, (mean, std, value, estimates)

        xs = (nobs, resets, draws, starts, keys)
        _, (mean, std, value, estimates) = jax.lax.scan(body, hidden0, xs)
        return mean, std, value, estimates


def resample_hidden(hidden: Hidden, starts: jax.Array, key: jax.Array, prob: float) -> Hidden:
    """Where a trajectory starts (`starts[B]`), with probability `prob`, every memory (actor,
    critic, stages; h and c) of that column becomes uniform(-1, 1)."""
    leaves, tree = jax.tree.flatten(hidden)
    keys = jax.random.split(key, len(leaves) + 1)
    rows = starts & (jax.random.uniform(keys[0], starts.shape) < prob)
    out = [
        jnp.where(rows[None, :, None], jax.random.uniform(k, h.shape, h.dtype, -1.0, 1.0), h)
        for k, h in zip(keys[1:], leaves, strict=True)
    ]
    return tree.unflatten(out)


def reset_hidden_groups(hidden: Hidden, done: jax.Array) -> Hidden:
    """Zero actor and critic hidden states of finished environments."""
    return {k: reset_hidden(v, done) for k, v in hidden.items()}


def make_policy_model(
    action_dim: int, cfg, components: dict | None = None, shapes: dict | None = None
) -> PolicyModel:
    """Build from a `PolicyConfig`: `class_name` picks the core (feed-forward or recurrent), the
    estimator stages and the encoders, whose components are looked up in the env's `components`
    layouts (and image components' `(C, H, W)` in `shapes`, `VecEnv.component_shapes`)."""
    spec = policy_class(cfg.class_name)
    encoders, critic_encoders, shared = resolve_encoders(cfg, spec, components, shapes)
    common = dict(
        action_dim=action_dim,
        actor_hidden_dims=tuple(cfg.actor_hidden_dims),
        critic_hidden_dims=tuple(cfg.critic_hidden_dims),
        activation=cfg.activation,
        init_noise_std=cfg.init_noise_std,
        noise_std_type=cfg.noise_std_type,
        action_distribution=cfg.distribution,
        stages=resolve_stages(cfg, spec, components),
        encoders=encoders,
        critic_encoders=critic_encoders,
        shared_critic_encoders=shared,
    )
    if not spec.recurrent:
        return PolicyModel(ActorCritic(**common), deterministic=spec.deterministic)
    module = ActorCriticRecurrent(
        **common,
        rnn_type=cfg.rnn_type,
        rnn_hidden_size=cfg.rnn_hidden_size,
        rnn_num_layers=cfg.rnn_num_layers,
    )
    return PolicyModel(module, deterministic=spec.deterministic)
