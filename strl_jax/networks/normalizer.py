"""Empirical observation normaliser (rsl_rl's EmpiricalNormalization) as pure state + update, and
`InputNormalization`, the one place a run's observations become network inputs."""

from __future__ import annotations

import dataclasses

import chex
import jax
import jax.numpy as jnp
from flax import struct


@struct.dataclass
class NormalizerState:
    """Running mean/variance of one observation group; `count` is the number of samples seen."""

    mean: jax.Array
    var: jax.Array
    count: jax.Array  # float32 scalar, exact for counts below 2**24 per update


def init_normalizer(shape: tuple[int, ...] | int) -> NormalizerState:
    """Start with mean 0, variance 1 and nothing seen, like rsl_rl."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    return NormalizerState(
        mean=jnp.zeros(shape, jnp.float32),
        var=jnp.ones(shape, jnp.float32),
        count=jnp.zeros((), jnp.float32),
    )


def update_normalizer(
    state: NormalizerState,
    x: jax.Array,
    until: float | None = None,
    axis_name: str | None = None,
) -> NormalizerState:
    """Fold the batch `x[..., *shape]` into the running statistics.

    Stops changing once `count >= until`. With `axis_name`, the batch moments are combined
    across devices first, so every device holds the same statistics.
    """
    x = x.reshape((-1,) + state.mean.shape).astype(jnp.float32)
    n = jnp.asarray(x.shape[0], jnp.float32)
    mean_x = jnp.mean(x, axis=0)
    sq_x = jnp.mean(jnp.square(x - mean_x), axis=0)
    if axis_name is not None:
        n_total = jax.lax.psum(n, axis_name)
        global_mean = jax.lax.psum(mean_x * n, axis_name) / n_total
        sq_x = jax.lax.psum(n * (sq_x + jnp.square(mean_x - global_mean)), axis_name) / n_total
        mean_x, n = global_mean, n_total
    count = state.count + n
    rate = n / count
    delta = mean_x - state.mean
    new_mean = state.mean + rate * delta
    new_var = state.var + rate * (sq_x - state.var + delta * (mean_x - new_mean))
    updated = NormalizerState(mean=new_mean, var=new_var, count=count)
    if until is None:
        return updated
    frozen = state.count >= until
    return jax.tree.map(lambda old, new: jnp.where(frozen, old, new), state, updated)


def normalize(state: NormalizerState, x: jax.Array, eps: float = 1e-2) -> jax.Array:
    """`(x - mean) / (std + eps)` with rsl_rl's eps of 1e-2."""
    chex.assert_axis_dimension(x, -1, state.mean.shape[-1])
    return (x - state.mean) / (jnp.sqrt(state.var) + eps)


@dataclasses.dataclass(frozen=True)
class InputNormalization:
    """How a run's raw observation groups become network inputs, and how its statistics grow.

    rsl_rl normalises inside its model (an `EmpiricalNormalization` in front of the actor and one
    in front of the critic). Here the statistics are train state, so the networks stay pure and
    every reader goes through this one object instead: the actor's input, the critic's groups,
    the estimator stages' unit conversions, the update's batches and observations a part brings.
    `enabled`: `runner.empirical_normalization` (false: networks read raw observations);
    `until`: `runner.normalizer_until`; `timing`: `runner.normalizer_update` (`after` the update,
    rsl_rl, or `before` it, brax); `clip`: `runner.normalizer_clip`, the bound on every normalised
    value. Unclipped, a feature whose spread is mostly sensor noise (an upright robot's gravity
    component: a standard deviation of 0.03) reads tens of standard deviations when the robot
    tilts, and a policy that reads it through a history of frames can answer with actions that
    throw the robot over, whose states read further out still (BENCHMARKS.md, Barkour).
    """

    enabled: bool = True
    until: float | None = None
    timing: str = "after"
    clip: float | None = None

    def _normalize(self, state: NormalizerState, x: jax.Array) -> jax.Array:
        z = normalize(state, x)
        return z if self.clip is None else jnp.clip(z, -self.clip, self.clip)

    def groups(self, normalizers: dict[str, NormalizerState], obs: dict) -> dict:
        """Each observation group with its own statistics (groups without any pass through)."""
        if not self.enabled:
            return obs
        return {k: self._normalize(normalizers[k], v) if k in normalizers else v for k, v in obs.items()}

    def group(self, normalizers: dict[str, NormalizerState], x: jax.Array, stats: str) -> jax.Array:
        """One array with the statistics of group `stats` (a teacher reads `critic` with the
        statistics its own run kept as `policy`)."""
        return self._normalize(normalizers[stats], x) if self.enabled else x

    def statistics(self, normalizers: dict[str, NormalizerState]) -> dict[str, NormalizerState] | None:
        """The statistics the inputs were normalised with (None: raw inputs), for converting
        between network and env units."""
        return normalizers if self.enabled else None

    def absorb(
        self, normalizers: dict[str, NormalizerState], obs: dict, axis_name: str | None = None
    ) -> dict[str, NormalizerState]:
        """The statistics after taking in a rollout's raw observations `[T, N, ...]` (unchanged
        when normalisation is off)."""
        if not self.enabled:
            return normalizers
        return {k: update_normalizer(normalizers[k], obs[k], self.until, axis_name) for k in normalizers}

    def absorbs(self, timing: str) -> bool:
        """Whether the statistics take in a rollout at `timing` (`before` or `after` its update)."""
        return self.enabled and self.timing == timing


def input_normalization(runner_cfg) -> InputNormalization:
    """The normalisation of a run's `runner` settings."""
    return InputNormalization(
        enabled=runner_cfg.empirical_normalization,
        until=runner_cfg.normalizer_until,
        timing=runner_cfg.normalizer_update,
        clip=runner_cfg.normalizer_clip,
    )


def denormalize(state: NormalizerState, x: jax.Array, eps: float = 1e-2) -> jax.Array:
    """The raw observation `normalize` maps to `x` (for transforms defined on raw observations)."""
    chex.assert_axis_dimension(x, -1, state.mean.shape[-1])
    return x * (jnp.sqrt(state.var) + eps) + state.mean
