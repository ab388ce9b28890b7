"""MuJoCo Playground environments (locomotion, dm_control suite, manipulation) as strl_jax tasks,
and MJX envs of one's own (`strl_jax.envs.entry_points`) through the same construction
(`playground_vec_env`).

A Playground env is an MJX env with Brax's reset/step shape, so it runs in the same `VecEnv` as
Brax's (fresh random resets, truncation, final observations). What this module adds:
- robot models from the offline asset wheels (`strl_jax.envs.menagerie`), never a git clone;
- MJX's JAX implementation by default (`impl: jax`; Playground 0.2.0 defaults to `warp`, which
  on a CPU runs Go1 at under 1k steps/s and warns every step), `env.playground.impl=warp` stays;
- observation groups: `state` -> `policy`, `privileged_state` -> `critic` (Playground's asymmetric
  actor-critic), any other key its own group; named components per group;
- each env's own physics from the task's domain randomiser, drawn once per env at the start as
  Playground's training does, kept in the env state (exact resume);
- for joystick tasks a probe of velocity tracking and mechanical power (`Eval/velrmsd`, `Eval/CoT`);
- on rough-terrain tasks an optional height scan of the heightfield around the base
  (`env.height_scan`, legged_gym's `measured_heights`), the component `height_scan` of chosen groups;
- an optional depth image from a camera on the robot (`env.forward_depth`, legged_gym parkour's
  `forward_depth`), cast once per reset and step into `state.info` and read by the observation as
  the component `forward_depth` of chosen groups.

Groups stay flat arrays and their components are static `(name, size)` layouts: normalisers,
networks and export all work on vectors, and parts pick components by name through the layout.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp

from strl_jax.envs.hfield_contacts import check_hfield_contacts, with_hfield_contacts
from strl_jax.envs.menagerie import EXTRA, use_offline_menagerie
from strl_jax.envs.native_mujoco import command_frame
from strl_jax.envs.obs_layout import named_layouts
from strl_jax.envs.off_terrain import check_off_terrain, with_off_terrain
from strl_jax.envs.perception import (
    FORWARD_DEPTH,
    FREE_JOINT,
    HEIGHT_SCAN,
    HEIGHTFIELD_TASKS,
    WithForwardDepth,
    forward_depth_setting,
    height_scan_setting,
    require_jax_impl,
    with_forward_depth,
    with_height_scan,
)
from strl_jax.envs.playground_components import component_layout
from strl_jax.envs.playground_groups import PlaygroundGroups, group_components, observation_groups
from strl_jax.envs.true_state import (
    TrueStateSetting,
    base_state,
    true_state_entries,
    true_state_setting,
    with_true_state,
)
from strl_jax.envs.vec_env import Observation, VecEnv
from strl_jax.errors import ConfigError
from strl_jax.user_functions import import_function

__all__ = [
    "HEIGHTFIELD_TASKS",
    "PlaygroundGroups",
    "PlaygroundSettings",
    "make_playground_env",
    "playground_tasks",
    "playground_vec_env",
]


# ---- the registry ------------------------------------------------------------------------
def playground_installed() -> bool:
    try:
        import mujoco_playground  # noqa: F401, PLC0415 - optional dependency
    except ImportError:
        return False
    return True


def playground_tasks() -> list[str]:
    """Every Playground registry name ([] without the `playground` extra)."""
    if not playground_installed():
        return []
    from mujoco_playground import registry  # noqa: PLC0415 - optional dependency

    return list(registry.ALL_ENVS)


def playground_config(task: str, overrides: dict) -> Any:
    """The task's default config with strl_jax's defaults (`impl: jax`) and `overrides` applied.

    `overrides` may be nested dicts or dotted keys; an unknown key or a value of the wrong type
    is a `ConfigError` naming the valid keys.
    """
    from mujoco_playground import registry  # noqa: PLC0415 - optional dependency

    return configured_overrides(registry.get_default_config(task), overrides, f"Playground task {task!r}")


def configured_overrides(config: Any, overrides: dict, what: str) -> Any:
    """`config` (a Playground-style ConfigDict, changed in place) with `impl: jax` where it has an
    `impl` key and `overrides` applies none, then `overrides`; `what` names the env in errors."""
    flat = flatten(overrides)
    if "impl" in config and "impl" not in flat:
        flat["impl"] = "jax"
    valid = sorted(flatten(config.to_dict()))
    for key, value in flat.items():
        if key not in valid and not any(v.startswith(key + ".") for v in valid):
            raise ConfigError(f"env.playground.{key} is not a setting of {what}; valid: {valid}")
        try:
            config.update_from_flattened_dict({key: value})
        except (TypeError, ValueError, KeyError) as err:
            raise ConfigError(
                f"env.playground.{key}={value!r} does not fit {what.removeprefix('Playground ')}: {err}"
            ) from None
    return config


def flatten(tree: dict, prefix: str = "") -> dict[str, Any]:
    """`{a: {b: 1}, "c.d": 2}` -> `{"a.b": 1, "c.d": 2}`."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out |= flatten(value, name + ".")
        else:
            out[name] = value
    return out


