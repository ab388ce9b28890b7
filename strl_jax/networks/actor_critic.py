"""Feed-forward actor-critic (rsl_rl's ActorCritic): a state-independent Gaussian std, or brax's
state-dependent std for the tanh-squashed Gaussian (`policy.distribution`)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from strl_jax.networks.encoded_inputs import EncoderSpec, embed
from strl_jax.networks.estimators import Stage, StageSpec, StageUnits, run_stages
from strl_jax.networks.gaussian import GAUSSIAN, ActionDistribution, tanh_std, tanh_std_bias
from strl_jax.networks.mlp import MLP

NOISE_STD_TYPES = ("scalar", "log")
MIN_STD = 1e-6  # the smallest action std an update may leave


def std_parameter(module: nn.Module) -> jax.Array:
    """The learned, state-independent std (`std`) or its log (`log_std`), per action dimension.

    Shared by the feed-forward and recurrent actor-critics; call from `setup`.
    """
    if module.noise_std_type not in NOISE_STD_TYPES:
        raise ValueError(
            f"unknown noise_std_type {module.noise_std_type!r}; valid choices: {list(NOISE_STD_TYPES)}"
        )
    scalar = module.noise_std_type == "scalar"
    init_value = module.init_noise_std if scalar else jnp.log(module.init_noise_std)
    return module.param(
        "std" if scalar else "log_std",
        lambda _key, shape: jnp.full(shape, init_value, jnp.float32),
        (module.action_dim,),
    )


def std_from_parameter(param: jax.Array, noise_std_type: str, shape: tuple[int, ...]) -> jax.Array:
    """The std broadcast to the action mean's shape."""
    std = param if noise_std_type == "scalar" else jnp.exp(param)
    return jnp.broadcast_to(std, shape)


def setup_actor_head(module: nn.Module) -> None:
    """The actor MLP and the std's parameters of both actor-critics (call from `setup`).

    `gaussian`: the MLP outputs the mean, the std is a learned parameter per action dimension.
    `tanh_gaussian` (brax): the MLP outputs the mean and a std pre-activation per action
    dimension; `init_noise_std` is the initial std, through the pre-activation's initial bias.
    """
    dims = tuple(module.actor_hidden_dims)
    if ActionDistribution(module.action_distribution).squashed:
        a = module.action_dim

        def bias(_key, shape, dtype=jnp.float32):
            std_bias = jnp.full((a,), tanh_std_bias(module.init_noise_std), dtype)
            return jnp.concatenate([jnp.zeros((shape[0] - a,), dtype), std_bias])

        module.actor = MLP(dims, 2 * a, module.activation, 0.01, bias)
        return
    module.actor = MLP(dims, module.action_dim, module.activation, 0.01)
    module.std_param = std_parameter(module)


def actor_head(module: nn.Module, features: jax.Array) -> tuple[jax.Array, jax.Array]:
    """`(mean, std)` of the action distribution from the actor's input features."""
    out = module.actor(features)
    if ActionDistribution(module.action_distribution).squashed:
        mean, pre_std = jnp.split(out, 2, axis=-1)
        return mean, tanh_std(pre_std)
    return out, std_from_parameter(module.std_param, module.noise_std_type, out.shape)


class ActorCriticFields(nn.Module):
    """The settings both actor-critics share (`ActorCritic`, `ActorCriticRecurrent`): networks,
    action distribution, estimator stages and encoders. Fields only; each subclass builds its own.

    `noise_std_type="scalar"` learns the std directly, `"log"` learns its logarithm;
    `action_distribution="tanh_gaussian"`: the actor also outputs the std (`setup_actor_head`).
    """

    action_dim: int
    actor_hidden_dims: Sequence[int] = (256, 256, 256)
    critic_hidden_dims: Sequence[int] = (256, 256, 256)
    activation: str = "elu"
    init_noise_std: float = 1.0
    noise_std_type: str = "scalar"
    action_distribution: str = GAUSSIAN  # or TANH_GAUSSIAN (networks.gaussian.ActionDistribution)
    stages: tuple[StageSpec, ...] = ()  # estimator / adaptor before the actor (StateAc)
    encoders: tuple[EncoderSpec, ...] = ()  # components of the policy group embedded by encoders
    critic_encoders: tuple[EncoderSpec, ...] = ()  # ... of the critic group
    shared_critic_encoders: bool = False  # the critic applies the actor's encoders (st_rl "shared")


