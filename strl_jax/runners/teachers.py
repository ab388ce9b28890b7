"""Load a frozen teacher from another strl_jax run (its config, network and checkpoint).

The run's policy is read as every finished run's is (`inference.load_policy`), then checked
against the student's env; loading lives here so that `agents/` stays pure: the TPPO and
Distillation parts only receive the loaded `Teacher`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jax
import jax.numpy as jnp

from strl_jax.agents.teacher import Teacher, TeacherState
from strl_jax.configs.schema import TrainConfig
from strl_jax.errors import CheckpointError, ConfigError
from strl_jax.inference import load_policy


def teacher_obs_group(cfg: TrainConfig) -> str:
    """`teacher_policy.obs_group` if set, else `critic` or `policy` per `label_action_with_critic_obs`."""
    alg = cfg.algorithm
    if alg.teacher_policy.obs_group is not None:
        return alg.teacher_policy.obs_group
    return "critic" if alg.label_action_with_critic_obs else "policy"


def load_teacher(cfg: TrainConfig, obs_shapes: dict[str, tuple[int, ...]], action_size: int) -> Teacher:
    """Load `algorithm.teacher_policy.checkpoint` and check it fits the student's environment.

    `obs_shapes` and `action_size` describe the student's env; any mismatch is a `ConfigError`
    naming the sizes, raised before anything is compiled.
    """
    spec = cfg.algorithm.teacher_policy
    where = "algorithm.teacher_policy.checkpoint"
    if not spec.checkpoint:
        raise ConfigError(
            f"{cfg.algorithm.class_name} needs a trained teacher: set {where}=<run folder or checkpoint> "
            "(a strl_jax run whose actor sees the privileged observations)"
        )
    path = str(Path(spec.checkpoint).expanduser())
    try:
        loaded = load_policy(path)
    except CheckpointError as err:
        raise ConfigError(f"{where}: {err}") from None
    teacher_cfg, teacher_env = loaded.cfg, loaded.env
    if teacher_cfg.policy.class_name != spec.class_name:
        raise ConfigError(
            f"algorithm.teacher_policy.class_name is {spec.class_name!r} but the teacher in {path!r} "
            f"is a {teacher_cfg.policy.class_name!r}"
        )
    teacher_shapes = teacher_env.observation_shapes()
    group = teacher_obs_group(cfg)
    if group not in obs_shapes:
        raise ConfigError(
            f"the teacher acts on observation group {group!r}, which the student's env does not have; "
            f"groups: {sorted(obs_shapes)} (set env.obs_groups.{group} or algorithm.teacher_policy.obs_group)"
        )
    if tuple(teacher_shapes["policy"]) != tuple(obs_shapes[group]):
        raise ConfigError(
            f"the teacher in {path!r} takes observations of shape {tuple(teacher_shapes['policy'])}, but the "
            f"student's {group!r} group has shape {tuple(obs_shapes[group])}; choose a group that matches "
            "with algorithm.teacher_policy.obs_group or env.obs_groups"
        )
    if teacher_env.action_size != action_size:
        raise ConfigError(
            f"the teacher in {path!r} has {teacher_env.action_size} actions, the student's env {action_size}"
        )
    # its own network and normalisation, reading the student's `group`; its actions stay unclipped
    # (the env clips what it executes)
    actor = dataclasses.replace(loaded.actor, obs_group=group, clip_actions=None)
    return Teacher(
        actor=actor,
        from_sample=cfg.algorithm.action_labels_from_sample,
        initial_state=TeacherState(
            params=jax.tree.map(jnp.asarray, loaded.params),
            normalizers=jax.tree.map(jnp.asarray, loaded.normalizers),
        ),
        source=f"{path} (checkpoint {loaded.step})",
        input_layout=tuple(teacher_env.components.get("policy", ())),
    )
