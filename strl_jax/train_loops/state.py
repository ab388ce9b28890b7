"""The two pytrees that hold everything a run needs to continue exactly."""

from __future__ import annotations

from typing import Any

import jax
from flax import struct

from strl_jax.envs.vec_env import EnvState
from strl_jax.networks.normalizer import NormalizerState


@struct.dataclass
class TrainState:
    """Learner state: parameters, optimiser, normalisers, learning rate, RNG and counters."""

    params: Any
    opt_state: Any
    normalizers: dict[str, NormalizerState]
    learning_rate: jax.Array  # float32 scalar, changed by the adaptive schedule
    key: jax.Array
    iteration: jax.Array  # int32 scalar: completed iterations
    parts: dict[str, Any] = struct.field(default_factory=dict)  # each part's train state, by part name


@struct.dataclass
class RolloutState:
    """Acting state: environments, the observation to act on, per-env episode accumulators,
    recurrent memories and the parts' acting state (teacher masks, replay rings)."""

    env_state: EnvState
    obs: dict[str, jax.Array]
    episode_return: jax.Array  # [N] undiscounted, unscaled return so far
    episode_length: jax.Array  # [N] int32
    episode_metrics: dict[str, jax.Array]  # [N] running sums of the env's per-step metrics
    hidden: dict[str, Any]  # recurrent policies: {"actor": h, "critic": h}; {} otherwise
    parts: dict[str, Any] = struct.field(default_factory=dict)  # each part's rollout state, by part name
    # the rollouts before this one that the update also learns from (`buffers.history`), or None
    history: Any = None
