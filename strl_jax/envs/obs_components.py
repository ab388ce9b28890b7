"""Component selection (st_rl's `obs_components`): a group keeps only some named parts of its layout.

`env.obs_components = {group: [names]}` picks components of `VecEnv.components[group]` in the
given order, for every env family alike. The selection wraps `observe`, so `observation_shapes()`
(an `eval_shape` of `observe`), normalisers, networks and export all see the smaller group, and
the layout is updated so parts that pick components by name keep finding them.

Indices are static Python tuples and the gather is a concatenation of contiguous slices: cheap,
jit-friendly, and the wrapper stays hashable (a `VecEnv` static field).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from strl_jax.envs.playground_components import Layout, component_indices
from strl_jax.envs.vec_env import Observation, VecEnv
from strl_jax.errors import ConfigError
from strl_jax.static_take import take_static

NO_LAYOUT_HINT = "its components are not named"


@dataclasses.dataclass(frozen=True)
class SelectedComponents:
    """`observe` whose listed groups keep only the given indices (the selected components)."""

    base: Callable[[Any], Observation]  # hashable, e.g. `ObservationGroups` or `PlaygroundGroups`
    selection: tuple[tuple[str, tuple[int, ...]], ...]

    def __call__(self, state: Any) -> Observation:
        obs = dict(self.base(state))
        for group, indices in self.selection:
            obs[group] = take_static(obs[group], indices)
        return obs


def component_names(group: str, value: Any) -> tuple[str, ...]:
    """Validate `env.obs_components.<group>`: a name or a non-empty list of distinct names."""
    names = (value,) if isinstance(value, str) else value
    if not isinstance(names, list | tuple) or not names or not all(isinstance(n, str) for n in names):
        raise ConfigError(
            f"env.obs_components.{group} must be a component name or a non-empty list of names, got {value!r}"
        )
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ConfigError(f"env.obs_components.{group} names {repeated} more than once")
    return tuple(names)


def select_layout(group: str, layout: Layout, names: Sequence[str]) -> tuple[tuple[int, ...], Layout]:
    """The indices of `names` in `layout` (in their order) and the selected layout."""
    try:
        indices = component_indices(layout, names)
    except ConfigError as err:
        raise ConfigError(f"env.obs_components.{group}: {err}") from None
    sizes = dict(layout)
    return tuple(int(i) for i in indices), tuple((n, sizes[n]) for n in names)


def select_components(env: VecEnv, spec: Mapping[str, Any], no_layout_hint: str = NO_LAYOUT_HINT) -> VecEnv:
    """`env` whose groups keep only the components `spec` (`{group: [names]}`) names.

    `no_layout_hint` says how a group gets named components (it differs per env family).
    """
    if not spec:
        return env
    if not isinstance(spec, Mapping):
        raise ConfigError(f"env.obs_components must be a mapping {{group: [component names]}}, got {spec!r}")
    groups = list(env.observation_shapes())
    selection: dict[str, tuple[int, ...]] = {}
    components = dict(env.components)
    for group, value in spec.items():
        if group not in groups:
            raise ConfigError(
                f"env.obs_components.{group}: unknown observation group; valid groups: {groups}"
            )
        layout = env.components.get(group)
        if layout is None:
            raise ConfigError(
                f"env.obs_components.{group}: group {group!r} of task {env.task!r} has no named "
                f"components ({no_layout_hint}); groups with components: {sorted(env.components)}"
            )
        selection[group], components[group] = select_layout(group, layout, component_names(group, value))
    observe = SelectedComponents(env.observe, tuple(selection.items()))
    return env.replace(observe=observe, components=components)
