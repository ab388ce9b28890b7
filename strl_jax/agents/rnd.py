"""rsl_rl's Random Network Distillation (`algorithm.rnd_cfg`) as a learner part.

A frozen random `target` MLP and a trained `predictor` MLP embed one observation group; the
distance between their embeddings is large on states the predictor has rarely been trained on,
and that curiosity bonus is added to the learning reward. Order and semantics are rsl_rl's:

- Rollout: the intrinsic reward of a step reads the observation *after* it (reset where an
  episode ended), normalised by the state normaliser (`state_normalization`, statistics fixed
  during the rollout); `||target - predictor||` is divided by the running std of its discounted
  sum (`reward_normalization`: rsl_rl's EmpiricalDiscountedVariationNormalization, gamma 0.99,
  updated every step, never reset at episode ends), then scaled by `weight(step)` (counted in
  env steps, from 1) and added to the reward.
- Update: on every minibatch the predictor takes one step of its own Adam at `learning_rate`
  on the MSE to the target on the minibatch's observations *before* each step (no clipping,
  independent of the policy's optimiser and adaptive rate).
- After the update the state normaliser takes the rollout's observations.

As in rsl_rl's `resolve_rnd_config`, the initial `weight` is multiplied by the env's step
duration (`env.dt`); a schedule's `final_value` is not. The step counter and the discounted sum
are rollout state, so a resumed run continues them (rsl_rl restarts both at zero).
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import optax
from flax import struct

from strl_jax.agents.parts import (
    EnvStep,
    InitContext,
    Part,
    PartBuild,
    StepContext,
    StepOutput,
    UpdateContext,
)
from strl_jax.collectives import pmean
from strl_jax.config_sections import FLAG, Nested, Rule, accept, choice, integer, key, number, read_section
from strl_jax.errors import ConfigError
from strl_jax.networks.mlp import ACTIVATIONS, MLP
from strl_jax.networks.normalizer import NormalizerState, init_normalizer, normalize, update_normalizer

NAME = "rnd"
OPTION = "algorithm.rnd_cfg"
REWARD_GAMMA = 0.99  # rsl_rl's _DiscountedAverage of the intrinsic reward (not PPO's gamma)
NORMALIZER_UNTIL = 1.0e8  # both rsl_rl RND normalisers freeze after this many samples
# the keys each `weight_schedule` mode takes besides `mode` (rsl_rl's weight_scheduler)
SCHEDULE_KEYS = {
    "constant": (),
    "step": ("final_step", "final_value"),
    "linear": ("initial_step", "final_step", "final_value"),
}


def _widths(value: Any) -> tuple[int, ...]:
    ok = isinstance(value, list | tuple) and value
    if not ok or any(isinstance(d, bool) or not isinstance(d, int) or (d < 1 and d != -1) for d in value):
        raise ValueError
    return tuple(value)


WIDTHS = Rule(_widths, "a non-empty list of positive widths (-1: the state size)")
ACTIVATION = accept(
    lambda v: isinstance(v, str) and v.lower() in ACTIVATIONS, f"one of {sorted(ACTIVATIONS)}"
)
OBS_GROUP = accept(lambda v: isinstance(v, str), "an observation group name")


@dataclasses.dataclass(frozen=True)
class WeightSchedule:
    """rsl_rl's `weight_schedule`: `constant`, `step` (to `final_value` at `final_step`) or
    `linear` (from the initial weight at `initial_step` to `final_value` at `final_step`); each
    mode takes its own keys (`SCHEDULE_KEYS`), all required, as in rsl_rl."""

    selector: ClassVar = ("mode", SCHEDULE_KEYS)
    mode: str = key(choice(list(SCHEDULE_KEYS)), "constant")
    initial_step: int = key(integer(), 0)
    final_step: int = key(integer(), 0)
    final_value: float = key(number(), 0.0)

    def check(self, where: str) -> None:
        if self.mode == "linear" and self.final_step <= self.initial_step:
            raise ConfigError(
                f"{where}: final_step ({self.final_step}) must be after initial_step ({self.initial_step})"
            )


@dataclasses.dataclass(frozen=True)
class RndSettings:
    """`algorithm.rnd_cfg`: rsl_rl's RND options and defaults (the first three are required, as
    in RandomNetworkDistillation), and the env group it reads (rsl_rl: `obs_groups["rnd_state"]`).
    Null `weight_schedule`: constant."""

    num_outputs: int = key(integer(1))
    predictor_hidden_dims: tuple[int, ...] = key(WIDTHS)
    target_hidden_dims: tuple[int, ...] = key(WIDTHS)
    weight: float = key(number(), 0.0)
    weight_schedule: WeightSchedule = key(
        Nested(WeightSchedule, WeightSchedule(), null_ok=True), WeightSchedule()
    )
    reward_normalization: bool = key(FLAG, False)
    state_normalization: bool = key(FLAG, False)
    learning_rate: float = key(number(above=0.0), 1e-3)
    activation: str = key(ACTIVATION, "elu")
    obs_group: str = key(OBS_GROUP, "policy")


def rnd_weight(initial: float, schedule: WeightSchedule, step: jax.Array) -> jax.Array:
    """rsl_rl's intrinsic-reward weight after `step` env steps (counted from 1)."""
    step = jnp.asarray(step, jnp.float32)
    if schedule.mode == "step":
        return jnp.where(step < schedule.final_step, initial, schedule.final_value).astype(jnp.float32)
    if schedule.mode == "linear":
        span = schedule.final_step - schedule.initial_step
        ramp = initial + (schedule.final_value - initial) * (step - schedule.initial_step) / span
        late = jnp.where(step > schedule.final_step, schedule.final_value, ramp)
        return jnp.where(step < schedule.initial_step, initial, late).astype(jnp.float32)
    return jnp.full(step.shape, initial, jnp.float32)


