"""The update rules a learner runs after each rollout, as objects with their own `update`.

`PPOUpdate`: GAE, then `num_learning_epochs` x `num_mini_batches` steps of `agents.ppo.ppo_loss`
with the adaptive lr (the learner's minibatch loop, `Learner.ppo_update`). `BehaviorCloningUpdate`:
rsl_rl Distillation's truncated BPTT towards stored labels (`Learner.cloning_update`). The learner
calls `update` and `optimizer_steps` of whichever rule it holds and never asks which one it is.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

import jax

from strl_jax.buffers.transitions import Transition
from strl_jax.configs.schema import TrainConfig
from strl_jax.train_loops.state import RolloutState, TrainState

# `(trainable, opt_state, learning rate, metrics, finiteness checks, parts' train states)`
UpdateOutput = tuple[dict, Any, jax.Array, dict, dict, dict]


class UpdateRule(Protocol):
    """What the learner asks of an update rule."""

    splits_key: bool  # the update draws from its own key (one more split of the run key)

    def update(
        self,
        learner: Any,
        train_state: TrainState,
        rollout_state: RolloutState,
        transitions: Transition,
        bootstrap: tuple[dict, Any],
        key: jax.Array | None,
        adapt: bool = True,
    ) -> tuple[UpdateOutput, RolloutState]:
        """The update on one rollout; `bootstrap`: the observation and memory after it.
        `adapt=False`: the steps take the train state's rate as it is (a fixed rate)."""
        ...

    def optimizer_steps(self, cfg: TrainConfig) -> int:
        """Optimiser steps per update (the step index the parameter checks report)."""
        ...


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
        output, history = learner.ppo_update(
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
        return learner.cloning_update(train_state, transitions), rollout_state

    def optimizer_steps(self, cfg: TrainConfig) -> int:
        return cfg.algorithm.num_learning_epochs * cfg.runner.num_steps_per_env // self.gradient_length
