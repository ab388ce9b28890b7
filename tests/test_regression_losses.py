"""torch.nn.functional parity of strl_jax.agents.regression_losses (EstimatorPPO's estimator loss):
values and gradients with `reduction="none"`, a numpy property check, and the config errors."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from strl_jax.agents.regression_losses import (
    REGRESSION_LOSSES,
    check_regression_loss,
    elementwise_regression_loss,
)
from strl_jax.errors import ConfigError

CASES = [
    ("mse_loss", {}),
    ("l1_loss", {}),
    ("smooth_l1_loss", {}),
    ("smooth_l1_loss", {"beta": 0.5}),
    ("smooth_l1_loss", {"beta": 0}),
    ("huber_loss", {}),
    ("huber_loss", {"delta": 2.0}),
    ("huber_loss", {"delta": 0.3}),
]
IDS = [f"{name}{kwargs}" for name, kwargs in CASES]
SHAPES = [(7,), (16, 3), (4, 5, 2)]


def inputs(shape: tuple[int, ...], seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Differences spread over both sides of every threshold (0.3 to 2), some exactly 0."""
    rng = np.random.default_rng(seed)
    prediction = rng.normal(size=shape).astype(np.float32) * 2.0
    target = rng.normal(size=shape).astype(np.float32) * 2.0
    target.flat[::5] = prediction.flat[::5]
    return prediction, target


def torch_loss(name: str, kwargs: dict, prediction: np.ndarray, target: np.ndarray, grad: bool = False):
    """Values, and with `grad` the gradients of their sum with respect to both inputs."""
    p = torch.tensor(prediction, requires_grad=grad)
    t = torch.tensor(target, requires_grad=grad)
    loss = getattr(F, name)(p, t, **kwargs, reduction="none")
    if not grad:
        return loss.numpy()
    loss.sum().backward()
    return p.grad.numpy(), t.grad.numpy()


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize(("name", "kwargs"), CASES, ids=IDS)
def test_values_match_torch(name: str, kwargs: dict, shape: tuple[int, ...]) -> None:
    prediction, target = inputs(shape, seed=len(shape))
    values = elementwise_regression_loss(name, jnp.asarray(prediction), jnp.asarray(target), kwargs)
    assert values.shape == shape and values.dtype == jnp.float32
    np.testing.assert_allclose(values, torch_loss(name, kwargs, prediction, target), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(("name", "kwargs"), CASES, ids=IDS)
def test_gradients_match_torch(name: str, kwargs: dict) -> None:
    """Including where prediction == target, where torch's subgradient of |x| is 0."""
    prediction, target = inputs((16, 3), seed=7)
    total = lambda p, t: elementwise_regression_loss(name, p, t, kwargs).sum()
    grads = jax.jit(jax.grad(total, argnums=(0, 1)))(jnp.asarray(prediction), jnp.asarray(target))
    for got, want in zip(grads, torch_loss(name, kwargs, prediction, target, grad=True), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_smooth_l1_without_quadratic_part_is_l1() -> None:
    prediction, target = inputs((32,), seed=3)
    p, t = jnp.asarray(prediction), jnp.asarray(target)
    np.testing.assert_array_equal(
        elementwise_regression_loss("smooth_l1_loss", p, t, {"beta": 0.0}),
        elementwise_regression_loss("l1_loss", p, t, {}),
    )


def reference(name: str, diff: np.ndarray, kwargs: dict) -> np.ndarray:
    """The textbook definitions, in float64."""
    a = np.abs(diff)
    if name == "mse_loss":
        return diff**2
    if name == "l1_loss":
        return a
    if name == "smooth_l1_loss":
        beta = kwargs.get("beta", 1.0)
        return a if beta == 0 else np.where(a < beta, 0.5 * diff**2 / beta, a - 0.5 * beta)
    delta = kwargs.get("delta", 1.0)
    return np.where(a < delta, 0.5 * diff**2, delta * (a - 0.5 * delta))


finite = st.floats(-50.0, 50.0, allow_nan=False, width=32)


@settings(max_examples=60, deadline=None)
@given(
    case=st.sampled_from(CASES),
    pairs=st.lists(st.tuples(finite, finite), min_size=1, max_size=8),
)
def test_matches_reference(case: tuple[str, dict], pairs: list[tuple[float, float]]) -> None:
    """Nonnegative, zero at equality, and the definition's value anywhere in a wide range."""
    name, kwargs = case
    prediction = np.array([p for p, _ in pairs], np.float32)
    target = np.array([t for _, t in pairs], np.float32)
    values = np.asarray(
        elementwise_regression_loss(name, jnp.asarray(prediction), jnp.asarray(target), kwargs)
    )
    diff = prediction.astype(np.float64) - target.astype(np.float64)
    assert (values >= 0).all() and (values[diff == 0] == 0).all()
    np.testing.assert_allclose(values, reference(name, diff, kwargs), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("name", "kwargs", "match"),
    [
        (
            "cross_entropy",
            {},
            r"unknown algorithm.estimator_loss_func 'cross_entropy'; valid choices: \['mse_loss'",
        ),
        ("mse_loss", {"reduction": "sum"}, r"'reduction' \(it is always 'none'"),
        ("mse_loss", {"beta": 1.0}, r"estimator_loss_kwargs has 'beta'.*mse_loss.*valid keys: \[\]"),
        ("smooth_l1_loss", {"delta": 1.0}, r"smooth_l1_loss does not take; valid keys: \['beta'\]"),
        ("huber_loss", {"beta": 1.0}, r"huber_loss does not take; valid keys: \['delta'\]"),
        ("smooth_l1_loss", {"beta": -0.5}, r"estimator_loss_kwargs.beta must be >= 0.*got -0.5"),
        ("huber_loss", {"delta": 0}, r"estimator_loss_kwargs.delta must be > 0.*got 0"),
        ("huber_loss", {"delta": "2"}, r"estimator_loss_kwargs.delta must be a number, got '2'"),
    ],
)
def test_config_errors(name: str, kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        check_regression_loss(name, kwargs)
    with pytest.raises(ConfigError):
        elementwise_regression_loss(name, jnp.zeros(3), jnp.zeros(3), kwargs)


def test_valid_settings_pass() -> None:
    for name, kwargs in CASES:
        check_regression_loss(name, kwargs)
    assert {name for name, _ in CASES} == set(REGRESSION_LOSSES)