def normalize_intrinsic(
    stats: NormalizerState,
    discounted: jax.Array,
    reward: jax.Array,
    axis_name: str | None = None,
) -> tuple[jax.Array, NormalizerState, jax.Array]:
    """rsl_rl's EmpiricalDiscountedVariationNormalization in training mode: fold the discounted
    sums `gamma * discounted + reward` ([N]) into scalar statistics, then divide the rewards by
    their std (no eps; unchanged while the std is 0). Returns `(rewards, stats, discounted)`."""
    discounted = discounted * REWARD_GAMMA + reward
    stats = update_normalizer(stats, discounted, NORMALIZER_UNTIL, axis_name)
    std = jnp.sqrt(stats.var)
    return reward / jnp.where(std > 0, std, 1.0), stats, discounted


@struct.dataclass
class RndState:
    """Replicated RND train state: the frozen target, the predictor and its own Adam state, and
    the state normaliser."""

    target: Any
    predictor: Any
    opt_state: Any
    state_normalizer: NormalizerState


@struct.dataclass
class RndRollout:
    """Per-env acting state (rollout state is split over devices by env, so the replicated
    scalars are kept once per env, all equal)."""

    discounted: jax.Array  # [N] discounted sum of the raw intrinsic rewards
    reward_normalizer: NormalizerState  # scalar statistics, one copy per env: leaves [N]
    steps: jax.Array  # [N] int32 env steps taken (rsl_rl's update_counter)


def _per_env(stats: NormalizerState, num_envs: int) -> NormalizerState:
    return jax.tree.map(lambda x: jnp.broadcast_to(x, (num_envs,)), stats)


