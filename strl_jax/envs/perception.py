"""Perception for MuJoCo Playground tasks (and MJX envs of one's own): legged_gym's height scan and
a forward depth camera as named observation components.

- `env.height_scan` (rough-terrain tasks): terrain heights on a grid around the base, read exactly
  off the heightfield (`strl_jax.envs.height_scan`), appended to chosen groups as the component
  `height_scan`; the policy's copy carries the task's observation noise.
- `env.forward_depth`: a depth image cast from a camera on the robot (`strl_jax.envs.depth_camera`)
  once per reset and step into `state.info` (saved with the env state), appended to chosen groups
  as the component `forward_depth`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from strl_jax.envs import height_scan as hs
from strl_jax.envs.depth_camera import DepthCameraSpec, camera_body, depth_image
from strl_jax.envs.playground_groups import PlaygroundGroups
from strl_jax.envs.vec_env import Observation
from strl_jax.errors import ConfigError

FREE_JOINT = 0  # mujoco.mjtJoint.mjJNT_FREE
HEIGHT_SCAN = "height_scan"  # the component's name
FORWARD_DEPTH = "forward_depth"  # the component's name and its `state.info` key
# Playground 0.2.0's tasks whose ground is a heightfield (one 20 x 20 m field geom named "floor").
HEIGHTFIELD_TASKS = (
    "Go1JoystickRoughTerrain",
    "G1JoystickRoughTerrain",
    "T1JoystickRoughTerrain",
    "BerkeleyHumanoidJoystickRoughTerrain",
)
# What an env of one's own (an entry point, `strl_jax.envs.entry_points`) needs for a height scan.
USER_HEIGHTFIELD = "a user env needs a heightfield geom, named by env.height_scan.geom (default floor)"
# Stream of `fold_in(state.info["rng"], ...)` that draws the policy's scan noise: the env's own
# draws (which split that key) never see it, so the scan leaves the trajectory unchanged.
HEIGHT_SCAN_NOISE_STREAM = 0x5CA7


# ---- height scan -------------------------------------------------------------------------------
def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError
    return value


def _real(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError
    return float(value)


def _positive(value: Any) -> float:
    if _real(value) <= 0:
        raise ValueError
    return float(value)


def _non_negative(value: Any) -> float:
    if _real(value) < 0:
        raise ValueError
    return float(value)


def _pair(value: Any) -> tuple[float, float]:
    if not isinstance(value, list | tuple) or len(value) != 2:
        raise ValueError
    return (_real(value[0]), _real(value[1]))


def _triple(value: Any) -> tuple[float, float, float]:
    if not isinstance(value, list | tuple) or len(value) != 3:
        raise ValueError
    return (_real(value[0]), _real(value[1]), _real(value[2]))


def _angle_of_view(value: Any) -> float:
    if not 0 < _real(value) < 180:
        raise ValueError
    return float(value)


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError
    return value


def _group_flags(value: Any) -> tuple[int, ...]:
    if not isinstance(value, list | tuple) or len(value) not in (0, 6):
        raise ValueError
    if not all(v in (0, 1) for v in value):
        raise ValueError
    return tuple(int(v) for v in value)


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError
    return value


def _choice(options: tuple[str, ...]) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if value not in options:
            raise ValueError
        return value

    return check


# `env.height_scan` keys besides `groups` and `geom`: HeightScanSpec's fields, how each is read
# and what a valid value is (for the error message).
HEIGHT_SCAN_FIELDS: dict[str, tuple[Callable[[Any], Any], str]] = {
    "num_x": (_count, "an integer >= 1"),
    "num_y": (_count, "an integer >= 1"),
    "resolution": (_positive, "metres > 0"),
    "offset": (_pair, "[x, y] in metres"),
    "body": (_text, 'a body name ("" is the root body)'),
    "yaw": (_choice(hs.YAW_CONVENTIONS), f"one of {list(hs.YAW_CONVENTIONS)}"),
    "reference_height": (_real, "metres"),
    "clip": (_positive, "metres > 0"),
    "scale": (_positive, "a number > 0"),
    "mode": (_choice(hs.MODES), f"one of {list(hs.MODES)}"),
    "noise": (_non_negative, "metres >= 0 at noise level 1"),
}
HEIGHT_SCAN_KEYS = ("groups", "geom", *HEIGHT_SCAN_FIELDS)


@dataclasses.dataclass(frozen=True)
class HeightScanSetting:
    """`env.height_scan`, checked: which groups get the scan, of which heightfield geom, how."""

    groups: tuple[str, ...]
    geom: str
    spec: hs.HeightScanSpec


def setting_groups(name: str, config: Mapping, default: str) -> tuple[str, ...]:
    """`env.<name>.groups`: one group name or a list of distinct names (default `[default]`)."""
    groups = config.get("groups", [default])
    groups = [groups] if isinstance(groups, str) else groups
    if (
        not isinstance(groups, list | tuple)
        or not groups
        or not all(isinstance(g, str) for g in groups)
        or len(set(groups)) != len(groups)
    ):
        raise ConfigError(
            f"env.{name}.groups must be a group name or a list of distinct names (policy, critic), "
            f"got {config['groups']!r}"
        )
    return tuple(groups)


def check_setting_groups(name: str, task: str, groups: PlaygroundGroups, chosen: tuple[str, ...]) -> None:
    """`env.<name>.groups` must name the task's observation groups."""
    valid = [group for group, _ in groups.groups]
    bad = [g for g in chosen if g not in valid]
    if bad:
        raise ConfigError(f"env.{name}.groups: {bad} are not observation groups of {task!r}; valid: {valid}")


