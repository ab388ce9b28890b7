"""Load a frozen teacher from another strl_jax run (its config, network and checkpoint).

Checkpoint I/O lives here, beside the checkpoint code, so that `agents/` stays pure: the TPPO and
Distillation parts only receive the loaded `Teacher`.
"""

from __future__ import annotations

import types
from pathlib import Path

import jax
import jax.numpy as jnp

from strl_jax.agents.teacher import Teacher, TeacherState
from strl_jax.checkpoints.orbax_checkpoints import load_params_and_normalizers, read_checkpoint_meta
from strl_jax.configs.loader import config_from_dict
from strl_jax.configs.schema import TrainConfig
from strl_jax.envs.tasks import make_env_from_config
from strl_jax.errors import CheckpointError, ConfigError
from strl_jax.networks.acting import Actor
from strl_jax.networks.normalizer import init_normalizer
from strl_jax.networks.policy import make_policy_model


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
        meta, _ = read_checkpoint_meta(path)
    except CheckpointError as err:
        raise ConfigError(f"{where}: {err}") from None
    teacher_cfg = config_from_dict(meta["config"])
    if teacher_cfg.policy.class_name != spec.class_name:
        raise ConfigError(
            f"algorithm.teacher_policy.class_name is {spec.class_name!r} but the teacher in {path!r} "
            f"is a {teacher_cfg.policy.class_name!r}"
        )
    teacher_env = make_env_from_config(teacher_cfg.env, num_envs=1)
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
    model = make_policy_model(
        action_size, teacher_cfg.policy, teacher_env.components, teacher_env.component_shapes
    )
    abstract = types.SimpleNamespace(
        params=jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), teacher_shapes)),
        normalizers=jax.eval_shape(lambda: {k: init_normalizer(s) for k, s in teacher_shapes.items()}),
    )
    try:
        params, normalizers, step = load_params_and_normalizers(path, abstract)
    except CheckpointError as err:
        raise ConfigError(f"{where}: {err}") from None
    actor = Actor(
        model=model,
        obs_group=group,
        normalize_obs=teacher_cfg.runner.empirical_normalization,
        clip_actions=None,
    )
    return Teacher(
        actor=actor,
        from_sample=cfg.algorithm.action_labels_from_sample,
        initial_state=TeacherState(
            params=jax.tree.map(jnp.asarray, params), normalizers=jax.tree.map(jnp.asarray, normalizers)
        ),
        source=f"{path} (checkpoint {step})",
        input_layout=tuple(teacher_env.components.get("policy", ())),
    )