def domain_randomizer(task: str) -> Any:
    """The task's randomiser from Playground's registry, or None (its printed notice silenced)."""
    from mujoco_playground import registry  # noqa: PLC0415 - optional dependency

    with contextlib.redirect_stdout(io.StringIO()):
        return registry.get_domain_randomizer(task)


# ---- per-env physics -------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, eq=False)
class RandomizedPhysics:
    """Playground's domain randomiser, one draw per env: the randomised model fields live in the
    env state, and the single env simulates with its own row of them."""

    env: Any  # the Playground env (unwrapped)
    randomizer: Any  # (mjx.Model, keys [N]) -> (batched model, in_axes)
    fields: tuple[str, ...]

    def init(self, keys: jax.Array) -> dict[str, jax.Array]:
        model, _ = self.randomizer(self.env.mjx_model, keys)
        return {f: getattr(model, f) for f in self.fields}

    @contextlib.contextmanager
    def bound(self, fields: dict[str, jax.Array]) -> Iterator[None]:
        base = self.env._mjx_model  # noqa: SLF001 - Playground's own wrapper swaps it the same way
        self.env._mjx_model = base.tree_replace(dict(fields))  # noqa: SLF001
        try:
            yield
        finally:
            self.env._mjx_model = base  # noqa: SLF001


RANDOMIZER_FORM = (
    "Playground's randomiser fn(mjx_model, rng: keys [N, 2]) -> (model with the drawn fields batched "
    "[N, ...], in_axes: a model whose drawn fields are 0 and others None)"
)


def load_randomizer(spec: str) -> Callable:
    """The function `env.randomizer` names (`package.module:function`), imported like an entry
    point: from the current folder or the installed packages."""
    return import_function(spec, "env.randomizer")


def drawn_model(env: Any, randomizer: Any, name: str) -> tuple[Any, Any]:
    """`(batched model, in_axes)` of the randomiser on 2 abstract keys, or a ConfigError naming it."""
    found: dict[str, Any] = {}

    def draw(keys):
        out = randomizer(env.mjx_model, keys)
        if not isinstance(out, tuple) or len(out) != 2:
            raise ConfigError(
                f"{name} returned {type(out).__name__}, not a pair (model, in_axes); "
                f"expected {RANDOMIZER_FORM}"
            )
        found["in_axes"] = out[1]
        return out[0]

    try:
        model = jax.eval_shape(draw, jax.ShapeDtypeStruct((2, 2), jnp.uint32))
    except ConfigError:
        raise
    except Exception as err:
        raise ConfigError(f"{name} failed ({type(err).__name__}: {err}); expected {RANDOMIZER_FORM}") from err
    in_axes = found["in_axes"]
    for what, value in (("model", model), ("in_axes", in_axes)):
        if type(value) is not type(env.mjx_model):
            raise ConfigError(
                f"{name} returned {type(value).__name__} as its {what}; expected {RANDOMIZER_FORM}"
            )
    return model, in_axes


def randomized_physics(env: Any, randomizer: Any, name: str = "the task's randomiser") -> RandomizedPhysics:
    """Find which model fields the randomiser draws per env (its `in_axes` of 0); `name` names
    the randomiser in errors (its form and return value are checked on shapes only)."""
    model, in_axes = drawn_model(env, randomizer, name)
    # Static model fields (sizes such as `na`) keep their values in `in_axes`; a randomised field
    # is an array field of the model whose axis is 0.
    fields = tuple(
        f.name
        for f in dataclasses.fields(in_axes)
        if type(getattr(in_axes, f.name)) is int
        and getattr(in_axes, f.name) == 0
        and hasattr(getattr(env.mjx_model, f.name), "shape")
    )
    unbatched = [f for f in fields if getattr(getattr(model, f), "shape", (None,))[:1] != (2,)]
    if unbatched or not fields:
        found = f"fields {unbatched} without a leading env axis" if unbatched else "no field with in_axes 0"
        raise ConfigError(f"{name} draws {found}; expected {RANDOMIZER_FORM}")
    return RandomizedPhysics(env=env, randomizer=randomizer, fields=fields)