def setting_fields(name: str, config: Any, keys: tuple[str, ...], fields: dict) -> dict[str, Any]:
    """The checked values of `env.<name>`'s `fields` keys; a mapping of known keys only."""
    if not isinstance(config, Mapping):
        raise ConfigError(f"env.{name} must be a mapping {{key: value}}, got {config!r}")
    unknown = [k for k in config if k not in keys]
    if unknown:
        raise ConfigError(f"env.{name}.{unknown[0]} is not a {name} setting; valid: {list(keys)}")
    out = {}
    for key, (read, valid) in fields.items():
        if key in config:
            try:
                out[key] = read(config[key])
            except (TypeError, ValueError):
                raise ConfigError(f"env.{name}.{key} must be {valid}, got {config[key]!r}") from None
    return out


def height_scan_setting(config: Any) -> HeightScanSetting | None:
    """`env.height_scan` as a checked setting (None when `{}`: off); every key and value is
    checked here, before any model loads, with the valid choices in the message."""
    if not config:
        return None
    fields = setting_fields(HEIGHT_SCAN, config, HEIGHT_SCAN_KEYS, HEIGHT_SCAN_FIELDS)
    groups = setting_groups(HEIGHT_SCAN, config, "critic")
    geom = config.get("geom", "floor")
    if not isinstance(geom, str) or not geom:
        raise ConfigError(f"env.height_scan.geom must name the heightfield geom (e.g. floor), got {geom!r}")
    return HeightScanSetting(groups=groups, geom=geom, spec=hs.HeightScanSpec(**fields))


def noise_level(config: Any) -> float:
    """The task's observation noise level (`noise_config.level`; 0 for a task without one)."""
    noise = config.get("noise_config") if hasattr(config, "get") else None
    level = noise.get("level") if noise is not None and hasattr(noise, "get") else None
    return 0.0 if level is None else float(level)


