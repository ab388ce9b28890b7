"""rsl_rl `Distillation` as a learner: PPO's rollout (student acts, teacher labels), BPTT update.

The student is the configured `policy` (its critic exists but is never trained), so checkpoints,
evaluation, export and `play` treat a distilled student like any other policy.
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import optax
from flax import struct

from strl_jax.agents.distillation import DistillationBatch, bptt_update, step_order
from strl_jax.agents.ppo import make_optimizer
from strl_jax.agents.tppo import TeacherGuidance
from strl_jax.collectives import pmean
from strl_jax.configs.schema import TrainConfig
from strl_jax.envs.brax_env import BraxVecEnv
from strl_jax.networks.normalizer import update_normalizer
from strl_jax.networks.policy import reset_hidden_groups
from strl_jax.train_loops.iteration import (
    PPOLearner,
    make_ppo_learner,
    normalize_groups,
    split_teacher_stats,
)
from strl_jax.train_loops.state import RolloutState, TrainState


@struct.dataclass
class DistillationLearner:
    """Behaviour cloning of `base.guidance.teacher` with rsl_rl's update semantics."""

    base: PPOLearner = struct.field(pytree_node=False)  # acting, normalisers and evaluation

    @property
    def env(self) -> BraxVecEnv:
        return self.base.env

    @property
    def model(self):
        return self.base.model

    @property
    def cfg(self) -> TrainConfig:
        return self.base.cfg

    @property
    def optimizer(self) -> optax.GradientTransformation:
        return self.base.optimizer

    @property
    def guidance(self) -> TeacherGuidance:
        return self.base.guidance

    @property
    def axis_name(self) -> str | None:
        return self.base.axis_name

    def shard(self, env: BraxVecEnv, axis_name: str | None) -> DistillationLearner:
        """This learner for one device's share `env` of the envs, reducing over `axis_name`."""
        return self.replace(base=self.base.shard(env, axis_name))

    def init(self, key: jax.Array) -> tuple[TrainState, RolloutState]:
        return self.base.init(key)

    def evaluate(self, eval_env: BraxVecEnv, params, normalizers, key: jax.Array):
        return self.base.evaluate(eval_env, params, normalizers, key)

    def evaluate_teacher(self, eval_env: BraxVecEnv, teacher_state, key: jax.Array):
        return self.base.evaluate_teacher(eval_env, teacher_state, key)

    def update(self, train_state: TrainState, transitions) -> tuple:
        """rsl_rl's update: epochs over the rollout in time order, a step every `gradient_length`."""
        alg = self.cfg.algorithm
        batch = DistillationBatch(
            obs=normalize_groups(train_state.normalizers, transitions.obs, self.base.normalize_obs),
            labels=transitions.action_labels,
            dones=transitions.dones,
            hidden0=transitions.initial_hidden if self.model.recurrent else {},
        )
        windows, rest = step_order(transitions.dones.shape[0], alg.num_learning_epochs, alg.gradient_length)

        def act(params, obs_t, hidden):
            mean, _, hidden = self.model.distribution(params, obs_t, hidden)
            return mean, hidden

        return bptt_update(
            act,
            reset_hidden_groups,
            self.optimizer,
            alg.loss_type,
            train_state.params,
            train_state.opt_state,
            train_state.learning_rate,
            batch,
            windows,
            rest,
            self.axis_name,
        )

    def iteration(self, train_state: TrainState, rollout_state: RolloutState):
        """Collect with the student, clone the teacher's labels, then update the normalisers."""
        key, rollout_key = jax.random.split(train_state.key)
        rollout_state, transitions, stats = self.base.rollout(train_state, rollout_state, rollout_key)
        params, opt_state, losses = self.update(train_state, transitions)
        normalizers = train_state.normalizers
        if self.base.normalize_obs:
            until = self.cfg.runner.normalizer_until
            normalizers = {
                k: update_normalizer(normalizers[k], transitions.obs[k], until, self.axis_name)
                for k in normalizers
            }
        new_train_state = train_state.replace(
            params=params,
            opt_state=opt_state,
            normalizers=normalizers,
            key=key,
            iteration=train_state.iteration + 1,
        )
        stats, teacher = split_teacher_stats(stats, self.base.num_samples(transitions))
        metrics = {
            **stats,
            "distillation": jnp.mean(losses),
            "action_error": teacher["action_error"],
            "learning_rate": train_state.learning_rate,
            "mean_noise_std": pmean(jnp.mean(transitions.std[-1]), self.axis_name),
        }
        return new_train_state, rollout_state, metrics


def make_distillation_learner(
    env: BraxVecEnv, cfg: TrainConfig, guidance: TeacherGuidance
) -> DistillationLearner:
    """rsl_rl clips gradients only when `max_grad_norm` is set (and non-zero)."""
    alg = cfg.algorithm
    total = alg.num_learning_epochs * cfg.runner.num_steps_per_env
    if total % alg.gradient_length:
        warnings.warn(
            f"num_learning_epochs * num_steps_per_env = {total} is not divisible by gradient_length "
            f"({alg.gradient_length}): the last {total % alg.gradient_length} steps of each update are "
            "evaluated but never backpropagated (as in rsl_rl)",
            stacklevel=2,
        )
    base = make_ppo_learner(env, cfg).replace(
        optimizer=make_optimizer(alg.optimizer, alg.max_grad_norm or None), guidance=guidance
    )
    return DistillationLearner(base=base)
