"""Estimators and adaptors (st_rl `EstimatorMixin`, `PrivilegeEstimatorMixin`): stages before the actor.

A stage reads named components of the actor's (normalised) observation, predicts named components
of the critic's observation, and, in the rows its replacement mask selects, writes the prediction
into the actor's observation in place of the components of the same names (st_rl's
`substitute_estimated_state`, with the prediction's gradient stopped). Stages run in order (the
adaptor before the estimator, as st_rl's mixins do), so a later stage reads what an earlier one
wrote. A stage of a recurrent policy has its own memory (`memory`), or reads the actor's memory
output (`reads_actor_memory`, st_rl's `use_actor_rnn`), in which case it never replaces anything.

Units: a stage predicts its targets as the critic's normaliser sees them (the loss compares it with
the normalised critic observation, like st_rl). Where the estimate replaces a component of the
actor's input it is converted into the actor normaliser's units first (`StageUnits`), so the actor
reads what it would have read had the true value been the estimate. Without empirical
normalisation both are the raw values and the conversion is the identity: st_rl exactly.

Replacement masks are drawn per env and step while acting and stored with the rollout, so the update
re-evaluates every action on the input it was chosen with (st_rl draws a new mask in the update).
At inference every replacing stage always replaces: the deployed policy never needs the components
it estimates (st_rl also draws at inference; the two agree for the usual `replace_state_prob: 1`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from strl_jax.networks.memory import Memory
from strl_jax.networks.mlp import MLP
from strl_jax.networks.normalizer import NormalizerState
from strl_jax.static_take import take_static

NORMALIZER_EPS = 1e-2  # `networks.normalizer.normalize`'s


@dataclasses.dataclass(frozen=True)
class StageSpec:
    """One stage, with its components already resolved to indices (static, hashable)."""

    name: str  # "adaptor" | "estimator": its parameters, memory, outputs and loss go by this name
    input_idx: tuple[int, ...]  # actor-observation entries it reads, in the layout's order
    target_idx: tuple[int, ...]  # critic-observation entries it predicts, in the layout's order
    slot_idx: tuple[int, ...]  # actor-observation entries each target replaces (same order)
    targets: tuple[tuple[str, int], ...]  # the predicted components (name, size), for logging
    hidden_sizes: tuple[int, ...]
    nonlinearity: str
    memory: bool  # its own recurrent memory
    reads_actor_memory: bool  # st_rl `use_actor_rnn`: reads the actor's memory output
    replace_prob: float  # per row and step, the probability that the estimate replaces the targets

    @property
    def output_size(self) -> int:
        return len(self.target_idx)

    @property
    def replaces(self) -> bool:
        return self.replace_prob > 0.0


@struct.dataclass
class StageUnits:
    """Per stage: critic-normalised estimate -> actor-normalised value (`scale * e + shift`), and
    critic-normalised -> raw (`raw_scale * e + raw_shift`)."""

    scale: dict[str, jax.Array]
    shift: dict[str, jax.Array]
    raw_scale: dict[str, jax.Array]
    raw_shift: dict[str, jax.Array]


def _std(state: NormalizerState, idx: tuple[int, ...]) -> jax.Array:
    return jnp.sqrt(state.var[np.asarray(idx)]) + NORMALIZER_EPS


def stage_units(
    stages: tuple[StageSpec, ...], normalizers: dict[str, NormalizerState] | None, actor_group: str
) -> StageUnits | None:
    """The unit conversions of every stage from the normalisers (None: no normalisation, identity)."""
    if not stages or normalizers is None:
        return None
    actor, critic = normalizers[actor_group], normalizers["critic"]
    scale, shift, raw_scale, raw_shift = {}, {}, {}, {}
    for s in stages:
        slot, target = np.asarray(s.slot_idx), np.asarray(s.target_idx)
        std_c, std_a = _std(critic, s.target_idx), _std(actor, s.slot_idx)
        raw_scale[s.name], raw_shift[s.name] = std_c, critic.mean[target]
        if s.replaces:
            scale[s.name] = std_c / std_a
            shift[s.name] = (critic.mean[target] - actor.mean[slot]) / std_a
    return StageUnits(scale=scale, shift=shift, raw_scale=raw_scale, raw_shift=raw_shift)


def raw_estimates(estimates: dict[str, jax.Array], units: StageUnits | None) -> dict[str, jax.Array]:
    """Estimates in the env's units (what a robot's logger wants); encoder latents (no units)
    pass through."""
    if units is None:
        return estimates
    return {
        k: v * units.raw_scale[k] + units.raw_shift[k] if k in units.raw_scale else v
        for k, v in estimates.items()
    }


def substitute(obs: jax.Array, spec: StageSpec, value: jax.Array, rows: jax.Array | None) -> jax.Array:
    """`obs` with the stage's slots set to `value` in the selected `rows` (all rows when None).

    Static slices and a select (no gather, no scatter), so the exported ONNX graph stays simple.
    """
    size = obs.shape[-1]
    source = np.zeros(size, np.int32)
    source[np.asarray(spec.slot_idx)] = np.arange(spec.output_size)
    is_slot = np.zeros(size, bool)
    is_slot[np.asarray(spec.slot_idx)] = True
    where = jnp.asarray(is_slot)
    if rows is not None:
        where = where & rows[..., None]
    return jnp.where(where, take_static(value, source), obs)


def measured_indices(stages: tuple[StageSpec, ...], size: int) -> np.ndarray:
    """Entries of the actor's observation that inference reads: all but the ones a stage always
    replaces before anything reads them (what a deployed policy must be given)."""
    replaced: set[int] = set()
    read: set[int] = set()
    for s in stages:
        if s.reads_actor_memory:
            continue
        read |= set(s.input_idx) - replaced
        if s.replaces:
            replaced |= set(s.slot_idx)
    return np.asarray([i for i in range(size) if i not in replaced or i in read], np.int32)


class Stage(nn.Module):
    """Optional memory, then st_rl's `MlpModel` (hidden layers with `nonlinearity`, linear output)."""

    spec: StageSpec
    rnn_type: str = "lstm"
    rnn_hidden_size: int = 256
    rnn_num_layers: int = 1

    @nn.compact
    def __call__(self, x: jax.Array, hidden: Any) -> tuple[jax.Array, Any]:
        if self.spec.memory:
            x, hidden = Memory(self.rnn_type, self.rnn_hidden_size, self.rnn_num_layers, name="memory")(
                x, hidden
            )
        out = MLP(self.spec.hidden_sizes, self.spec.output_size, self.spec.nonlinearity, name="mlp")(x)
        return out, hidden