# ---- locomotion probe --------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, eq=False)
class LocomotionProbe:
    """Per-step quantities of a joystick task for `Eval/velrmsd` and `Eval/CoT`: the command
    (vx, vy, yaw rate), the base's velocity in the commands' frame (vx, vy, yaw rate; `frame`:
    `native_mujoco.command_frame`, None where it is the base's own), the mechanical power of the
    actuators `sum |qfrc_actuator * qvel|` and the robot's (randomised) weight."""

    env: Any
    frame: Any = None  # numpy [3, 3] or None

    def __call__(self, state: Any) -> dict[str, jax.Array]:
        data, model = state.data, self.env.mjx_model
        base = base_state(data, self.frame)
        local, angular = base["true_base_lin_vel"], base["true_base_ang_vel"]
        velocity = jnp.stack([local[0], local[1], angular[2]])
        power = jnp.sum(jnp.abs(data.qfrc_actuator * data.qvel))
        return {
            "command": jnp.asarray(state.info["command"][:3], jnp.float32),
            "velocity": velocity.astype(jnp.float32),
            "power": power.astype(jnp.float32),
            "weight": (jnp.sum(model.body_mass) * 9.81).astype(jnp.float32),
        }


def locomotion_probe(env: Any) -> LocomotionProbe:
    return LocomotionProbe(env, command_frame(env.mj_model))


def is_joystick(env: Any, reset_state: Any) -> bool:
    """A floating-base robot following a velocity command `info["command"]` (vx, vy, yaw rate)."""
    command = reset_state.info.get("command") if isinstance(reset_state.info, dict) else None
    return (
        command is not None
        and command.shape[-1:] == (3,)
        and env.mj_model.njnt > 0
        and int(env.mj_model.jnt_type[0]) == FREE_JOINT
    )


# ---- construction -------------------------------------------------------------------------------
LayoutOf = Callable[[str], Any]  # observation key -> its layout, or None where not laid out


def with_perception(
    task: str,
    env: Any,
    config: Any,
    groups: Any,
    scan: Any,
    depth: Any,
    layout_of: LayoutOf,
    truth: TrueStateSetting | None = None,
) -> tuple:
    """`(the env to simulate, observe, components per group, component shapes)` with the height
    scan (`scan`), the forward depth image (`depth`) and the base's true state (`truth`) appended
    to their groups, in that order, where set."""
    observe: Callable[[Any], Observation] = groups
    components = group_components(groups, layout_of)
    shapes: dict[str, tuple[int, ...]] = {}
    if scan is not None:
        observe = with_height_scan(task, env, config, groups, scan)
        entry = (HEIGHT_SCAN, scan.spec.num_points)
        components = {g: (*c, entry) if g in scan.groups else c for g, c in components.items()}
        shapes[HEIGHT_SCAN] = (1, scan.spec.num_x, scan.spec.num_y)
    simulated: Any = env
    if depth is not None:
        simulated = with_forward_depth(task, env, groups, depth)
        observe = WithForwardDepth(base=observe, groups=depth.groups)
        entry = (FORWARD_DEPTH, depth.spec.height * depth.spec.width)
        components = {g: (*c, entry) if g in depth.groups else c for g, c in components.items()}
        shapes[FORWARD_DEPTH] = depth.spec.shape
    if truth is not None:
        observe = with_true_state(task, env, groups, observe, truth)
        entries = true_state_entries(truth)
        components = {g: (*c, *entries) if g in truth.groups else c for g, c in components.items()}
    return simulated, observe, components, shapes


@dataclasses.dataclass(frozen=True)
class PlaygroundSettings:
    """How strl_jax wraps any MJX env (registry task or user env): `env.*` settings, checked."""

    num_envs: int
    episode_length: int
    action_repeat: int = 1
    clip_actions: float | None = 1.0
    obs_groups: dict | None = None
    domain_randomization: bool = True
    height_scan: Any = None  # a HeightScanSetting or None
    forward_depth: Any = None  # a ForwardDepthSetting or None
    true_state: Any = None  # a TrueStateSetting or None
    obs_layout: dict | None = None  # env.obs_layout
    randomizer: str | None = None  # env.randomizer
    hfield_contacts: str = "mjx"  # env.hfield_contacts
    off_terrain: str = "fall"  # env.off_terrain


def chosen_randomizer(task: str, env: Any, settings: PlaygroundSettings) -> RandomizedPhysics | None:
    """`env.randomizer` where set, else the registry task's own (None for a user env), each env
    drawing its own physics; None with `domain_randomization: false`."""
    if not settings.domain_randomization:
        return None
    if settings.randomizer:
        function = load_randomizer(settings.randomizer)
        return randomized_physics(env, function, f"env.randomizer={settings.randomizer!r}")
    randomizer = domain_randomizer(task) if task in playground_tasks() else None
    return None if randomizer is None else randomized_physics(env, randomizer)


