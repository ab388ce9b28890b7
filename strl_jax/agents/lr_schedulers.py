"""torch.optim.lr_scheduler's step-driven schedulers as traceable functions (st_rl TPPO's
`lr_scheduler_class_name` / `lr_scheduler`).

torch builds the scheduler after the optimizer (one step, to `last_epoch == 0`) and then steps
it once per iteration. Each step rescales the optimizer's *current* learning rate (torch's
chainable `get_lr`), not `base_lr` (the closed form), so changes made between steps by other
code, such as the adaptive KL schedule, carry over; the same holds here: `step` maps the current
float32 learning rate and the new epoch to the next learning rate.

The chained factors are evaluated so that float32 rounding does not build up a bias over
thousands of iterations: constant factors are applied rounded once (from float64), and the
epoch-dependent ones as ratios of the same deterministic float32 terms, which telescope.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from strl_jax.errors import ConfigError

LR_SCHEDULERS = (
    "StepLR",
    "MultiStepLR",
    "ExponentialLR",
    "LinearLR",
    "ConstantLR",
    "CosineAnnealingLR",
    "PolynomialLR",
)


class LrScheduler(Protocol):
    """A static (hashable) scheduler: `initial` is construction, `step` one `scheduler.step()`."""

    def initial(self, lr: jax.Array | float) -> jax.Array: ...

    def step(self, lr: jax.Array, epoch: jax.Array) -> jax.Array: ...


def _f32(lr: jax.Array | float) -> jax.Array:
    return jnp.asarray(lr, jnp.float32)


_HIGH_BITS = 0xFFFFF000  # the top 12 of float32's 24 significand bits (and sign, exponent)


def _high_part(x: float) -> np.float32:
    """float32(x) cut to 12 significand bits: the product of two such numbers is exact."""
    return (np.asarray(x, np.float32).view(np.uint32) & np.uint32(_HIGH_BITS)).view(np.float32)


def _scale(lr: jax.Array, factor: float) -> jax.Array:
    """`lr * factor` rounded once, from float64 `factor`: `lr * float32(factor)` is off by up to
    6e-8 relative (1.3e-8 for 0.999, always the same way), which a chain of steps accumulates.

    `lr` and `factor` are cut into 12-bit pieces whose products float32 holds exactly; only the
    final sum rounds.
    """
    f_high = _high_part(factor)
    f_mid = _high_part(factor - float(f_high))
    f_low = np.float32(factor - float(f_high) - float(f_mid))
    lr_high = jax.lax.bitcast_convert_type(
        jax.lax.bitcast_convert_type(lr, jnp.uint32) & jnp.uint32(_HIGH_BITS), jnp.float32
    )
    lr_low = lr - lr_high
    correction = (lr_high * f_mid + lr_low * f_high) + (lr_low * f_mid + lr * f_low)
    return lr_high * f_high + correction


@dataclass(frozen=True)
class StepLR:
    """Multiply by `gamma` at every nonzero multiple of `step_size`."""

    step_size: int
    gamma: float = 0.1

    def initial(self, lr: jax.Array | float) -> jax.Array:
        return _f32(lr)

    def step(self, lr: jax.Array, epoch: jax.Array) -> jax.Array:
        lr = _f32(lr)
        return jnp.where(epoch % self.step_size == 0, _scale(lr, self.gamma), lr)


@dataclass(frozen=True)
class MultiStepLR:
    """Multiply by `gamma` (to the multiplicity) at each milestone, 0 included (at construction)."""

    milestones: tuple[int, ...]
    gamma: float = 0.1

    def initial(self, lr: jax.Array | float) -> jax.Array:
        return _scale(_f32(lr), self.gamma ** self.milestones.count(0))

    def step(self, lr: jax.Array, epoch: jax.Array) -> jax.Array:
        lr = _f32(lr)
        for milestone in sorted(set(self.milestones)):
            scaled = _scale(lr, self.gamma ** self.milestones.count(milestone))
            lr = jnp.where(epoch == milestone, scaled, lr)
        return lr


@dataclass(frozen=True)
class ExponentialLR:
    """Multiply by `gamma` every step."""

    gamma: float

    def initial(self, lr: jax.Array | float) -> jax.Array:
        return _f32(lr)

    def step(self, lr: jax.Array, epoch: jax.Array) -> jax.Array:
        return _scale(_f32(lr), self.gamma)


@dataclass(frozen=True)
class LinearLR:
    """Multiply by `start_factor` at construction, then move the factor linearly to `end_factor`
    over `total_iters` steps."""

    start_factor: float = 1.0 / 3
    end_factor: float = 1.0
    total_iters: int = 5

    def initial(self, lr: jax.Array | float) -> jax.Array:
        return _scale(_f32(lr), self.start_factor)

    def step(self, lr: jax.Array, epoch: jax.Array) -> jax.Array:
        # torch's `1 + (end - start) / (T start + (e - 1)(end - start))` is `n(e) / n(e - 1)`.
        lr = _f32(lr)
        if self.total_iters == 0:
            return lr
        e = jnp.clip(epoch, 1, max(self.total_iters, 1)).astype(jnp.float32)
        total = np.float32(self.total_iters)
        start, end = np.float32(self.start_factor), np.float32(self.end_factor)
        n = lambda k: start * (total - k) + end * k
        return jnp.where(epoch > self.total_iters, lr, lr * (n(e) / n(e - 1.0)))


@dataclass(frozen=True)
class ConstantLR:
    """Multiply by `factor` at construction and undo it at step `total_iters`."""

    factor: float = 1.0 / 3
    total_iters: int = 5

    def initial(self, lr: jax.Array | float) -> jax.Array:
        return _scale(_f32(lr), self.factor)

    def step(self, lr: jax.Array, epoch: jax.Array) -> jax.Array:
        lr = _f32(lr)
        return jnp.where(epoch == self.total_iters, _scale(lr, 1.0 / self.factor), lr)


@dataclass(frozen=True)
class CosineAnnealingLR:
    """Cosine from `base_lr` down to `eta_min` over `T_max` steps, back up over the next `T_max`.

    Past the minimum the chain rescales `lr - eta_min`, which a float32 `lr` next to a nonzero
    `eta_min` holds only to ulp(eta_min): the way back up is float32-exact only to about
    `ulp(eta_min) / (lr one step after the minimum - eta_min)` (torch in float32 alike).
    """

    T_max: int
    eta_min: float = 0.0
    base_lr: float = 0.0

    def initial(self, lr: jax.Array | float) -> jax.Array:
        return _f32(lr)

    def step(self, lr: jax.Array, epoch: jax.Array) -> jax.Array:
        # torch's `(1 + cos(pi e / T)) / (1 + cos(pi (e - 1) / T))` is `q(e) / q(e - 1)` with
        # `q(k) = cos(pi k / 2T)^2 = sin(pi |T - k mod 2T| / 2T)^2`: exact integers inside the sine
        # keep it accurate near the minimum, where `1 + cos` loses all digits.
        lr = _f32(lr)
        period = 2 * self.T_max

        def q(k: jax.Array) -> jax.Array:
            s = jnp.sin(jnp.abs(self.T_max - k % period).astype(jnp.float32) * np.float32(math.pi / period))
            return s * s

        # At `e - 1 = T (mod 2T)` the ratio is x/0; torch adds the closed-form rise instead.
        at_minimum = (epoch - 1 - self.T_max) % period == 0
        rise = np.float32((self.base_lr - self.eta_min) * (1.0 - math.cos(math.pi / self.T_max)) / 2.0)
        ratio = q(epoch) / jnp.where(at_minimum, 1.0, q(epoch - 1))
        eta_min = np.float32(self.eta_min)
        return jnp.where(at_minimum, lr + rise, (lr - eta_min) * ratio + eta_min)


@dataclass(frozen=True)
class PolynomialLR:
    """`(1 - e / total_iters)^power` times `base_lr` by step `total_iters`, then constant."""

    total_iters: int = 5
    power: float = 1.0

    def initial(self, lr: jax.Array | float) -> jax.Array:
        return _f32(lr)

    def step(self, lr: jax.Array, epoch: jax.Array) -> jax.Array:
        # torch's `((1 - e / T) / (1 - (e - 1) / T))^p` is `(1 - 1/n)^p` with `n = T - e + 1`;
        # through log1p it stays accurate for large `n`, where `1 - 1/n` rounds.
        lr = _f32(lr)
        if self.power == 0.0:
            return lr
        n = jnp.maximum(self.total_iters - epoch + 1, 1).astype(jnp.float32)
        factor = jnp.exp(np.float32(self.power) * jnp.log1p(-1.0 / n))
        return jnp.where(epoch > self.total_iters, lr, lr * factor)


_CLASSES: dict[str, type] = {
    "StepLR": StepLR,
    "MultiStepLR": MultiStepLR,
    "ExponentialLR": ExponentialLR,
    "LinearLR": LinearLR,
    "ConstantLR": ConstantLR,
    "CosineAnnealingLR": CosineAnnealingLR,
    "PolynomialLR": PolynomialLR,
}
_INTS = {"step_size", "total_iters", "T_max"}
# name -> (check, what it must be), for the values torch rejects or cannot step with.
_RANGES: dict[str, tuple[Any, str]] = {
    "step_size": (lambda v: v >= 1, ">= 1"),
    "total_iters": (lambda v: v >= 0, ">= 0"),
    "T_max": (lambda v: v >= 1, ">= 1"),
    "start_factor": (lambda v: 0.0 < v <= 1.0, "in (0, 1]"),
    "end_factor": (lambda v: 0.0 <= v <= 1.0, "in [0, 1]"),
    "factor": (lambda v: 0.0 < v <= 1.0, "in (0, 1]"),
    "power": (lambda v: v >= 0.0, ">= 0"),
}


def _kwarg_names(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls) if f.name != "base_lr"]


def _convert(name: str, key: str, value: Any) -> Any:
    """A YAML value as the field wants it: ints (an integral float is fine), floats, int tuples."""
    where = f"{name} {key}"
    if key == "milestones":
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{where} must be a list of integers (epochs), got {value!r}")
        return tuple(_convert(name, "milestone", v) for v in value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{where} must be a number, got {value!r}")
    if key in _INTS or key == "milestone":
        if value != int(value):
            raise ConfigError(f"{where} must be an integer, got {value!r}")
        value = int(value)
    else:
        value = float(value)
    if key in _RANGES and not _RANGES[key][0](value):
        raise ConfigError(f"{where} must be {_RANGES[key][1]}, got {value!r}")
    return value


def make_lr_scheduler(name: str, kwargs: Mapping[str, Any], base_lr: float) -> LrScheduler:
    """The scheduler torch's `getattr(lr_scheduler, name)(optimizer, **kwargs)` would be.

    The epoch is the learner's iteration counter, so `last_epoch` (and `verbose`) are not taken.
    """
    if name not in _CLASSES:
        raise ConfigError(f"unknown lr_scheduler_class_name {name!r}; valid choices: {list(LR_SCHEDULERS)}")
    cls = _CLASSES[name]
    valid = _kwarg_names(cls)
    unknown = sorted(set(kwargs) - set(valid))
    if unknown:
        raise ConfigError(f"lr_scheduler {name} does not take {unknown}; valid kwargs: {valid}")
    required = [
        f.name
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.name not in kwargs and f.name != "base_lr"
    ]
    if required:
        raise ConfigError(f"lr_scheduler {name} needs {required}; valid kwargs: {valid}")
    values = {key: _convert(name, key, value) for key, value in kwargs.items()}
    if cls is CosineAnnealingLR:
        values["base_lr"] = float(base_lr)
    return cls(**values)
