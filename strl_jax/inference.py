"""The deployable policy: observation in, action out, normaliser baked in, no randomness.

The functions here close over the parameters, so what they return is pure and can be jitted,
exported with `jax.export`, or rebuilt as an ONNX graph (`strl_jax.export`). The action is the
Gaussian mean, clipped to `env.clip_actions` the way the env clips it, so what a robot executes
equals what the env executed during deterministic evaluation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp

from strl_jax.configs.loader import config_from_dict
from strl_jax.configs.schema import TrainConfig
from strl_jax.envs.brax_env import BraxVecEnv
from strl_jax.networks.normalizer import NormalizerState, normalize
from strl_jax.networks.policy import make_policy_model

Policy = Callable[[jax.Array], jax.Array]
Hidden = Any  # the actor's recurrent state ([layers, batch, size] arrays), {} for feed-forward policies
ActingStep = Callable[[jax.Array, Hidden], tuple[jax.Array, Hidden]]


def action_size(params: Any) -> int:
    """Number of action dimensions, read from the learned std (one entry per dimension)."""
    inner = params["params"]
    return int((inner["std"] if "std" in inner else inner["log_std"]).shape[-1])


@dataclasses.dataclass(frozen=True)
class ActingPolicy:
    """`step(obs, hidden) -> (action, hidden')` on the policy group's observation `[batch, obs_dim]`,
    and `initial_hidden(batch)`; the hidden state is `{}` for feed-forward policies."""

    step: ActingStep
    initial_hidden: Callable[[int], Hidden]
    recurrent: bool


def get_acting_policy(cfg: TrainConfig, params: Any, normalizers: dict[str, NormalizerState]) -> ActingPolicy:
    """The deterministic policy of any policy class, with its hidden state explicit."""
    model = make_policy_model(action_size(params), cfg.policy)
    normalizer = normalizers["policy"] if cfg.runner.empirical_normalization else None
    clip = cfg.env.clip_actions

    def step(obs: jax.Array, hidden: Hidden) -> tuple[jax.Array, Hidden]:
        x = normalize(normalizer, obs) if normalizer is not None else obs
        groups = {"actor": hidden} if model.recurrent else {}
        mean, _, groups = model.distribution(params, {"policy": x}, groups)
        mean = jnp.clip(mean, -clip, clip) if clip is not None else mean
        return mean, groups["actor"] if model.recurrent else hidden

    def initial_hidden(batch: int) -> Hidden:
        return model.initial_hidden(batch)["actor"] if model.recurrent else {}

    return ActingPolicy(step=step, initial_hidden=initial_hidden, recurrent=model.recurrent)


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
    env: BraxVecEnv  # one env of the task; `env.replace(num_envs=n)` for more

    @property
    def action_size(self) -> int:
        return action_size(self.params)

    @property
    def observation_size(self) -> int:
        return int(self.env.observation_shapes()["policy"][-1])

    def acting(self) -> ActingPolicy:
        return get_acting_policy(self.cfg, self.params, self.normalizers)

    def policy(self) -> Policy:
        return get_inference_policy(self.cfg, self.params, self.normalizers)


def load_policy(run: str | Path, checkpoint: int | None = None) -> LoadedPolicy:
    """Params and normalisers of a run's newest readable (or the given) checkpoint, shape-checked
    against the config stored with that checkpoint."""
    from strl_jax.envs.brax_env import make_env_from_config
    from strl_jax.train_loops.checkpoint import load_params_and_normalizers, read_checkpoint_meta
    from strl_jax.train_loops.iteration import make_ppo_learner

    meta, _ = read_checkpoint_meta(run, checkpoint)
    cfg = config_from_dict(meta["config"])
    env = make_env_from_config(cfg.env, num_envs=1)
    # Every algorithm's student is this policy; the PPO learner gives its shapes without loading
    # a TPPO/Distillation teacher.
    learner = make_ppo_learner(env, cfg)
    abstract, _ = jax.eval_shape(learner.init, jax.random.PRNGKey(0))
    params, normalizers, step = load_params_and_normalizers(run, abstract, checkpoint)
    return LoadedPolicy(cfg=cfg, params=params, normalizers=normalizers, step=step, env=env)
