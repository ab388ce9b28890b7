"""`sweep`: numeric algorithm/policy fields trained side by side (`runners.population`)."""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

from strl_jax.configs.schema import TrainConfig
from strl_jax.errors import ConfigError

# Config sections a sweep may change: the env is built once for all members.
SWEEP_SECTIONS = ("algorithm", "policy")


def flatten_sweep(sweep: dict, prefix: str = "") -> dict[str, Any]:
    """`{algorithm: {learning_rate: [...]}}` or `{"algorithm.learning_rate": [...]}` -> dotted keys."""
    out: dict[str, Any] = {}
    for key, value in sweep.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            out |= flatten_sweep(value, f"{path}.")
        else:
            out[path] = value
    return out


def sweep_field_type(path: str) -> type:
    """The annotated type of a dotted config field; ConfigError when it is not a sweepable number."""
    section, _, name = path.partition(".")
    if section not in SWEEP_SECTIONS or not name or "." in name:
        raise ConfigError(
            f"sweep.{path}: a sweep sets fields of {list(SWEEP_SECTIONS)} (e.g. sweep.algorithm."
            "learning_rate=[1e-3, 3e-4]); the env is built once for every member"
        )
    cls = type(getattr(TrainConfig(), section))
    fields = {f.name: f for f in dataclasses.fields(cls)}
    if name not in fields:
        raise ConfigError(f"sweep.{path}: {section} has no field {name!r}; valid fields: {sorted(fields)}")
    annotation = str(fields[name].type)
    if annotation in ("float", "float | None"):
        return float
    if annotation in ("int", "int | None"):
        return int
    raise ConfigError(
        f"sweep.{path}: only numeric fields can be swept in one program ({path} is {annotation}); "
        "run separate configs for the others"
    )


def sweep_settings(cfg: TrainConfig) -> dict[str, tuple]:
    """The swept fields and their values, checked: `{"algorithm.learning_rate": (1e-3, 3e-4)}`."""
    settings = {path: tuple(values) for path, values in normalize_sweep(cfg.sweep).items()}
    lengths = {path: len(values) for path, values in settings.items()}
    if cfg.runner.sweep_mode == "zip" and len(set(lengths.values())) > 1:
        raise ConfigError(
            f"runner.sweep_mode=zip pairs the i-th values of every sweep list, but their lengths differ: "
            f"{lengths}; give lists of one length, or use runner.sweep_mode=grid"
        )
    return settings


def sweep_points(cfg: TrainConfig) -> list[tuple]:
    """The combinations of swept values, one per setting: every one (`grid`) or the i-th of each
    list (`zip`)."""
    values = list(sweep_settings(cfg).values())
    if cfg.runner.sweep_mode == "zip" and values:
        return list(zip(*values, strict=True))
    return list(itertools.product(*values))


def normalize_sweep(sweep: Any) -> dict[str, list]:
    """The `sweep` mapping with dotted keys and values of each field's type (YAML reads `1e-3` as
    a string), checked."""
    if not isinstance(sweep, dict):
        raise ConfigError(
            f"sweep must be a mapping like {{algorithm.learning_rate: [1e-3, 3e-4]}}, got {sweep!r}"
        )
    out = {}
    for path, values in flatten_sweep(sweep).items():
        kind = sweep_field_type(path)
        if not isinstance(values, list | tuple) or not values:
            raise ConfigError(f"sweep.{path} must be a non-empty list of values, got {values!r}")
        out[path] = [_number(v, kind, f"sweep.{path}[{i}]") for i, v in enumerate(values)]
    return out


def _number(value: Any, kind: type, where: str) -> float | int:
    try:
        number = float(value) if not isinstance(value, bool) else None
    except (TypeError, ValueError):
        number = None
    if number is None or (kind is int and number != int(number)):
        raise ConfigError(f"{where} must be {'an integer' if kind is int else 'a number'}, got {value!r}")
    return int(number) if kind is int else number
