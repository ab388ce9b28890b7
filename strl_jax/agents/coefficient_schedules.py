"""Iteration-dependent coefficients: st_rl's `GET_PROB_FUNC` as traceable functions.

TPPO uses them for the probability that the teacher acts (`teacher_act_prob`) and for the
weight of the distillation loss (`distillation_loss_coef`). Either setting is a number (held
constant) or one of the names below, scaled by `update_times_scale` (st_rl's rough estimate of
how many iterations the run takes).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
import jax.numpy as jnp

Schedule = Callable[[jax.Array], jax.Array]

SCHEDULES = ("linear", "exp", "tanh")


def linear_decay(x: jax.Array, scale: float) -> jax.Array:
    """`max(0, 1 - x / s)`: reaches 0 at iteration `s`."""
    return jnp.maximum(0.0, 1.0 - x / scale)


def exp_decay(x: jax.Array, scale: float) -> jax.Array:
    """`max(0, (1 - 1/s)^x)`: about `1/e` at iteration `s` (`s >= 1`).

    Evaluated as `exp(x log(1 - 1/s))` with the logarithm taken in double precision: float32's
    `1 - 1/s` alone is off by 1e-6 relative for large `s`, which the power amplifies.
    """
    if scale == 1.0:
        return jnp.where(x == 0, 1.0, 0.0)
    return jnp.exp(x * math.log1p(-1.0 / scale))


def tanh_decay(x: jax.Array, scale: float) -> jax.Array:
    """`max(0, 0.5 (1 - tanh((x - s) / s)))`: a smooth step through 0.5 at iteration `s`."""
    return jnp.maximum(0.0, 0.5 * (1.0 - jnp.tanh((x - scale) / scale)))


_DECAYS = {"linear": linear_decay, "exp": exp_decay, "tanh": tanh_decay}


def make_schedule(value: float | str, update_times_scale: float) -> Schedule:
    """`iteration -> float32 scalar` for a constant or a schedule name (see `SCHEDULES`)."""
    if isinstance(value, str):
        if value not in _DECAYS:
            raise ValueError(f"unknown schedule {value!r}; valid choices: {list(SCHEDULES)} or a number")
        decay = _DECAYS[value]
        scale = float(update_times_scale)
        if scale < 1.0:
            raise ValueError(f"update_times_scale must be at least 1 (iterations), got {scale}")
        return lambda x: decay(jnp.asarray(x, jnp.float32), scale)
    constant = float(value)
    return lambda x: jnp.full((), constant, jnp.float32)
