"""Time-major rollout storage as an immutable pytree."""

from __future__ import annotations

from typing import Any

import jax
from flax import struct


@struct.dataclass
class Transition:
    """One rollout, every leaf shaped `[T, N, ...]` (steps x environments).

    `rewards` already holds the learning reward: scaled, with the time-out bootstrap added.
    """

    obs: dict[str, jax.Array]  # raw (un-normalised) observation groups the policy acted on
    actions: jax.Array  # [T, N, A] executed actions (before any env-side clipping)
    log_prob: jax.Array  # [T, N] log-probability of `actions` under the acting (student) policy
    mean: jax.Array  # [T, N, A] acting distribution mean (for the KL of the adaptive schedule)
    std: jax.Array  # [T, N, A] acting distribution std
    values: jax.Array  # [T, N] V(s_t)
    rewards: jax.Array  # [T, N]
    dones: jax.Array  # [T, N] float: 1 where the episode ended (terminated or truncated)
    # [T, N] float: 1 where the episode hit its time limit; stored only when GAE masks time-outs
    # (algorithm.timeout_bootstrap `none`), else None
    truncated: Any = None
    # Recurrent policies: hidden state before the first step ([L, N, H] leaves), from which the
    # update re-runs the sequences; the states of later steps follow from it and `dones`.
    initial_hidden: Any = None
    # Random draws the policy made while acting (the estimator stages' replacement masks, [T, N]),
    # replayed by the update so every action is re-evaluated on the input it was chosen with.
    draws: dict = struct.field(default_factory=dict)
    # Per-step fields of the learner's parts, by part name ({"teacher": {"action_labels": ...}}).
    parts: dict = struct.field(default_factory=dict)