@dataclasses.dataclass(frozen=True, eq=False, kw_only=True)
class RndPart(Part):
    """RND's curiosity reward and predictor training (train state `RndState`, rollout state
    `RndRollout`)."""

    sections: ClassVar[dict[str, str]] = {
        "rnd": "Loss",
        "mean_step_intrinsic_reward": "Rnd",
        "mean_step_extrinsic_reward": "Rnd",
        "weight": "Rnd",
    }

    settings: RndSettings
    num_states: int
    initial_weight: float  # settings.weight * env dt
    steps_per_iteration: int

    @property
    def group(self) -> str:
        return self.settings.obs_group

    def network(self, hidden_dims: tuple[int, ...]) -> MLP:
        dims = tuple(self.num_states if d == -1 else d for d in hidden_dims)
        return MLP(
            hidden_dims=dims, output_dim=self.settings.num_outputs, activation=self.settings.activation
        )

    @property
    def predictor(self) -> MLP:
        return self.network(self.settings.predictor_hidden_dims)

    @property
    def target(self) -> MLP:
        return self.network(self.settings.target_hidden_dims)

    @property
    def optimizer(self) -> optax.GradientTransformation:
        """torch.optim.Adam(predictor, lr=learning_rate) with torch's defaults."""
        return optax.adam(self.settings.learning_rate)

    def init(self, key: jax.Array, ctx: InitContext) -> tuple[RndState, RndRollout]:
        target_key, predictor_key = jax.random.split(key)
        x = jnp.zeros((1, self.num_states), jnp.float32)
        predictor = self.predictor.init(predictor_key, x)
        train = RndState(
            target=self.target.init(target_key, x),
            predictor=predictor,
            opt_state=self.optimizer.init(predictor),
            state_normalizer=init_normalizer(self.num_states),
        )
        rollout = RndRollout(
            discounted=jnp.zeros((ctx.num_envs,), jnp.float32),
            reward_normalizer=_per_env(init_normalizer(()), ctx.num_envs),
            steps=jnp.zeros((ctx.num_envs,), jnp.int32),
        )
        return train, rollout

    # ---- the two networks ------------------------------------------------------------------
    def normalized_state(self, train: RndState, state: jax.Array) -> jax.Array:
        if not self.settings.state_normalization:
            return state
        return normalize(train.state_normalizer, state)

    def embedding_distance(self, train: RndState, state: jax.Array) -> jax.Array:
        """`||target(s) - predictor(s)||` per row of raw states `[..., D]`."""
        x = self.normalized_state(train, state)
        diff = self.target.apply(train.target, x) - self.predictor.apply(train.predictor, x)
        return jnp.linalg.norm(diff, axis=-1)

    def loss(self, predictor: Any, train: RndState, state: jax.Array) -> jax.Array:
        """rsl_rl's `compute_loss`: MSE between predicted and (frozen) target embeddings."""
        x = self.normalized_state(train, state.reshape(-1, state.shape[-1]))
        target = jax.lax.stop_gradient(self.target.apply(train.target, x))
        return jnp.mean(jnp.square(self.predictor.apply(predictor, x) - target))

    # ---- hooks -----------------------------------------------------------------------------
    def on_step(
        self, train: RndState, rollout: RndRollout, ctx: StepContext, env: EnvStep, reward, acted
    ) -> StepOutput:
        """Add `weight * intrinsic` of the observation after the step; store the one before it."""
        raw = self.embedding_distance(train, env.obs[self.group])
        discounted, stats = rollout.discounted, rollout.reward_normalizer
        if self.settings.reward_normalization:
            scalar_stats = jax.tree.map(lambda x: x[0], stats)
            raw, scalar_stats, discounted = normalize_intrinsic(scalar_stats, discounted, raw, ctx.axis_name)
            stats = _per_env(scalar_stats, raw.shape[0])
        steps = rollout.steps + 1
        intrinsic = rnd_weight(self.initial_weight, self.settings.weight_schedule, steps) * raw
        return StepOutput(
            reward=reward + intrinsic,
            rollout=RndRollout(discounted=discounted, reward_normalizer=stats, steps=steps),
            fields={"state": ctx.obs[self.group]},
            sums={
                "mean_step_intrinsic_reward": intrinsic.sum(),
                "mean_step_extrinsic_reward": env.reward.sum(),
            },
        )

    def minibatch_update(self, train: RndState, batch: Any, ctx: UpdateContext) -> tuple[RndState, dict]:
        """One step of the predictor's own Adam on this minibatch's states (gradients averaged
        over devices, as rsl_rl's multi-GPU reduction does)."""
        state = batch.parts[self.name]["state"]
        loss, grads = jax.value_and_grad(self.loss)(train.predictor, train, state)
        loss, grads = pmean((loss, grads), ctx.axis_name)
        updates, opt_state = self.optimizer.update(grads, train.opt_state, train.predictor)
        predictor = optax.apply_updates(train.predictor, updates)
        return train.replace(predictor=predictor, opt_state=opt_state), {"rnd": loss}

    def after_update(self, train: RndState, fields: dict, ctx: UpdateContext) -> RndState:
        """The state normaliser takes the rollout's observations, after the predictor's steps."""
        if not self.settings.state_normalization:
            return train
        state = fields["state"]
        normalizer = update_normalizer(
            train.state_normalizer, state.reshape(-1, state.shape[-1]), NORMALIZER_UNTIL, ctx.axis_name
        )
        return train.replace(state_normalizer=normalizer)

    def iteration_metrics(self, train: RndState, sums: dict, num_samples: jax.Array, iteration: jax.Array):
        """Per-step means of the weighted intrinsic and the env's reward, and the weight of the
        iteration's last step (rsl_rl's `Rnd/weight`)."""
        last_step = (iteration + 1) * self.steps_per_iteration
        weight = rnd_weight(self.initial_weight, self.settings.weight_schedule, last_step)
        return {**{k: v / num_samples for k, v in sums.items()}, "weight": weight}


def make_rnd_part(name: str, env: Any, cfg: Any) -> RndPart:
    """The RND part for `env`: its observation group must exist and be one vector per env."""
    settings = read_section(RndSettings, cfg.algorithm.rnd_cfg, OPTION)
    shapes = env.observation_shapes()
    if settings.obs_group not in shapes:
        raise ConfigError(
            f"{OPTION}.obs_group {settings.obs_group!r} is not an observation group of the env; "
            f"valid choices: {sorted(shapes)}"
        )
    shape = tuple(shapes[settings.obs_group])
    if len(shape) != 1:
        raise ConfigError(
            f"{OPTION}.obs_group {settings.obs_group!r} has shape {shape}; RND reads 1-D observations"
        )
    return RndPart(
        name=name,
        settings=settings,
        num_states=int(shape[0]),
        initial_weight=settings.weight * float(env.dt),
        steps_per_iteration=cfg.runner.num_steps_per_env,
    )


def build_rnd(b: PartBuild) -> RndPart:
    """rsl_rl's Random Network Distillation on `algorithm.rnd_cfg.obs_group`."""
    return make_rnd_part(b.name, b.env, b.cfg)
