"""Named observation components an env declares itself (`obs_layout`) or the config gives
(`env.obs_layout`), checked against the env's real observation shapes.

A layout maps an observation key to its ordered components, `{key: [(name, size), ...]}`: a
Playground observation dict's key (`state`, `privileged_state`, ...), or `"state"` for an env whose
observation is one array (MJX or Brax). The sizes split the key's last dimension, so they must sum
to it, and names are unique within a key. The names are a convention shared with the registry
tasks' layouts (`strl_jax.envs.playground_components` documents the vocabulary: `base_lin_vel`,
`base_ang_vel`, `projected_gravity`, `dof_pos`, `dof_vel`, `last_action`, `command`,
`feet_contact`, ..., and `state_<name>` for a privileged copy of the state): estimators
(`estimator_target_components`), encoders, symmetry tables, latent distillation and
`env.obs_components` find components by these names on any robot.

An env declares its layout as an attribute or a zero-argument method `obs_layout`; a key of
`env.obs_layout` replaces the env's (or a registry task's built-in) layout of that key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from strl_jax.envs.playground_components import Layout
from strl_jax.errors import ConfigError

# The key of an observation that is one array (not a dict of keys).
WHOLE = "state"


def observation_keys(obs: Any) -> dict[str, tuple[int, ...]]:
    """`{key: shape}` of one env's (abstract) observation; `{"state": shape}` for one array."""
    if isinstance(obs, Mapping):
        return {str(k): tuple(v.shape) for k, v in obs.items()}
    return {WHOLE: tuple(obs.shape)}


def declared_layout(env: Any, task: str) -> Any:
    """The env's own `obs_layout` (an attribute or a zero-argument method), or None."""
    found = getattr(env, "obs_layout", None)
    if found is None or not callable(found):
        return found
    try:
        return found()
    except Exception as err:
        raise ConfigError(
            f"obs_layout() of {task!r} failed ({type(err).__name__}: {err}); it must take no "
            "arguments and return {key: [(name, size), ...]}"
        ) from err


def entry_layout(where: str, entries: Any) -> Layout:
    """One key's `[(name, size), ...]`: strings and positive integers, names unique."""
    if not isinstance(entries, list | tuple) or not entries:
        raise ConfigError(f"{where} must be a non-empty list of [name, size] pairs, got {entries!r}")
    out = []
    for entry in entries:
        ok = isinstance(entry, list | tuple) and len(entry) == 2
        name, size = entry if ok else (None, None)
        if not (isinstance(name, str) and name and isinstance(size, int) and not isinstance(size, bool)):
            raise ConfigError(
                f"{where}: each entry must be [name, size] (a name and an integer), got {entry!r}"
            )
        if size < 1:
            raise ConfigError(f"{where}: component {name!r} has size {size}; sizes must be at least 1")
        out.append((name, size))
    names = [n for n, _ in out]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ConfigError(f"{where} names {repeated} more than once; names must be unique within a key")
    return tuple(out)


def checked_layouts(where: str, spec: Any, shapes: dict[str, tuple[int, ...]]) -> dict[str, Layout]:
    """`spec` (`{key: [[name, size], ...]}`) checked against the observation's `{key: shape}`."""
    if not isinstance(spec, Mapping):
        raise ConfigError(f"{where} must be a mapping {{key: [[name, size], ...]}}, got {spec!r}")
    out: dict[str, Layout] = {}
    for key, entries in spec.items():
        if key not in shapes:
            one = " (the observation is one array)" if list(shapes) == [WHOLE] else ""
            raise ConfigError(f"{where}: {key!r} is not an observation key; valid keys: {list(shapes)}{one}")
        layout = entry_layout(f"{where}.{key}", entries)
        shape = shapes[key]
        sizes = [size for _, size in layout]
        if not shape or sum(sizes) != shape[-1]:
            last = shape[-1] if shape else "none: a scalar"
            raise ConfigError(
                f"{where}.{key}: sizes {sizes} sum to {sum(sizes)}, but observation {key!r} has shape "
                f"{shape} (last dimension {last}); the sizes must sum to the last dimension"
            )
        out[key] = layout
    return out


def named_layouts(task: str, env: Any, config_layout: Any, obs: Any) -> dict[str, Layout]:
    """The layouts the env declares, updated key by key by `env.obs_layout`, both checked."""
    shapes = observation_keys(obs)
    declared = declared_layout(env, task)
    own = {} if declared is None else checked_layouts(f"obs_layout of {task!r}", declared, shapes)
    given = checked_layouts("env.obs_layout", config_layout, shapes) if config_layout else {}
    return {**own, **given}
