"""Elementwise regression losses: st_rl EstimatorPPO's `estimator_loss_func`.

st_rl calls `getattr(torch.nn.functional, name)(estimate, target, **kwargs, reduction="none")`
and reduces the result itself (`.sum(-1).mean()`), so only the elementwise values are needed
here; the caller reduces them the same way.
"""

from __future__ import annotations

from collections.abc import Mapping

import jax
import jax.numpy as jnp

from strl_jax.errors import ConfigError

REGRESSION_LOSSES = ("mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss")

# The keyword arguments each torch function takes besides `reduction` (fixed to "none").
_KWARGS: dict[str, tuple[str, ...]] = {
    "mse_loss": (),
    "l1_loss": (),
    "smooth_l1_loss": ("beta",),
    "huber_loss": ("delta",),
}
_FUNC_KEY = "algorithm.estimator_loss_func"
_KWARGS_KEY = "algorithm.estimator_loss_kwargs"


def check_regression_loss(name: str, kwargs: Mapping[str, object]) -> None:
    """Fail at configuration time, not at the first update, on a loss torch would reject."""
    if name not in _KWARGS:
        raise ConfigError(f"unknown {_FUNC_KEY} {name!r}; valid choices: {list(REGRESSION_LOSSES)}")
    valid = _KWARGS[name]
    for key, value in kwargs.items():
        if key not in valid:
            why = " (it is always 'none': the loss is reduced by the algorithm)" if key == "reduction" else ""
            raise ConfigError(
                f"{_KWARGS_KEY} has {key!r}{why}, which {name} does not take; valid keys: {list(valid)}"
            )
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{_KWARGS_KEY}.{key} must be a number, got {value!r}")
    if name == "smooth_l1_loss" and float(kwargs.get("beta", 1.0)) < 0.0:
        raise ConfigError(f"{_KWARGS_KEY}.beta must be >= 0 for smooth_l1_loss, got {kwargs['beta']!r}")
    if name == "huber_loss" and float(kwargs.get("delta", 1.0)) <= 0.0:
        raise ConfigError(f"{_KWARGS_KEY}.delta must be > 0 for huber_loss, got {kwargs['delta']!r}")


def elementwise_regression_loss(
    name: str, prediction: jax.Array, target: jax.Array, kwargs: Mapping[str, float]
) -> jax.Array:
    """torch.nn.functional's `name(prediction, target, **kwargs, reduction="none")`."""
    check_regression_loss(name, kwargs)
    diff = prediction - target
    if name == "mse_loss":
        return jnp.square(diff)
    abs_diff = diff * jnp.sign(diff)  # |diff|, with torch's gradient 0 (jnp.abs: 1) at diff == 0
    if name == "l1_loss":
        return abs_diff
    if name == "smooth_l1_loss":
        beta = float(kwargs.get("beta", 1.0))
        if beta == 0.0:  # torch's special case: the quadratic part vanishes (and 1/beta with it)
            return abs_diff
        return jnp.where(abs_diff < beta, 0.5 * jnp.square(diff) / beta, abs_diff - 0.5 * beta)
    delta = float(kwargs.get("delta", 1.0))
    return jnp.where(abs_diff < delta, 0.5 * jnp.square(diff), delta * (abs_diff - 0.5 * delta))
