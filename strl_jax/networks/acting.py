"""The acting policy: observation group -> normaliser -> actor network -> action.

One function chain for every place a policy acts: the training rollout, evaluation, `play`,
inference, `collect`, a frozen teacher and export. The policy's memory is only the actor's
(`{"actor": h}`; `{}` for a feed-forward policy): acting never runs the critic.

`acting_policy` closes an actor over its parameters as the deterministic step on what a robot
measures (`ActingPolicy`), the one that inference, export, deployment and the mutex's sub-policies
run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from strl_jax.networks.encoded_inputs import raw_input_size
from strl_jax.networks.estimators import StageUnits, raw_estimates
from strl_jax.networks.normalizer import InputNormalization, NormalizerState, input_normalization
from strl_jax.networks.policy import Hidden, PolicyModel, reset_hidden_groups
from strl_jax.static_take import take_static

ACTOR_INPUT = "policy"  # the normaliser (and network input) the actor reads, in its own run's names
# what `ActingPolicy` carries: the actor's recurrent state ([layers, batch, size] arrays), {} for
# feed-forward policies
ActingHidden = Any
ActingStep = Callable[[jax.Array, ActingHidden], tuple[jax.Array, ActingHidden]]


@dataclasses.dataclass(frozen=True)
class Actor:
    """A policy network and how it reads observations and emits actions (static, hashable).

    `obs_group` is the env's observation group fed to the actor (a teacher may read `critic`);
    its statistics are the run's `policy` normaliser, applied by the run's `normalization`.
    `clip_actions` clips executed actions the way the env does, for deployment; training samples
    stay unclipped (the env clips them).
    """

    model: PolicyModel
    obs_group: str = ACTOR_INPUT
    normalization: InputNormalization = InputNormalization()
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
        return self.normalization.group(normalizers, obs[self.obs_group], ACTOR_INPUT)

    def units(self, normalizers: dict[str, NormalizerState]) -> StageUnits | None:
        """Unit conversions of the policy's estimator stages under its run's normalisers."""
        return self.model.units(self.normalization.statistics(normalizers), ACTOR_INPUT)

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
        normalization=input_normalization(cfg.runner),
        clip_actions=cfg.env.clip_actions,
    )


def action_size(params: Any) -> int:
    """Number of action dimensions, read from the learned std (one entry per dimension), or half
    the actor's outputs where it also outputs the std (`policy.distribution: tanh_gaussian`)."""
    inner = params["params"]
    if "std" not in inner and "log_std" not in inner:
        return int(inner["actor"]["output"]["kernel"].shape[-1]) // 2
    return int((inner["std"] if "std" in inner else inner["log_std"]).shape[-1])


def policy_observation_size(params: Any) -> int:
    """Width of what the actor's first layer reads: the policy group's observation, with encoded
    components as their latents (`networks.encoded_inputs.raw_input_size` undoes that)."""
    inner = params["params"]
    if "memory_a" in inner:
        return int(inner["memory_a"]["layer_0"]["weight_ih"].shape[1])
    first = inner["actor"].get("hidden_0", inner["actor"]["output"])
    return int(first["kernel"].shape[0])


@dataclasses.dataclass(frozen=True)
class ActingPolicy:
    """The deterministic policy on what a robot measures: `step(obs, hidden) -> (action, hidden')`.

    `obs` is the policy group's observation `[batch, observation_size]` without the components
    that estimator stages always replace (none for other policies); `outputs(obs, hidden)` also
    returns the stages' estimates in the env's units (`estimates`: their names and sizes). The
    hidden state is `{}` for feed-forward policies, the actor's bare memory for recurrent ones, and
    `{"actor": ..., <stage>: ...}` when a stage keeps its own memory.
    """

    step: ActingStep
    outputs: Callable[[jax.Array, ActingHidden], tuple[jax.Array, dict, ActingHidden]]
    initial_hidden: Callable[[int], ActingHidden]
    recurrent: bool
    observation_size: int
    estimates: tuple[tuple[str, int], ...] = ()


def acting_policy(
    actor: Actor, params: Any, normalizers: dict[str, NormalizerState], obs_size: int | None = None
) -> ActingPolicy:
    """`actor`'s deterministic step on the measured observation array (for export and deployment)."""
    if obs_size is None:
        obs_size = raw_input_size(policy_observation_size(params), actor.model.encoders)
    measured = actor.model.measured_indices(obs_size)
    # The full observation from the measured one; entries a stage replaces get a placeholder.
    source = np.zeros(obs_size, np.int32)
    source[measured] = np.arange(len(measured))
    complete = len(measured) == obs_size
    bare = actor.recurrent and set(actor.initial_hidden(1)) == {"actor"}

    def outputs(obs: jax.Array, hidden: ActingHidden) -> tuple[jax.Array, dict, ActingHidden]:
        memory = {"actor": hidden} if bare else hidden
        full = obs if complete else take_static(obs, source)
        mean, _, memory, estimates = actor.forward(params, normalizers, {actor.obs_group: full}, memory)
        estimates = actor.raw_estimates(normalizers, estimates)
        return actor.mode(mean), estimates, memory["actor"] if bare else memory

    def step(obs: jax.Array, hidden: ActingHidden) -> tuple[jax.Array, ActingHidden]:
        actions, _, hidden = outputs(obs, hidden)
        return actions, hidden

    def initial_hidden(batch: int) -> ActingHidden:
        hidden = actor.initial_hidden(batch)
        return hidden["actor"] if bare else hidden

    return ActingPolicy(
        step=step,
        outputs=outputs,
        initial_hidden=initial_hidden,
        recurrent=actor.recurrent,
        observation_size=len(measured),
        estimates=tuple((s.name, s.output_size) for s in actor.model.stages),
    )