def observation_layouts(task: str, env: Any, config: Any, obs_layout: Any, obs: Any) -> LayoutOf:
    """Each observation key's components: `env.obs_layout`'s (`obs_layout`), else the env's own
    `obs_layout`, else the registry task's layout under its resolved `config` (None off the
    registry)."""
    named = named_layouts(task, env, obs_layout, obs)
    return lambda key: named[key] if key in named else component_layout(task, key, config)


def playground_vec_env(
    task: str, env: Any, config: Any, reset_state: Any, settings: PlaygroundSettings
) -> VecEnv:
    """One construction for every MJX env object: groups, named components (the registry task's
    layouts, the env's `obs_layout`, `env.obs_layout`), perception, randomiser, locomotion probe."""
    groups = observation_groups(task, reset_state.obs, settings.obs_groups or {})
    layout_of = observation_layouts(task, env, config, settings.obs_layout, reset_state.obs)
    scan, depth = settings.height_scan, settings.forward_depth
    # the randomiser swaps the task env's own model; the contact rule and the edge wrap what is
    # simulated
    contacts = with_hfield_contacts(task, env, settings.hfield_contacts)
    edged = with_off_terrain(contacts, settings.off_terrain)
    perceived = with_perception(task, edged, config, groups, scan, depth, layout_of, settings.true_state)
    simulated, observe, components, shapes = perceived
    physics = chosen_randomizer(task, env, settings)
    return VecEnv(
        env=simulated,
        task=task,
        num_envs=settings.num_envs,
        episode_length=settings.episode_length,
        action_repeat=settings.action_repeat,
        clip_actions=settings.clip_actions,
        observe=observe,
        physics=physics,
        probe=locomotion_probe(env) if is_joystick(env, reset_state) else None,
        components=components,
        component_shapes=shapes,
    )


def make_playground_env(
    task: str,
    num_envs: int,
    episode_length: int,
    action_repeat: int = 1,
    clip_actions: float | None = 1.0,
    overrides: dict | None = None,
    obs_groups: dict | None = None,
    domain_randomization: bool = True,
    height_scan: dict | None = None,
    forward_depth: dict | None = None,
    obs_layout: dict | None = None,
    randomizer: str | None = None,
    true_state: dict | None = None,
    hfield_contacts: str = "mjx",
    off_terrain: str = "fall",
) -> VecEnv:
    """A batched Playground task by registry name, with clear errors for bad names or settings.

    `height_scan` (`env.height_scan`) appends the terrain scan to groups as component `height_scan`,
    `forward_depth` (`env.forward_depth`) then the depth image as component `forward_depth`,
    `true_state` (`env.true_state`) then the base's true state (`strl_jax.envs.true_state`);
    `hfield_contacts` (`env.hfield_contacts`) picks MJX's or C MuJoCo's heightfield contacts;
    `off_terrain` (`env.off_terrain`) whether a robot off a heightfield floor's edge has fallen;
    `obs_layout` (`env.obs_layout`) replaces the layouts of the keys it names, `randomizer`
    (`env.randomizer`, `package.module:function`) the task's randomiser.
    """
    if not playground_installed():
        raise ConfigError(f"task {task!r} is a MuJoCo Playground task; install it with `{EXTRA}`")
    from mujoco_playground import registry  # noqa: PLC0415 - optional dependency

    if task not in registry.ALL_ENVS:
        raise ConfigError(f"unknown Playground task {task!r}; valid: {list(registry.ALL_ENVS)}")
    settings = PlaygroundSettings(
        num_envs=num_envs,
        episode_length=episode_length,
        action_repeat=action_repeat,
        clip_actions=clip_actions,
        obs_groups=obs_groups,
        domain_randomization=domain_randomization,
        height_scan=height_scan_setting(height_scan),
        forward_depth=forward_depth_setting(forward_depth),
        true_state=true_state_setting(true_state),
        obs_layout=obs_layout,
        randomizer=randomizer,
        hfield_contacts=check_hfield_contacts(hfield_contacts),
        off_terrain=check_off_terrain(off_terrain),
    )
    use_offline_menagerie(task)
    config = playground_config(task, overrides or {})
    if settings.forward_depth is not None:
        require_jax_impl(task, config)
    env = registry.load(task, config=config)
    reset_state = jax.eval_shape(env.reset, jax.ShapeDtypeStruct((2,), jnp.uint32))
    return playground_vec_env(task, env, config, reset_state, settings)
