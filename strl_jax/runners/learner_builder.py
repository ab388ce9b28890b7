"""Assemble the learner of a config: its update rule and its parts, from `agents.algorithms`.

Each part is built by its `PARTS` row's builder, which reads files (a teacher's checkpoint,
motion files) and checks them against the env here, before anything is compiled; this module
supplies what only a layer above the agents can (loading a trained policy).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import jax

from strl_jax.agents.algorithms import PARTS, AlgorithmSpec, active_parts, algorithm_spec, part_build
from strl_jax.agents.lr_schedulers import make_lr_scheduler
from strl_jax.agents.ppo import POLICY, make_optimizer
from strl_jax.configs.schema import TrainConfig
from strl_jax.envs.vec_env import VecEnv
from strl_jax.networks.acting import make_actor
from strl_jax.networks.policy import PolicyModel, make_policy_model
from strl_jax.runners.teachers import load_teacher
from strl_jax.train_loops.learner import Learner
from strl_jax.train_loops.update_rules import BehaviorCloningUpdate, PPOUpdate


def make_update_rule(cfg: TrainConfig, spec: AlgorithmSpec) -> PPOUpdate | BehaviorCloningUpdate:
    alg = cfg.algorithm
    if spec.update == "ppo":
        return PPOUpdate(ppo_terms=alg.using_ppo if "teacher" in spec.parts else True)
    total = alg.num_learning_epochs * cfg.runner.num_steps_per_env
    if total % alg.gradient_length:
        warnings.warn(
            f"num_learning_epochs * num_steps_per_env = {total} is not divisible by gradient_length "
            f"({alg.gradient_length}): the last {total % alg.gradient_length} steps of each update are "
            "evaluated but never backpropagated (as in rsl_rl)",
            stacklevel=3,
        )
    return BehaviorCloningUpdate(
        labels_from="teacher", loss_type=alg.loss_type, gradient_length=alg.gradient_length
    )


def clip_groups(model: PolicyModel) -> Callable[[dict], dict]:
    """`algorithm.clip_grad_per_network`: the clip group of every trained leaf, the policy's
    `actor` or `critic` (`PolicyModel.network_labels`) or the name of the part that owns it."""

    def labels(trainable: dict) -> dict:
        return {
            name: model.network_labels(tree) if name == POLICY else jax.tree.map(lambda _, n=name: n, tree)
            for name, tree in trainable.items()
        }

    return labels


def make_learner(env: VecEnv, cfg: TrainConfig) -> Learner:
    """The learner for `algorithm.class_name`: its update rule and its parts, built and checked
    against `env`."""
    spec = algorithm_spec(cfg.algorithm.class_name)
    alg = cfg.algorithm
    model = make_policy_model(env.action_size, cfg.policy, env.components, env.component_shapes)
    # rsl_rl Distillation clips gradients only when `max_grad_norm` is set and non-zero.
    max_grad_norm = alg.max_grad_norm if spec.update == "ppo" else (alg.max_grad_norm or None)
    groups = clip_groups(model) if alg.clip_grad_per_network else None
    return Learner(
        env=env,
        model=model,
        actor=make_actor(model, cfg),
        cfg=cfg,
        optimizer=make_optimizer(alg.optimizer, max_grad_norm, groups),
        update_rule=make_update_rule(cfg, spec),
        parts=tuple(
            PARTS[name].build(part_build(cfg, env, name, load_teacher)) for name in active_parts(cfg)
        ),
        lr_scheduler=None
        if alg.lr_scheduler_class_name is None
        else make_lr_scheduler(alg.lr_scheduler_class_name, alg.lr_scheduler, alg.learning_rate),
    )
