"""A frozen teacher policy loaded from a strl_jax run, for TPPO and Distillation.

The teacher keeps its own network (from the config stored with its checkpoint) and its own
observation normaliser; it reads one observation group of the student's environment (by
default `critic`, st_rl's `label_action_with_critic_obs`). Its parameters and normaliser
statistics travel in the train state, so a resumed run continues with exactly the teacher it
started with (the teacher's run folder still defines its network), and the learner never
updates them.
"""

from __future__ import annotations

import dataclasses
import types
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from strl_jax.configs.loader import ConfigError, config_from_dict
from strl_jax.configs.schema import TrainConfig
from strl_jax.networks.gaussian import gaussian_sample
from strl_jax.networks.normalizer import NormalizerState, init_normalizer, normalize
from strl_jax.networks.policy import PolicyModel, make_policy_model, reset_hidden_groups


@struct.dataclass
class TeacherState:
    """The teacher's parameters and its run's normalisers (by the teacher run's group names)."""

    params: Any
    normalizers: dict[str, NormalizerState]


@dataclasses.dataclass(frozen=True, eq=False)
class Teacher:
    """Static description of the teacher plus the arrays it was loaded with (`initial_state`)."""

    model: PolicyModel
    obs_group: str  # the student env's group the teacher acts on
    normalize_obs: bool  # the teacher run normalised its observations
    from_sample: bool  # labels are samples of the teacher's Gaussian, not its mean
    initial_state: TeacherState
    source: str = ""  # where it was loaded from, for messages

    def initial_hidden(self, num_envs: int) -> dict:
        """Only the actor's memory: the teacher's critic is never run."""
        hidden = self.model.initial_hidden(num_envs)
        return {"actor": hidden["actor"]} if hidden else {}

    def reset_hidden(self, hidden: dict, done: jax.Array) -> dict:
        return reset_hidden_groups(hidden, done)

    def distribution(self, state: TeacherState, obs: dict, hidden: dict):
        """`(mean, std, hidden')` of the teacher for the student env's raw observation groups."""
        x = obs[self.obs_group]
        if self.normalize_obs:
            x = normalize(state.normalizers["policy"], x)
        return self.model.distribution(state.params, {"policy": x}, hidden)

    def label(self, state: TeacherState, obs: dict, hidden: dict, keys: jax.Array):
        """`(action labels, hidden')`: the mean action, or with `from_sample` a sample (one key per env)."""
        mean, std, hidden = self.distribution(state, obs, hidden)
        labels = jax.vmap(gaussian_sample)(keys, mean, std) if self.from_sample else mean
        return jax.lax.stop_gradient(labels), hidden


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
    from strl_jax.envs.brax_env import make_env_from_config
    from strl_jax.train_loops.checkpoint import (
        CheckpointError,
        load_params_and_normalizers,
        read_checkpoint_meta,
    )

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
    model = make_policy_model(action_size, teacher_cfg.policy)
    abstract = types.SimpleNamespace(
        params=jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), teacher_shapes)),
        normalizers=jax.eval_shape(lambda: {k: init_normalizer(s) for k, s in teacher_shapes.items()}),
    )
    try:
        params, normalizers, step = load_params_and_normalizers(path, abstract)
    except CheckpointError as err:
        raise ConfigError(f"{where}: {err}") from None
    return Teacher(
        model=model,
        obs_group=group,
        normalize_obs=teacher_cfg.runner.empirical_normalization,
        from_sample=cfg.algorithm.action_labels_from_sample,
        initial_state=TeacherState(
            params=jax.tree.map(jnp.asarray, params), normalizers=jax.tree.map(jnp.asarray, normalizers)
        ),
        source=f"{path} (checkpoint {step})",
    )
