"""strl_jax's observation groups over a MuJoCo Playground-style env's observation keys, with the named
components of each group (`strl_jax.envs.playground_components`, `strl_jax.envs.obs_layout`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax.numpy as jnp

from strl_jax.envs.playground_components import Layout
from strl_jax.envs.vec_env import Observation
from strl_jax.errors import ConfigError

DEFAULT_GROUPS = {"policy": ("state",), "critic": ("privileged_state",)}


@dataclasses.dataclass(frozen=True)
class PlaygroundGroups:
    """strl_jax groups from Playground's observation: each group concatenates Playground keys
    (`""` stands for a task whose observation is one array)."""

    groups: tuple[tuple[str, tuple[str, ...]], ...]

    def __call__(self, state: Any) -> Observation:
        obs = state.obs if isinstance(state.obs, dict) else {"": state.obs}
        out = {}
        for name, keys in self.groups:
            parts = [obs[k] for k in keys]
            out[name] = parts[0] if len(parts) == 1 else jnp.concatenate(parts, axis=-1)
        return out


def observation_groups(task: str, obs: Any, spec: dict) -> PlaygroundGroups:
    """Default groups (`state` -> policy, `privileged_state` -> critic, other keys their own),
    updated by `env.obs_groups` = `{group: key or [keys]}` over Playground's keys."""
    if not isinstance(obs, dict):
        if spec:
            raise ConfigError(
                f"Playground task {task!r} has one observation array, which every group sees; "
                f"env.obs_groups does not apply to it (got {spec!r})"
            )
        return PlaygroundGroups((("policy", ("",)), ("critic", ("",))))
    keys = list(obs)
    groups: dict[str, tuple[str, ...]] = {k: (k,) for k in keys if k not in ("state", "privileged_state")}
    groups["policy"] = ("state",) if "state" in obs else (keys[0],)
    groups["critic"] = ("privileged_state",) if "privileged_state" in obs else groups["policy"]
    for name, value in spec.items():
        chosen = (value,) if isinstance(value, str) else tuple(value or ())
        bad = [k for k in chosen if not isinstance(k, str) or k not in obs]
        if not chosen or bad:
            raise ConfigError(
                f"env.obs_groups.{name} must name Playground observation keys of {task!r}; "
                f"got {value!r}, valid keys: {keys}"
            )
        flat = [k for k in chosen if len(obs[k].shape) != 1]
        if flat and len(chosen) > 1:
            raise ConfigError(f"env.obs_groups.{name}: only 1-D observations concatenate, not {flat}")
        groups[name] = chosen
    return PlaygroundGroups(tuple(groups.items()))


def group_components(groups: PlaygroundGroups, layout_of: Callable[[str], Layout | None]) -> dict:
    """`{group: ((name, size), ...)}` for the groups whose every key has a layout (`layout_of(key)`:
    the registry task's, or the env's declared `obs_layout`; `"state"` for a one-array observation);
    in a group of several keys each name is prefixed `<key>.` (both keys may have a `base_lin_vel`)."""
    out = {}
    for name, keys in groups.groups:
        layouts = [layout_of(k or "state") for k in keys]
        if all(layout is not None for layout in layouts):
            out[name] = tuple(
                (c if len(keys) == 1 else f"{k}.{c}", n)
                for k, layout in zip(keys, layouts, strict=True)
                for c, n in layout
            )
    return out
