"""The acting policy: observation group -> normaliser -> actor network -> action.

One function chain for every place a policy acts: the training rollout, evaluation, `play`,
inference, `collect`, a frozen teacher and export. The policy's memory is only the actor's
(`{"actor": h}`; `{}` for a feed-forward policy): acting never runs the critic.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from strl_jax.networks.estimators import StageUnits, raw_estimates
from strl_jax.networks.normalizer import NormalizerState, normalize
from strl_jax.networks.policy import Hidden, PolicyModel, reset_hidden_groups

ACTOR_INPUT = "policy"  # the normaliser (and network input) the actor reads, in its own run's names


@dataclasses.dataclass(frozen=True)
class Actor:
    """A policy network and how it reads observations and emits actions (static, hashable).

    `obs_group` is the env's observation group fed to the actor (a teacher may read `critic`);
    its statistics are the run's `policy` normaliser. `clip_actions` clips executed actions the way
    the env does, for deployment; training samples stay unclipped (the env clips them).
    """

    model: PolicyModel
    obs_group: str = ACTOR_INPUT
    normalize_obs: bool = True
    clip_actions: float | None = None

    @property
    def recurrent(self) -> bool:
        return self.model.recurrent

    def initial_hidden(self, batch: int) -> Hidden:
        """The acting memories: `{"actor": h}` plus any estimator stage's own, `{}` for a
        feed-forward policy (the critic's memory is never run)."""
        return {k: v for k, v in self.model.initial_hidden(batch).items() if k != "critic"}

    def reset_hidden(self, hidden: Hidden, done: jax.Array) -> Hidden:
        return reset_hidden_groups(hidden, done)

    def actor_input(self, normalizers: dict[str, NormalizerState], obs: dict) -> jax.Array:
        """The (normalised) observation the actor network reads."""
        x = obs[self.obs_group]
        return normalize(normalizers[ACTOR_INPUT], x) if self.normalize_obs else x

    def units(self, normalizers: dict[str, NormalizerState]) -> StageUnits | None:
        """Unit conversions of the policy's estimator stages under its run's normalisers."""
        return self.model.units(normalizers, self.normalize_obs, ACTOR_INPUT)

    def forward(self, params: Any, normalizers: dict, obs: dict, hidden: Hidden, draws=None):
        """`(mean, std, hidden', estimates)` for raw observation groups; `draws` are the estimator
        stages' replacement masks (None: inference, every replacing stage replaces)."""
        nobs = {ACTOR_INPUT: self.actor_input(normalizers, obs)}
        return self.model.forward(params, nobs, hidden, draws, self.units(normalizers))

    def distribution(self, params: Any, normalizers: dict, obs: dict, hidden: Hidden, draws=None):
        """`(mean, std, hidden')` for raw observation groups."""
        mean, std, hidden, _ = self.forward(params, normalizers, obs, hidden, draws)
        return mean, std, hidden

    def raw_estimates(self, normalizers: dict, estimates: dict) -> dict:
        """The stages' estimates in the env's units."""
        return raw_estimates(estimates, self.units(normalizers))

    def clip(self, actions: jax.Array) -> jax.Array:
        c = self.clip_actions
        return actions if c is None else jnp.clip(actions, -c, c)

    def mode(self, mean: jax.Array) -> jax.Array:
        """The clipped deterministic action for the distribution's mean (tanh(mean) when squashed)."""
        return self.clip(self.model.action_dist.mode(mean))

    def act(self, params: Any, normalizers: dict, obs: dict, hidden: Hidden, keys: jax.Array | None = None):
        """`(clipped action, hidden')`: the mode, or with `keys` (one per env) a sample, each as the
        env receives it."""
        mean, std, hidden = self.distribution(params, normalizers, obs, hidden)
        if keys is None:
            return self.mode(mean), hidden
        dist = self.model.action_dist
        return self.clip(dist.postprocess(jax.vmap(dist.sample)(keys, mean, std))), hidden


def make_actor(model: PolicyModel, cfg: Any, obs_group: str = ACTOR_INPUT) -> Actor:
    """The actor of a run's `TrainConfig` (normalisation and action clipping as it trained)."""
    return Actor(
        model=model,
        obs_group=obs_group,
        normalize_obs=cfg.runner.empirical_normalization,
        clip_actions=cfg.env.clip_actions,
    )
