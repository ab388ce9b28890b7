"""The demonstrations' pull carried past two-stage training's switch to RL, as a learner part.

Pretraining (`runner.pretrain_iterations`) fits the policy to a dataset, but the first RL updates
can undo it: on hopper and walker2d the pretrained policy lost its head start within ten PPO
iterations, whatever the learning rate, entropy bonus or initial std. DAPG (Rajeswaran et al.,
"Learning Complex Dexterous Manipulation with Deep Reinforcement Learning and Demonstrations",
RSS 2018, https://arxiv.org/abs/1709.10087) keeps a demonstration term in the RL objective with a
weight that decays as RL takes over; this part does that with the pretraining's own imitation
term. Each minibatch sample draws one dataset step (keyed by its global env and step, so the draws
do not depend on the device count), and the loss adds `rl_imitation_coef * (1 - k / K)` times
the distance (`algorithm.distill_target`) between the policy's action mean on the drawn
observations and the dataset's actions, `k` the RL iterations done, `K` `rl_imitation_iterations`;
0 during pretraining (whose loss holds the term already) and after `K`.

The dataset's observation groups and actions are device arrays compiled into the update as
constants, like AMP's motion library.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import jax
import jax.numpy as jnp

from strl_jax.agents.parts import LossContext, Part, PartBuild, UpdateContext, sample_keys
from strl_jax.agents.tppo import distillation_loss
from strl_jax.buffers.rollout_dataset import load_dataset_arrays, pretrain_settings


@dataclasses.dataclass(frozen=True, eq=False)
class DemonstrationPart(Part):
    """The decaying imitation term of the RL iterations after pretraining (no state)."""

    sections: ClassVar[dict[str, str]] = {"rl_imitation": "Loss", "rl_imitation_weight": "Loss"}

    obs: dict  # observation group -> [S, ...], the dataset's raw observations
    actions: jax.Array  # [S, A]
    coef: float  # the weight at the first RL iteration
    iterations: int  # RL iterations over which the weight falls to 0
    first_rl_iteration: int  # runner.pretrain_iterations
    target: str  # algorithm.distill_target

    def weight(self, iteration: jax.Array) -> jax.Array:
        """`coef * (1 - k / K)` for the `k`-th RL iteration (`k < K`), else 0."""
        k = (jnp.asarray(iteration) - self.first_rl_iteration).astype(jnp.float32)
        decay = jnp.clip(1.0 - k / self.iterations, 0.0, 1.0)
        return jnp.where(k >= 0, self.coef * decay, 0.0)

    def minibatch_inputs(self, train: Any, rollout: Any, idx: jax.Array, key: jax.Array, ctx: UpdateContext):
        """One dataset step per minibatch sample: `(raw observation groups, actions)`, `[T', B', ...]`."""
        keys, env = sample_keys(key, idx, ctx)
        steps = jax.vmap(lambda k: jax.random.randint(k, (), 0, self.actions.shape[0]))(keys)
        take = lambda x: x[steps].reshape(env.shape + x.shape[1:])  # noqa: E731
        return {k: take(v) for k, v in self.obs.items()}, take(self.actions)

    def losses(self, params: Any, train: Any, ctx: LossContext, inputs: Any):
        obs, labels = inputs
        mean = ctx.policy_mean(ctx.normalize(obs))
        # the policy's std does not depend on the observation (scalar or log std parameters)
        std = jnp.broadcast_to(ctx.std[:, :1], mean.shape)
        distance = distillation_loss(self.target, mean, std, labels)
        weight = self.weight(ctx.iteration)
        return (
            {"rl_imitation_loss": distance},
            {"rl_imitation_loss": weight},
            {
                "rl_imitation": distance,
                "rl_imitation_weight": weight,
            },
        )


def rl_imitation_active(cfg: Any) -> bool:
    """Whether a run carries the pretraining's imitation term into its RL iterations."""
    runner = cfg.runner
    return (
        runner.pretrain_iterations > 0 and pretrain_settings(runner.pretrain_dataset)["rl_imitation_coef"] > 0
    )


def make_demonstration_part(name: str, env: Any, cfg: Any, groups: dict) -> DemonstrationPart:
    """The part for `runner.pretrain_dataset`'s `rl_imitation_*` settings, its dataset read for
    the policy's observation `groups` (`{group: shape}`)."""
    settings = pretrain_settings(cfg.runner.pretrain_dataset)
    arrays = load_dataset_arrays(settings, groups, env.action_size, cfg.seed)
    return DemonstrationPart(
        name=name,
        obs={k: jnp.asarray(v) for k, v in arrays.obs.items()},
        actions=jnp.asarray(arrays.actions),
        coef=float(settings["rl_imitation_coef"]),
        iterations=int(settings["rl_imitation_iterations"]),
        first_rl_iteration=cfg.runner.pretrain_iterations,
        target=cfg.algorithm.distill_target,
    )


def build_demonstrations(b: PartBuild) -> DemonstrationPart:
    """The pretraining dataset's decaying pull in the RL iterations, read for the policy's groups."""
    return make_demonstration_part(b.name, b.env, b.cfg, b.policy_shapes)