class ActorCritic(ActorCriticFields):
    """Actor MLP -> action mean, critic MLP -> value, one learned std per action dimension."""

    def setup(self) -> None:
        setup_actor_head(self)
        self.critic = MLP(tuple(self.critic_hidden_dims), 1, self.activation, 1.0)
        self.stage = {s.name: Stage(s) for s in self.stages}
        setup_encoders(self)

    def __call__(
        self, policy_obs: jax.Array, critic_obs: jax.Array
    ) -> tuple[jax.Array, jax.Array, jax.Array]:
        """Used for initialisation: touches every parameter."""
        mean, std, _, _ = self.forward(policy_obs, {}, None, None)
        return mean, std, self.value(critic_obs)

    def forward(self, policy_obs: jax.Array, hidden: dict, draws: dict | None, units: StageUnits | None):
        """`(mean, std, hidden, estimates)`: the stages (`networks.estimators`), then the actor."""
        x, hidden, estimates = run_stages(self.stage, self.stages, policy_obs, hidden, draws, units)
        x, latents = embed(x, self.encoders, self.encoder)
        mean, std = actor_head(self, x)
        return mean, std, hidden, {**estimates, **latents}

    def distribution(self, policy_obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Mean and std of the action distribution for normalised policy observations (inference)."""
        mean, std, _, _ = self.forward(policy_obs, {}, None, None)
        return mean, std

    def value(self, critic_obs: jax.Array) -> jax.Array:
        """State value for normalised critic observations, without the trailing unit axis."""
        return self.critic(embed_critic(self, critic_obs))[..., 0]


def setup_encoders(module: nn.Module) -> None:
    """The encoders of both actor-critics (call from `setup`): parameters `encoder_<component>`
    and, unless shared, `critic_encoder_<component>`."""
    module.encoder = {s.component: s.build() for s in module.encoders}
    own = {} if module.shared_critic_encoders else {s.component: s.build() for s in module.critic_encoders}
    module.critic_encoder = own


def embed_critic(module: nn.Module, critic_obs: jax.Array) -> jax.Array:
    """The critic's observation with its encoded components replaced by their latents."""
    encoders = module.encoder if module.shared_critic_encoders else module.critic_encoder
    return embed(critic_obs, module.critic_encoders, encoders)[0]


def clamp_std(params: dict, noise_std_type: str, min_std: float | jax.Array | None) -> dict:
    """Apply after every update: the std never falls below st_rl's `clip_min_std` (a number, or
    this iteration's `std_floor`), and never below `MIN_STD` (a std of zero or less has no
    Gaussian; rsl_rl's `Normal` would raise), for both `noise_std_type`s. A state-dependent std
    (`tanh_gaussian`) has no parameter to clamp: its floor is brax's `min_std`."""
    if "std" not in params["params"] and "log_std" not in params["params"]:
        return params
    if isinstance(min_std, jax.Array):
        floor = jnp.maximum(min_std, MIN_STD)
        log_floor = jnp.log(floor)
    else:
        floor = MIN_STD if min_std is None else max(float(min_std), MIN_STD)
        log_floor = math.log(floor)
    inner = dict(params["params"])
    if noise_std_type == "scalar":
        inner["std"] = jnp.maximum(inner["std"], floor)
    else:
        inner["log_std"] = jnp.maximum(inner["log_std"], log_floor)
    return {**params, "params": inner}


def std_floor(
    clip_min_std: float | None, schedule: dict | None, iteration: jax.Array
) -> float | jax.Array | None:
    """The std floor of an update at `iteration`: `clip_min_std`, or with
    `algorithm.clip_min_std_schedule` ({final, start, end}) the floor moved linearly to `final`
    between iterations `start` and `end`. A floor that keeps a policy exploring early can hold
    it back later, when a smaller std would let it act precisely."""
    if schedule is None or clip_min_std is None:
        return clip_min_std
    start, end, final = schedule["start"], schedule["end"], float(schedule["final"])
    at = jnp.asarray(iteration, jnp.float32)
    if end == start:  # a step at that iteration
        progress = (at >= end).astype(jnp.float32)
    else:
        progress = jnp.clip((at - start) / (end - start), 0.0, 1.0)
    return jnp.float32(clip_min_std) + (final - float(clip_min_std)) * progress
