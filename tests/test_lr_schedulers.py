"""torch.optim.lr_scheduler parity of strl_jax.agents.lr_schedulers: the chained learning rate per
epoch, with and without changes made to it between steps, eager and jitted, and the config errors."""

from __future__ import annotations

import warnings
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from strl_jax.agents.lr_schedulers import LR_SCHEDULERS, make_lr_scheduler
from strl_jax.errors import ConfigError

BASE_LR = 3e-4
STEPS = 60

# Two settings per scheduler; both exercise something that happens within STEPS epochs.
CASES = [
    ("StepLR", {"step_size": 7}),
    ("StepLR", {"step_size": 3, "gamma": 0.9}),
    ("MultiStepLR", {"milestones": [5, 20, 41]}),
    ("MultiStepLR", {"milestones": [0, 3, 3, 30], "gamma": 0.7}),
    ("ExponentialLR", {"gamma": 0.95}),
    ("ExponentialLR", {"gamma": 0.999}),
    ("LinearLR", {}),
    ("LinearLR", {"start_factor": 1.0, "end_factor": 0.05, "total_iters": 45}),
    ("ConstantLR", {}),
    ("ConstantLR", {"factor": 0.5, "total_iters": 17}),
    ("CosineAnnealingLR", {"T_max": 10}),
    # eta_min small next to BASE_LR: float32 holds `eta_min + rise` after the minimum only to
    # ulp(eta_min), and the chain carries that error up (see CosineAnnealingLR).
    ("CosineAnnealingLR", {"T_max": 15, "eta_min": 1e-5}),
    ("PolynomialLR", {}),
    ("PolynomialLR", {"total_iters": 50, "power": 2.0}),
]
IDS = [f"{name}-{i % 2}" for i, (name, _) in enumerate(CASES)]


def perturb(lr, epoch: int):
    """What the adaptive KL schedule may do between steps."""
    return lr * 1.5 if epoch % 2 == 0 else lr / 1.5


