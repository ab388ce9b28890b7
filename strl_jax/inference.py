"""The deployable policy: observation in, action out, normaliser baked in, no randomness.

A run's policy is rebuilt from the config stored with its checkpoint (`load_policy`). Everything
acts through `strl_jax.networks.acting`: `acting_policy` closes an `Actor` over the parameters, so
what it returns is pure and can be jitted, exported with `jax.export`, or traced into an ONNX graph
(`strl_jax.export`). The action is the Gaussian mean (tanh of it for
`policy.distribution: tanh_gaussian`), clipped to
`env.clip_actions` the way the env clips it, so what a robot executes equals what the env executed
during deterministic evaluation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
from flax import struct

from strl_jax.agents.motion_prior import AMP_GROUP
from strl_jax.checkpoints.orbax_checkpoints import load_params_and_normalizers, read_checkpoint_meta
from strl_jax.configs.loader import config_from_dict
from strl_jax.configs.schema import TrainConfig
from strl_jax.envs.tasks import make_env_from_config
from strl_jax.envs.vec_env import VecEnv
from strl_jax.networks.acting import ActingPolicy, Actor, acting_policy, action_size, make_actor
from strl_jax.networks.normalizer import NormalizerState, init_normalizer
from strl_jax.networks.policy import make_policy_model
from strl_jax.networks.policy_classes import policy_class

Policy = Callable[[jax.Array], jax.Array]


def actor_of(
    cfg: TrainConfig, params: Any, components: dict | None = None, shapes: dict | None = None
) -> Actor:
    """The acting policy a run trained (its network, normalisation and action clipping).

    A policy with estimator stages or encoders finds its components in `components` (the env's
    layouts) and image components' shapes in `shapes`; when they are not given, one env of the
    run's task is built to read them.
    """
    spec = policy_class(cfg.policy.class_name)
    if components is None and (spec.stages or spec.encoders):
        env = make_env_from_config(cfg.env, num_envs=1)
        components, shapes = env.components, env.component_shapes
    return make_actor(make_policy_model(action_size(params), cfg.policy, components, shapes), cfg)


def get_acting_policy(cfg: TrainConfig, params: Any, normalizers: dict[str, NormalizerState]) -> ActingPolicy:
    """The deterministic policy of any policy class, with its hidden state explicit."""
    return acting_policy(actor_of(cfg, params), params, normalizers)


def get_inference_policy(cfg: TrainConfig, params: Any, normalizers: dict[str, NormalizerState]) -> Policy:
    """`policy(obs) -> action` of a feed-forward policy (recurrent ones: `get_acting_policy`)."""
    acting = get_acting_policy(cfg, params, normalizers)
    if acting.recurrent:
        raise ValueError(
            f"{cfg.policy.class_name} keeps a hidden state; use get_acting_policy for "
            "step(obs, hidden) -> (action, hidden)"
        )
    return lambda obs: acting.step(obs, {})[0]


@dataclasses.dataclass(frozen=True)
class LoadedPolicy:
    """A checkpoint's policy with the config it was trained with."""

    cfg: TrainConfig
    params: Any
    normalizers: dict[str, NormalizerState]
    step: int
    env: VecEnv  # one env of the task; `env.replace(num_envs=n)` for more

    @property
    def action_size(self) -> int:
        return action_size(self.params)

    @property
    def observation_size(self) -> int:
        """What the deployed policy takes (see `ActingPolicy`)."""
        return self.acting().observation_size

    @property
    def actor(self) -> Actor:
        return actor_of(self.cfg, self.params, self.env.components, self.env.component_shapes)

    def acting(self) -> ActingPolicy:
        return acting_policy(self.actor, self.params, self.normalizers)

    def policy(self) -> Policy:
        return get_inference_policy(self.cfg, self.params, self.normalizers)


@struct.dataclass
class PolicyState:
    """What a checkpoint holds of the policy: network parameters and observation normalisers."""

    params: Any
    normalizers: dict[str, NormalizerState]


def init_policy_state(
    key: jax.Array,
    cfg: TrainConfig,
    obs_shapes: dict[str, tuple[int, ...]],
    num_actions: int,
    components: dict | None = None,
    shapes: dict | None = None,
) -> PolicyState:
    """Fresh policy parameters and one normaliser per observation group (AMP frames have none)."""
    return PolicyState(
        params=make_policy_model(num_actions, cfg.policy, components, shapes).init(key, obs_shapes),
        normalizers={k: init_normalizer(s) for k, s in obs_shapes.items() if k != AMP_GROUP},
    )


def load_policy(run: str | Path, checkpoint: int | None = None) -> LoadedPolicy:
    """Params and normalisers of a run's newest readable (or the given) checkpoint, shape-checked
    against the config stored with that checkpoint.

    Every algorithm's student is this policy, so its shapes come from the policy network alone
    (no learner, no TPPO/Distillation teacher to load).
    """
    meta, _ = read_checkpoint_meta(run, checkpoint)
    cfg = config_from_dict(meta["config"])
    env = make_env_from_config(cfg.env, num_envs=1)
    shapes = env.observation_shapes()
    abstract = jax.eval_shape(
        lambda key: init_policy_state(
            key, cfg, shapes, env.action_size, env.components, env.component_shapes
        ),
        jax.random.PRNGKey(0),
    )
    params, normalizers, step = load_params_and_normalizers(run, abstract, checkpoint)
    return LoadedPolicy(cfg=cfg, params=params, normalizers=normalizers, step=step, env=env)