def run_stages(
    nets: dict[str, Stage],
    stages: tuple[StageSpec, ...],
    obs: jax.Array,
    hidden: dict,
    draws: dict[str, jax.Array] | None,
    units: StageUnits | None,
) -> tuple[jax.Array, dict, dict[str, jax.Array]]:
    """The stages that read the observation, in order: `(actor input, hidden', estimates)`.

    `draws` holds each replacing stage's row mask; None means inference (always replace).
    """
    hidden = dict(hidden)
    estimates = {}
    for s in stages:
        if s.reads_actor_memory:
            continue
        estimate, h = nets[s.name](take_static(obs, s.input_idx), hidden.get(s.name))
        if s.memory:
            hidden[s.name] = h
        estimates[s.name] = estimate
        if s.replaces:
            value = jax.lax.stop_gradient(estimate)
            if units is not None:
                value = value * units.scale[s.name] + units.shift[s.name]
            obs = substitute(obs, s, value, None if draws is None else draws[s.name])
    return obs, hidden, estimates


def draw_replacements(stages: tuple[StageSpec, ...], keys: jax.Array) -> dict[str, jax.Array]:
    """Per replacing stage, `[N]` bools: True with its `replace_prob` (one key per env)."""
    out = {}
    for i, s in enumerate(st for st in stages if st.replaces):
        u = jax.vmap(lambda k, i=i: jax.random.uniform(jax.random.fold_in(k, i)))(keys)
        out[s.name] = u < s.replace_prob
    return out
