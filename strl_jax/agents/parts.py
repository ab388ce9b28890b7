"""The part protocol: what an algorithm adds to the learner's core, as static data and pure hooks.

st_rl builds algorithms from mixins (`TPPO = teacher + PPO`, `APPO = AMP + PPO`, ...). Here an
algorithm is a row of `agents.algorithms.ALGORITHMS`: the core update and a tuple of parts. The
learner calls every hook of every part in order and never names a part; a part's train state and
rollout state live under its `name` in the state containers, its parameters (if `trainable`
returns any) are optimised with the policy's under the same name, and the metric names it returns
are the names that are logged.

Every hook has a do-nothing default, so a part writes only the hooks it needs:
- `init(key, ctx) -> (train, rollout)`: its slices of the two state pytrees (None: nothing); the
  key is split off the run's unless `draws_at_init` is off.
- `act(...)`: choose the executed action (TPPO's teacher), drawing `step_keys` per-env keys.
- `on_step(...)`: shape the reward (AMP's style reward), store per-step `fields` for the update,
  advance its rollout state and add to its rollout `sums` (divided by the samples at the end).
- `on_replayed_step(labels)`: the fields it stores for a step replayed from a dataset (a rollout
  source other than the envs: no env stepped, nothing acted).
- `before_update`, `minibatch_inputs`, `losses -> (losses, coefs, metrics)`, `after_update`.
- `minibatch_update`: a part's own optimiser step on each minibatch (RND's predictor).
- `augment`: the minibatch the loss sees (rsl_rl's symmetry augmentation): copies appended after
  the original columns; the core's entropy and KL read only the originals.
- `iteration_metrics`: scalars from the rollout sums and the train state.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar

import jax
import jax.numpy as jnp


@dataclasses.dataclass(frozen=True)
class PartBuild:
    """What a part's builder (`agents.algorithms.PartSpec.build`) reads, before anything compiles.

    `settings`: the part's own section, typed and checked by its `PartSpec.settings`.
    `policy_shapes`: the observation groups the policy reads (parts' own groups left out).
    `load_policy(cfg, observation shapes, action size)`: a trained policy, frozen and checked
    against the env (the run `algorithm.teacher_policy` names); it reads a checkpoint, which only
    the learner's builder (above the inference layer) can do.
    """

    name: str
    env: Any  # envs.vec_env.VecEnv
    cfg: Any  # configs.schema.TrainConfig
    algorithm: Any  # agents.algorithms.AlgorithmSpec: the update rule and parts of algorithm.class_name
    settings: Any
    policy_shapes: dict[str, tuple[int, ...]]
    load_policy: Callable[..., Any] | None = None


@dataclasses.dataclass(frozen=True)
class InitContext:
    """What a part may read when it builds its state (this device's share of the envs)."""

    num_envs: int
    env_ids: jax.Array  # [N] global indices of this device's envs
    obs_shapes: dict[str, tuple[int, ...]]
    action_size: int


@dataclasses.dataclass(frozen=True)
class StepContext:
    """What a part may read during one rollout step (before its hooks change anything)."""

    obs: dict  # raw observation groups the policy acted on
    mean: jax.Array  # [N, A] the policy's action mean
    std: jax.Array  # [N, A]
    step_key: jax.Array  # this step's key (shared by all envs; fold in env ids for per-env draws)
    env_ids: jax.Array  # [N] global env indices
    iteration: jax.Array  # completed iterations before this one
    estimates: dict = dataclasses.field(default_factory=dict)  # the policy's stages', env units
    axis_name: str | None = None  # reduce over devices with this axis (None: one device)


@dataclasses.dataclass(frozen=True)
class EnvStep:
    """The env's answer to the executed actions (`obs` already reset where an episode ended)."""

    obs: dict
    final_obs: dict  # the pre-reset observation of finished episodes, `obs` elsewhere
    reward: jax.Array  # [N] the env's reward, unscaled
    done: jax.Array  # [N] bool: terminated or truncated
    terminated: jax.Array | None = None  # [N] bool: ended by the task (a fall), not by the time limit


@dataclasses.dataclass(frozen=True)
class StepOutput:
    """A part's contribution to one rollout step."""

    reward: jax.Array  # the learning reward after this part (pass the input through if unchanged)
    rollout: Any = None  # the part's rollout state after the step
    fields: dict = dataclasses.field(default_factory=dict)  # per-step arrays [N, ...] for the update
    sums: dict = dataclasses.field(default_factory=dict)  # scalars summed over steps and devices


@dataclasses.dataclass(frozen=True)
class UpdateContext:
    """Static facts about the update a part's hooks run in."""

    axis_name: str | None  # reduce over devices with this axis (None: one device)
    num_envs: int  # this device's envs
    env_ids: jax.Array
    recurrent: bool  # minibatch columns are whole envs ([T, B]) instead of samples ([1, B])
    steps: int  # rollout steps per env


@dataclasses.dataclass(frozen=True)
class LossContext:
    """One minibatch and the policy's outputs on it, for a part's loss terms."""

    batch: Any  # agents.ppo.PPOBatch: core fields and `parts[name]` step fields, [T, B, ...]
    mean: jax.Array  # [T, B, A] the policy being optimised
    std: jax.Array
    values: jax.Array  # [T, B]
    iteration: jax.Array
    estimates: dict = dataclasses.field(default_factory=dict)  # the stages' outputs, [T, B, k]
    originals: int = 0  # columns before any `augment` appended copies (the rest are copies)
    # the mean action of the policy being optimised on other normalised observations ([1, B])
    policy_mean: Callable[[dict], jax.Array] | None = None
    # raw observation groups -> as the policy's networks see them (the run's normalisers)
    normalize: Callable[[dict], dict] | None = None
    # the state value of the critic being optimised on other normalised observations (feed-forward)
    critic_value: Callable[[dict], jax.Array] | None = None


@dataclasses.dataclass(frozen=True)
class AugmentContext:
    """What `augment` may read: the batch's observations are normalised by these (a group without
    one is raw)."""

    normalizers: dict


Losses = tuple[dict[str, jax.Array], dict[str, Any], dict[str, jax.Array]]


def sample_keys(key: jax.Array, idx: jax.Array, ctx: UpdateContext) -> tuple[jax.Array, jax.Array]:
    """Per sample of the minibatch `idx`, a key from (global env, step) folded into `key`, so
    that what a part draws for a sample does not depend on the device count: `(keys [T' * B'],
    the samples' local env indices [T', B'])`, `[T', B']` the minibatch's shape."""
    if ctx.recurrent:  # idx: envs; every step of each
        env = jnp.broadcast_to(idx[None, :], (ctx.steps, idx.shape[0]))
        step = jnp.broadcast_to(jnp.arange(ctx.steps)[:, None], env.shape)
    else:  # idx: time-major columns t * N + n
        env, step = (idx % ctx.num_envs)[None, :], (idx // ctx.num_envs)[None, :]
    global_env = ctx.env_ids[0] + env
    keys = jax.vmap(lambda e, t: jax.random.fold_in(jax.random.fold_in(key, e), t))(
        global_env.reshape(-1), step.reshape(-1)
    )
    return keys, env


@dataclasses.dataclass(frozen=True, eq=False)
class Part:
    """A part with no effect; subclasses override the hooks they need (see the module docstring)."""

    name: str
    step_keys: ClassVar[int] = 0  # per-env keys `act` receives each step
    obs_groups: ClassVar[tuple[str, ...]] = ()  # env observation groups only this part reads
    # TensorBoard section of each metric name the part logs (others go under "Train").
    sections: ClassVar[dict[str, str]] = {}
    # `init` receives a key split off the run's key; a part that draws nothing there may set
    # False and leave the run's key (and so every number of a run without it) as it is
    draws_at_init: ClassVar[bool] = True

    def init(self, key: jax.Array, ctx: InitContext) -> tuple[Any, Any]:
        return None, None

    def trainable(self, train: Any) -> Any:
        """Parameters the learner's optimiser updates with the policy's (None: none)."""
        return None

    def with_trainable(self, train: Any, params: Any) -> Any:
        return train

    def act(self, train: Any, rollout: Any, ctx: StepContext, actions: jax.Array, keys: Any):
        """`(executed actions, anything for on_step)`; `keys` are `[N, step_keys]` per-env keys."""
        return actions, None

    def on_step(
        self, train: Any, rollout: Any, ctx: StepContext, env: EnvStep, reward: jax.Array, acted: Any
    ) -> StepOutput:
        return StepOutput(reward=reward, rollout=rollout)

    def on_replayed_step(self, labels: jax.Array) -> dict:
        """Per-step arrays `[N, ...]` stored for a step replayed from a dataset (`labels`: its
        imitation targets `[N, A]`); by default none."""
        return {}

    def before_update(self, train: Any, rollout: Any, fields: dict, ctx: UpdateContext) -> Any:
        """The rollout state once the rollout is complete (`fields`: its stored `[T, N, ...]`)."""
        return rollout

    def minibatch_inputs(
        self, train: Any, rollout: Any, idx: jax.Array, key: jax.Array, ctx: UpdateContext
    ) -> Any:
        """Data for one minibatch's loss drawn outside the gradient (e.g. replay samples)."""
        return None

    def augment(self, train: Any, batch: Any, ctx: AugmentContext) -> Any:
        """The minibatch (`agents.ppo.PPOBatch`) the loss sees: new columns go after the originals."""
        return batch

    def losses(self, params: Any, train: Any, ctx: LossContext, inputs: Any) -> Losses:
        """`(losses, coefficients, metrics)` added to the core's; coefficients may be arrays."""
        return {}, {}, {}

    def minibatch_update(self, train: Any, batch: Any, ctx: UpdateContext) -> tuple[Any, dict]:
        """For a part with its own optimiser (RND's predictor): one step on the minibatch `batch`
        (before any `augment`), beside the policy's; `(train state, metrics)`, the metrics
        averaged over the update and checked for finiteness like loss terms."""
        return train, {}

    def after_update(self, train: Any, fields: dict, ctx: UpdateContext) -> Any:
        """The train state after the optimiser steps (normalisers, statistics)."""
        return train

    def iteration_metrics(self, train: Any, sums: dict, num_samples: jax.Array, iteration: jax.Array):
        """Scalars logged once per iteration (by default the rollout sums per sample)."""
        return {name: value / num_samples for name, value in sums.items()}