@dataclasses.dataclass(frozen=True, eq=False)
class WithHeightScan:
    """`observe` with the height scan appended to `groups`: the clean scan, or in `noisy_groups`
    (the policy's, when the task's noise is on) the scan plus uniform noise drawn from the state's
    `info["rng"]` through `HEIGHT_SCAN_NOISE_STREAM`. A pure function of the state, so final and
    next observations agree and a resumed run observes exactly the same. One env or a batch."""

    base: Callable[[Any], Observation]
    spec: hs.HeightScanSpec
    field: hs.HeightField  # arrays: compared by identity (eq=False), hashable by id
    groups: tuple[str, ...]
    noisy_groups: tuple[str, ...]
    level: float
    body: int
    free_qpos: int  # qpos address of the body's free joint; -1: read the body's world pose

    def base_pose(self, data: Any) -> tuple[jax.Array, jax.Array]:
        """World position `[..., 3]` and `(w, x, y, z)` quaternion `[..., 4]` of the base."""
        if self.free_qpos >= 0:
            a = self.free_qpos
            return data.qpos[..., a : a + 3], data.qpos[..., a + 3 : a + 7]
        return data.xpos[..., self.body, :], data.xquat[..., self.body, :]

    def noisy(self, scan: jax.Array, rng: jax.Array) -> jax.Array:
        """`scan` `[..., n]` plus each env's noise, keyed by its `rng` `[..., 2]`."""
        flat_rng = rng.reshape(-1, *rng.shape[scan.ndim - 1 :])
        keys = jax.vmap(lambda k: jax.random.fold_in(k, HEIGHT_SCAN_NOISE_STREAM))(flat_rng)
        flat = jax.vmap(lambda s, k: hs.noisy(self.spec, s, k, self.level))(
            scan.reshape(-1, scan.shape[-1]), keys
        )
        return flat.reshape(scan.shape)

    def __call__(self, state: Any) -> Observation:
        obs = dict(self.base(state))
        pos, quat = self.base_pose(state.data)
        clean = hs.scan_observation(self.spec, self.field, pos, quat).astype(jnp.float32)
        noisy = self.noisy(clean, state.info["rng"]) if self.noisy_groups else None
        for group in self.groups:
            scan = noisy if group in self.noisy_groups else clean
            obs[group] = jnp.concatenate([obs[group], scan.astype(obs[group].dtype)], axis=-1)
        return obs


def with_height_scan(
    task: str, env: Any, config: Any, observe: Callable[[Any], Observation], setting: HeightScanSetting
) -> WithHeightScan:
    """The scan over the task's model: its heightfield geom, base body and groups checked."""
    model = env.mj_model
    fields = np.flatnonzero(np.asarray(model.geom_type) == hs.HFIELD_GEOM)
    if fields.size == 0:
        raise ConfigError(
            f"env.height_scan needs a task whose ground is a heightfield; {task!r} has none. "
            f"Tasks with one: {list(HEIGHTFIELD_TASKS)}; {USER_HEIGHTFIELD}"
        )
    known = observe if isinstance(observe, PlaygroundGroups) else PlaygroundGroups(())
    check_setting_groups(HEIGHT_SCAN, task, known, setting.groups)
    try:
        field = hs.heightfield_of(model, setting.geom)
    except ValueError as err:
        raise ConfigError(f"env.height_scan.geom={setting.geom!r} of task {task!r}: {err}") from None
    try:
        body = hs.base_body(model, setting.spec.body)
    except ValueError as err:
        raise ConfigError(f"env.height_scan.body={setting.spec.body!r} of task {task!r}: {err}") from None
    free = np.flatnonzero((np.asarray(model.jnt_type) == FREE_JOINT) & (np.asarray(model.jnt_bodyid) == body))
    level = noise_level(config)
    noisy = ("policy",) if level > 0 and setting.spec.noise > 0 and "policy" in setting.groups else ()
    return WithHeightScan(
        base=observe,
        spec=setting.spec,
        field=field,
        groups=setting.groups,
        noisy_groups=noisy,
        level=level,
        body=body,
        free_qpos=int(model.jnt_qposadr[free[0]]) if free.size else -1,
    )


# ---- forward depth -----------------------------------------------------------------------------
# `env.forward_depth` keys besides `groups`: DepthCameraSpec's fields, how each is read and what a
# valid value is (for the error message).
FORWARD_DEPTH_FIELDS: dict[str, tuple[Callable[[Any], Any], str]] = {
    "height": (_count, "an integer >= 1 (pixels)"),
    "width": (_count, "an integer >= 1 (pixels)"),
    "horizontal_fov": (_angle_of_view, "degrees in (0, 180)"),
    "near": (_non_negative, "metres >= 0"),
    "far": (_positive, "metres > near"),
    "offset": (_real, "a number (added after scaling depth to [0, 1])"),
    "body": (_text, "the name of the body the camera sits on"),
    "position": (_triple, "[x, y, z] in metres in the body's frame"),
    "pitch": (_real, "radians (positive looks down)"),
    "camera": (_text, 'an MJCF camera name ("" places the camera on body)'),
    "geomgroup": (_group_flags, "[] (every geom group) or 6 flags 0/1, as mj_ray's geomgroup"),
    "exclude_robot": (_flag, "true or false"),
    "hfield_steps": (_count, "an integer >= 1"),
    "hfield_refine": (_count, "an integer >= 1"),
}
FORWARD_DEPTH_KEYS = ("groups", *FORWARD_DEPTH_FIELDS)