def torch_lrs(name: str, kwargs: dict, perturbed: bool) -> np.ndarray:
    """The param-group lr after construction and after each of STEPS `scheduler.step()`s."""
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=BASE_LR)
    scheduler = getattr(torch.optim.lr_scheduler, name)(optimizer, **kwargs)
    group = optimizer.param_groups[0]
    lrs = [group["lr"]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "scheduler.step() before optimizer.step()"
        for epoch in range(1, STEPS + 1):
            if perturbed:
                group["lr"] = perturb(group["lr"], epoch)
            scheduler.step()
            lrs.append(group["lr"])
    return np.asarray(lrs)


def jax_lrs(name: str, kwargs: dict, perturbed: bool, step) -> np.ndarray:
    scheduler = make_lr_scheduler(name, kwargs, BASE_LR)
    lr = scheduler.initial(jnp.float32(BASE_LR))
    lrs = [lr]
    for epoch in range(1, STEPS + 1):
        if perturbed:
            lr = perturb(lr, epoch)
        lr = step(scheduler, lr, jnp.int32(epoch))
        lrs.append(lr)
    return np.asarray(jnp.stack(lrs), np.float64)


def eager_step(scheduler, lr, epoch):
    return scheduler.step(lr, epoch)


_traces = []


@partial(jax.jit, static_argnums=2)
def _jitted(lr, epoch, scheduler):
    _traces.append(scheduler)
    return scheduler.step(lr, epoch)


def jitted_step(scheduler, lr, epoch):
    return _jitted(lr, epoch, scheduler)


@pytest.mark.parametrize(("name", "kwargs"), CASES, ids=IDS)
@pytest.mark.parametrize("perturbed", [False, True], ids=["plain", "perturbed"])
def test_matches_torch(name: str, kwargs: dict, perturbed: bool) -> None:
    expected = torch_lrs(name, kwargs, perturbed)
    np.testing.assert_allclose(jax_lrs(name, kwargs, perturbed, eager_step), expected, rtol=1e-6, atol=0)


@pytest.mark.parametrize(("name", "kwargs"), CASES, ids=IDS)
def test_jitted_matches_torch(name: str, kwargs: dict) -> None:
    """The epoch is traced: one compilation serves every step."""
    _traces.clear()
    expected = torch_lrs(name, kwargs, perturbed=True)
    np.testing.assert_allclose(jax_lrs(name, kwargs, True, jitted_step), expected, rtol=1e-6, atol=0)
    assert len(_traces) <= 1  # 0 when an equal scheduler compiled it already


def test_schedulers_are_static_values() -> None:
    """Equal settings give equal, hashable schedulers (jit's static arguments, the train state's
    static fields); YAML's lists and integral floats are accepted."""
    a = make_lr_scheduler("MultiStepLR", {"milestones": [10, 20]}, BASE_LR)
    b = make_lr_scheduler("MultiStepLR", {"milestones": (10.0, 20), "gamma": 0.1}, BASE_LR)
    assert a == b and hash(a) == hash(b)
    assert make_lr_scheduler("StepLR", {"step_size": 4.0}, BASE_LR).step_size == 4
    assert {name for name, _ in CASES} == set(LR_SCHEDULERS)


def test_long_chain_does_not_drift() -> None:
    """Constant factors are applied rounded once: 3,000 ExponentialLR steps stay within float32's
    random-walk error, where `lr * float32(0.999)` drifts by 4e-5."""
    scheduler = make_lr_scheduler("ExponentialLR", {"gamma": 0.999}, BASE_LR)
    steps = jnp.arange(1, 3001, dtype=jnp.int32)
    final, _ = jax.lax.scan(lambda lr, e: (scheduler.step(lr, e), None), scheduler.initial(BASE_LR), steps)
    np.testing.assert_allclose(float(final), BASE_LR * 0.999**3000, rtol=5e-6)


@pytest.mark.parametrize(
    ("name", "kwargs", "match"),
    [
        ("OneCycleLR", {}, r"unknown lr_scheduler_class_name 'OneCycleLR'; valid choices: \['StepLR'"),
        ("StepLR", {}, r"StepLR needs \['step_size'\]; valid kwargs: \['step_size', 'gamma'\]"),
        ("ExponentialLR", {"gamma": 0.9, "last_epoch": 3}, r"does not take \['last_epoch'\]"),
        ("ConstantLR", {"verbose": True}, r"does not take \['verbose'\]; valid kwargs: \['factor'"),
        ("CosineAnnealingLR", {"T_max": 5, "base_lr": 1.0}, r"does not take \['base_lr'\]"),
        ("StepLR", {"step_size": 0}, "StepLR step_size must be >= 1, got 0"),
        ("StepLR", {"step_size": 2.5}, "StepLR step_size must be an integer, got 2.5"),
        ("StepLR", {"step_size": True}, "must be a number, got True"),
        ("ExponentialLR", {"gamma": "0.9"}, "ExponentialLR gamma must be a number, got '0.9'"),
        ("MultiStepLR", {"milestones": 5}, "milestones must be a list of integers"),
        ("MultiStepLR", {"milestones": [5, 7.5]}, "milestone must be an integer, got 7.5"),
        ("ConstantLR", {"factor": 0.0}, r"factor must be in \(0, 1\], got 0.0"),
        ("LinearLR", {"start_factor": 1.5}, r"start_factor must be in \(0, 1\]"),
        ("LinearLR", {"end_factor": -0.1}, r"end_factor must be in \[0, 1\]"),
        ("CosineAnnealingLR", {"T_max": 0}, "T_max must be >= 1"),
        ("PolynomialLR", {"power": -1}, "power must be >= 0"),
        ("PolynomialLR", {"total_iters": -2}, "total_iters must be >= 0"),
    ],
)
def test_config_errors(name: str, kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        make_lr_scheduler(name, kwargs, BASE_LR)
