"""The update rules a learner runs after each rollout, as objects with their own `update`.

`PPOUpdate`: GAE, then `num_learning_epochs` x `num_mini_batches` steps of `agents.ppo.ppo_loss`
with the adaptive lr (`train_loops.ppo_update`). `BehaviorCloningUpdate`: rsl_rl Distillation's
truncated BPTT towards stored labels (`agents.distillation.bptt_update`), with the other parts'
terms on each step. The learner calls
`update` and `optimizer_steps` of whichever rule it holds (`run_spec.UpdateRule`) and never asks
which one it is.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
from flax import struct

from strl_jax.agents.distillation import DistillationBatch, bptt_update, step_order
from strl_jax.agents.parts import LossContext
from strl_jax.agents.ppo import POLICY
from strl_jax.buffers.transitions import Transition
from strl_jax.configs.schema import TrainConfig
from strl_jax.networks.actor_critic import clamp_std, std_floor
from strl_jax.networks.policy import reset_hidden_groups
from strl_jax.train_loops.finiteness import NEVER, check_name, first_failure
from strl_jax.train_loops.ppo_update import ppo_update
from strl_jax.train_loops.run_spec import RunSpec, UpdateOutput
from strl_jax.train_loops.state import TrainState


@dataclasses.dataclass(frozen=True)
class PPOUpdate:
    """GAE, then `num_learning_epochs` x `num_mini_batches` clipped steps with the adaptive lr.

    `ppo_terms=False` (TPPO's `using_ppo: false`, DAgger) keeps only the parts' loss terms.
    """

    ppo_terms: bool = True
    splits_key: bool = True  # the update draws minibatch orders

    def update(self, learner, train_state, rollout_state, transitions, bootstrap, key, adapt=True):
        last_obs, last_hidden = bootstrap
        last_values = learner.critic_value(train_state.params, train_state.normalizers, last_obs, last_hidden)
        output, history = ppo_update(
            learner,
            train_state,
            rollout_state.parts,
            transitions,
            last_values,
            key,
            rollout_state.history,
            bootstrap_obs=last_obs,
            adapt=adapt,
        )
        return output, rollout_state.replace(history=history)

    def optimizer_steps(self, cfg: TrainConfig) -> int:
        return cfg.algorithm.num_learning_epochs * cfg.algorithm.num_mini_batches


@dataclasses.dataclass(frozen=True)
class BehaviorCloningUpdate:
    """rsl_rl Distillation: epochs over the rollout in time order, a step every `gradient_length`
    steps, towards the `action_labels` that the part `labels_from` stores."""

    labels_from: str
    loss_type: str
    gradient_length: int
    splits_key: bool = False

    def update(self, learner, train_state, rollout_state, transitions, bootstrap, key, adapt=True):
        del bootstrap, key, adapt  # no returns to bootstrap, nothing drawn, a rate it never adapts
        return cloning_update(learner, train_state, transitions), rollout_state

    def optimizer_steps(self, cfg: TrainConfig) -> int:
        return cfg.algorithm.num_learning_epochs * cfg.runner.num_steps_per_env // self.gradient_length


@struct.dataclass
class StepBatch:
    """One rollout step as the other parts' loss terms read it in the cloning update (a part
    that needs PPO's fields, such as returns, has no place in it)."""

    obs: dict  # normalised observation groups, [N, ...]


def cloning_update(learner: RunSpec, train_state: TrainState, transitions: Transition) -> UpdateOutput:
    """rsl_rl's Distillation update; every step also carries the loss terms of the run's parts
    other than the one whose labels it clones (EstimatorDistillation: the estimator's)."""
    rule = learner.update_rule
    alg = learner.cfg.algorithm
    batch = DistillationBatch(
        obs=learner.normalization.groups(train_state.normalizers, transitions.obs),
        labels=transitions.parts[rule.labels_from]["action_labels"],
        dones=transitions.dones,
        hidden0=transitions.initial_hidden if learner.model.recurrent else {},
        draws=transitions.draws,
    )
    windows, rest = step_order(transitions.dones.shape[0], alg.num_learning_epochs, rule.gradient_length)
    units = learner.model.units(learner.normalization.statistics(train_state.normalizers))
    others = tuple(p for p in learner.parts if p.name != rule.labels_from)

    def act(trainable, obs_t, draws_t, hidden):
        mean, std, hidden, estimates = learner.model.forward(trainable[POLICY], obs_t, hidden, draws_t, units)
        ctx = LossContext(
            batch=StepBatch(obs=obs_t),
            mean=mean,
            std=std,
            values=None,
            iteration=train_state.iteration,
            estimates=estimates,
        )
        terms = {}, {}, {}
        for p in others:
            found = p.losses(trainable.get(p.name), train_state.parts[p.name], ctx, None)
            terms = tuple(a | b for a, b in zip(terms, found, strict=True))
        return mean, hidden, terms

    trainable, opt_state, losses, metrics = bptt_update(
        act,
        reset_hidden_groups,
        learner.optimizer,
        rule.loss_type,
        learner.trainable(train_state.params, train_state.parts),
        train_state.opt_state,
        train_state.learning_rate,
        batch,
        windows,
        rest,
        learner.axis_name,
    )
    floor = std_floor(alg.clip_min_std, alg.clip_min_std_schedule, train_state.iteration)
    policy = clamp_std(trainable[POLICY], learner.model.noise_std_type, floor)
    checks = {}
    for name, values in {"behavior_loss": losses, **metrics}.items():
        step = first_failure(jnp.isfinite(values))  # values are per rollout step; report the window
        window = jnp.where(step == NEVER, NEVER, step // rule.gradient_length)
        checks[check_name(1, f"loss term {name}")] = window
    return UpdateOutput(
        trainable={**trainable, POLICY: policy},
        opt_state=opt_state,
        learning_rate=train_state.learning_rate,
        metrics={"distillation": jnp.mean(losses)} | {k: jnp.mean(v) for k, v in metrics.items()},
        checks=checks,
        parts=train_state.parts,
    )
