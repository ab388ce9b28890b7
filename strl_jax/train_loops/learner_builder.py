"""Assemble the learner of a config: its update rule and its parts, from `agents.algorithms`.

This is the one module that knows how each part is built from a config (loading a teacher's
checkpoint, reading motion files); everything is checked against the env here, before anything
is compiled. Adding a part means adding its builder to `PART_BUILDERS`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import jax
import numpy as np

from strl_jax.agents.algorithms import AlgorithmSpec, active_parts, algorithm_spec, env_groups
from strl_jax.agents.coefficient_schedules import make_schedule
from strl_jax.agents.demonstrations import make_demonstration_part
from strl_jax.agents.estimator import EstimatorPart
from strl_jax.agents.lr_schedulers import make_lr_scheduler
from strl_jax.agents.motion_prior import make_motion_prior
from strl_jax.agents.parts import Part
from strl_jax.agents.ppo import make_optimizer
from strl_jax.agents.rnd import make_rnd_part
from strl_jax.agents.symmetry import make_symmetry_part
from strl_jax.agents.tppo import TeacherPart
from strl_jax.configs.schema import TrainConfig
from strl_jax.envs.vec_env import VecEnv
from strl_jax.errors import ConfigError
from strl_jax.networks.acting import make_actor
from strl_jax.networks.latents import latent_source
from strl_jax.networks.policy import PolicyModel, make_policy_model
from strl_jax.train_loops.learner import POLICY, Learner
from strl_jax.train_loops.teachers import load_teacher
from strl_jax.train_loops.update_rules import BehaviorCloningUpdate, PPOUpdate


def teacher_part(env: VecEnv, cfg: TrainConfig, spec: AlgorithmSpec) -> TeacherPart:
    """TPPO's teacher (acts with `teacher_act_prob`, adds `distillation_loss`), or for the
    behaviour-cloning update a teacher that only labels."""
    alg = cfg.algorithm
    teacher = load_teacher(cfg, env.observation_shapes(), env.action_size)
    if spec.update == "behavior_cloning":
        return TeacherPart(name="teacher", teacher=teacher, act_prob=make_schedule(0.0, 1.0), acts=False)
    return TeacherPart(
        name="teacher",
        teacher=teacher,
        act_prob=make_schedule(alg.teacher_act_prob, alg.update_times_scale),
        loss_coef=make_schedule(alg.distillation_loss_coef, alg.update_times_scale),
        target=alg.distill_target,
        latents=latent_pairs(env, cfg, teacher),
        latent_coef=alg.distill_latent_coef,
        latent_target=alg.distill_latent_target,
    )


def latent_pairs(env: VecEnv, cfg: TrainConfig, teacher) -> tuple:
    """`distill_latent_obs_component_mapping` resolved: (student latent, teacher latent) pairs of
    equal sizes (st_rl: `{student component: teacher component}`)."""
    mapping = cfg.algorithm.distill_latent_obs_component_mapping or {}
    student_model = make_policy_model(env.action_size, cfg.policy, env.components, env.component_shapes)
    pairs = []
    for student_name, teacher_name in mapping.items():
        student = latent_source(student_name, student_model, env.components.get("policy"), "student")
        source = latent_source(teacher_name, teacher.actor.model, teacher.input_layout, "teacher")
        if student.size != source.size:
            raise ConfigError(
                f"algorithm.distill_latent_obs_component_mapping: the student's {student_name!r} has "
                f"{student.size} entries, the teacher's {teacher_name!r} {source.size}"
            )
        pairs.append((student, source))
    return tuple(pairs)


def amp_part(env: VecEnv, cfg: TrainConfig, spec: AlgorithmSpec) -> Part:
    """The discriminator and motion library; its `dagger_loss` follows the teacher's labels if any."""
    return make_motion_prior("amp", env, cfg, labels_from="teacher" if "teacher" in spec.parts else None)


def estimator_part(env: VecEnv, cfg: TrainConfig, spec: AlgorithmSpec) -> EstimatorPart:
    """The losses of the policy's estimator stages (EstimatorPPO / EstimatorTPPO)."""
    alg = cfg.algorithm
    stages = make_policy_model(env.action_size, cfg.policy, env.components, env.component_shapes).stages
    return EstimatorPart(
        name="estimator",
        stages=stages,
        loss_func=alg.estimator_loss_func,
        loss_kwargs=dict(alg.estimator_loss_kwargs),
        coefs={"estimator": alg.estimator_loss_coef, "adaptor": alg.adaptor_loss_coef},
    )


def symmetry_part(env: VecEnv, cfg: TrainConfig, spec: AlgorithmSpec) -> Part:
    """rsl_rl's symmetry extension over the groups the policy's batch holds."""
    shapes = env.observation_shapes()
    sizes = {k: int(np.prod(shapes[k])) for k in shapes if k not in env_groups(spec)}
    return make_symmetry_part(env, cfg.algorithm.symmetry_cfg, sizes)


def rnd_part(env: VecEnv, cfg: TrainConfig, spec: AlgorithmSpec) -> Part:
    """rsl_rl's Random Network Distillation on `algorithm.rnd_cfg.obs_group`."""
    return make_rnd_part("rnd", env, cfg)


def demonstrations_part(env: VecEnv, cfg: TrainConfig, spec: AlgorithmSpec) -> Part:
    """The pretraining dataset's decaying pull in the RL iterations, read for the policy's groups."""
    shapes = {k: v for k, v in env.observation_shapes().items() if k not in env_groups(spec)}
    return make_demonstration_part("demonstrations", env, cfg, shapes)


PART_BUILDERS: dict[str, Callable[[VecEnv, TrainConfig, AlgorithmSpec], Part]] = {
    "teacher": teacher_part,
    "amp": amp_part,
    "estimator": estimator_part,
    "symmetry": symmetry_part,
    "rnd": rnd_part,
    "demonstrations": demonstrations_part,
}


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
        parts=tuple(PART_BUILDERS[name](env, cfg, spec) for name in active_parts(cfg)),
        lr_scheduler=None
        if alg.lr_scheduler_class_name is None
        else make_lr_scheduler(alg.lr_scheduler_class_name, alg.lr_scheduler, alg.learning_rate),
    )