@dataclasses.dataclass(frozen=True)
class ForwardDepthSetting:
    """`env.forward_depth`, checked: which groups get the image, and the camera."""

    groups: tuple[str, ...]
    spec: DepthCameraSpec


def forward_depth_setting(config: Any) -> ForwardDepthSetting | None:
    """`env.forward_depth` as a checked setting (None when `{}`: off); every key and value is
    checked here, before any model loads, with the valid choices in the message."""
    if not config:
        return None
    fields = setting_fields(FORWARD_DEPTH, config, FORWARD_DEPTH_KEYS, FORWARD_DEPTH_FIELDS)
    groups = setting_groups(FORWARD_DEPTH, config, "policy")
    spec = DepthCameraSpec(**fields)
    if spec.far <= spec.near:
        raise ConfigError(f"env.forward_depth.far must be metres > near ({spec.near}), got {spec.far!r}")
    return ForwardDepthSetting(groups=groups, spec=spec)


@dataclasses.dataclass(frozen=True, eq=False)
class WithDepthCamera:
    """A Playground env whose `reset` and `step` also store the depth image of the state they
    return, flat `[H * W]`, in `state.info["forward_depth"]`.

    Cast once per state (the batch observes each state twice: as a final and as a next
    observation) and kept in the env state, so a resumed run observes exactly the same. Cast
    with `env.mjx_model` as the env sees it while it steps: under `VecEnv`'s physics binding, the
    env's own randomised model. With `action_repeat > 1` every sub-step casts it (the last one
    is observed). Other attributes are the env's own.
    """

    env: Any  # the Playground env (unwrapped)
    spec: DepthCameraSpec

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("env", "spec"):
            raise AttributeError(name)
        return getattr(self.env, name)

    def with_image(self, state: Any) -> Any:
        image = depth_image(self.spec, self.env.mjx_model, state.data).reshape(-1)
        return state.replace(info={**state.info, FORWARD_DEPTH: image})

    def reset(self, rng: jax.Array) -> Any:
        return self.with_image(self.env.reset(rng))

    def step(self, state: Any, action: jax.Array) -> Any:
        return self.with_image(self.env.step(state, action))


@dataclasses.dataclass(frozen=True, eq=False)
class WithForwardDepth:
    """`observe` with the state's depth image (`info["forward_depth"]`) appended to `groups`."""

    base: Callable[[Any], Observation]
    groups: tuple[str, ...]

    def __call__(self, state: Any) -> Observation:
        obs = dict(self.base(state))
        image = state.info[FORWARD_DEPTH]
        for group in self.groups:
            obs[group] = jnp.concatenate([obs[group], image.astype(obs[group].dtype)], axis=-1)
        return obs


def require_jax_impl(task: str, config: Any) -> None:
    """The depth camera casts rays with `mjx.ray`, which reads MJX's JAX implementation's data
    (`config` None: a user env without a config, which chose its implementation itself)."""
    impl = "jax" if config is None else config.get("impl", "jax")
    if impl != "jax":
        raise ConfigError(
            f"env.forward_depth casts rays with MJX's JAX implementation (mjx.ray); task {task!r} "
            f"runs impl={impl!r}; valid: env.playground.impl=jax (strl_jax's default)"
        )


def with_forward_depth(
    task: str, env: Any, groups: PlaygroundGroups, setting: ForwardDepthSetting
) -> WithDepthCamera:
    """The camera on the task's model: its groups and body (or camera) checked."""
    check_setting_groups(FORWARD_DEPTH, task, groups, setting.groups)
    spec, model = setting.spec, env.mj_model
    key = "camera" if spec.camera else "body"
    try:
        camera_body(spec, env.mjx_model)
    except ValueError:
        name_of, count = (model.camera, model.ncam) if spec.camera else (model.body, model.nbody)
        raise ConfigError(
            f"env.forward_depth.{key}={getattr(spec, key)!r}: task {task!r} has no {key} of that name; "
            f"valid: {[name_of(i).name for i in range(count)]}"
        ) from None
    return WithDepthCamera(env=env, spec=spec)
