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
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from strl_jax.config_sections import FLAG, Rule, accept, choice, inline, integer, key, number, read_section
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


# ---- settings -----------------------------------------------------------------------------------
def _reals(count: int) -> Callable[[Any], tuple[float, ...]]:
    def read(value: Any) -> tuple[float, ...]:
        if not isinstance(value, list | tuple) or len(value) != count:
            raise ValueError
        return tuple(number().read(v) for v in value)

    return read


def _angle_of_view(value: Any) -> float:
    angle = number().read(value)
    if not 0 < angle < 180:
        raise ValueError
    return angle


def _group_flags(value: Any) -> tuple[int, ...]:
    if not isinstance(value, list | tuple) or len(value) not in (0, 6) or not all(v in (0, 1) for v in value):
        raise ValueError
    return tuple(int(v) for v in value)


def _groups(value: Any) -> tuple[str, ...]:
    groups = [value] if isinstance(value, str) else value
    if (
        not isinstance(groups, list | tuple)
        or not groups
        or not all(isinstance(g, str) for g in groups)
        or len(set(groups)) != len(groups)
    ):
        raise ValueError
    return tuple(groups)


def _text(valid: str) -> Rule:
    return accept(lambda v: isinstance(v, str), valid)


COUNT = integer(1)
METRES = number(above=0.0, valid="metres > 0")
GROUPS = Rule(_groups, "a group name or a list of distinct names (policy, critic)")
# `env.height_scan`'s keys that are HeightScanSpec's fields: how each is read and what a valid
# value is
HEIGHT_SCAN_RULES = {
    "num_x": COUNT,
    "num_y": COUNT,
    "resolution": METRES,
    "offset": Rule(_reals(2), "[x, y] in metres"),
    "body": _text('a body name ("" is the root body)'),
    "yaw": choice(hs.YAW_CONVENTIONS),
    "reference_height": number(valid="metres"),
    "clip": METRES,
    "scale": number(above=0.0),
    "mode": choice(hs.MODES),
    "noise": number(minimum=0.0, valid="metres >= 0 at noise level 1"),
    "beyond_edge": choice(hs.BEYOND_EDGE),
}


@dataclasses.dataclass(frozen=True)
class HeightScanSetting:
    """`env.height_scan`, checked: which groups get the scan, of which heightfield geom, how."""

    groups: tuple[str, ...] = key(GROUPS, ("critic",))
    geom: str = key(
        accept(lambda v: isinstance(v, str) and v, "the heightfield geom's name (e.g. floor)"), "floor"
    )
    spec: hs.HeightScanSpec = inline(hs.HeightScanSpec, HEIGHT_SCAN_RULES)


def check_setting_groups(name: str, task: str, groups: PlaygroundGroups, chosen: tuple[str, ...]) -> None:
    """`env.<name>.groups` must name the task's observation groups."""
    valid = [group for group, _ in groups.groups]
    bad = [g for g in chosen if g not in valid]
    if bad:
        raise ConfigError(f"env.{name}.groups: {bad} are not observation groups of {task!r}; valid: {valid}")


def height_scan_setting(config: Any) -> HeightScanSetting | None:
    """`env.height_scan` as a checked setting (None when `{}`: off), before any model loads."""
    return read_section(HeightScanSetting, config, f"env.{HEIGHT_SCAN}") if config else None


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
# `env.forward_depth`'s keys that are DepthCameraSpec's fields: how each is read and what a valid
# value is
FORWARD_DEPTH_RULES = {
    "height": Rule(COUNT.read, "an integer >= 1 (pixels)"),
    "width": Rule(COUNT.read, "an integer >= 1 (pixels)"),
    "horizontal_fov": Rule(_angle_of_view, "degrees in (0, 180)"),
    "near": number(minimum=0.0, valid="metres >= 0"),
    "far": number(above=0.0, valid="metres > near"),
    "offset": number(valid="a number (added after scaling depth to [0, 1])"),
    "body": _text("the name of the body the camera sits on"),
    "position": Rule(_reals(3), "[x, y, z] in metres in the body's frame"),
    "pitch": number(valid="radians (positive looks down)"),
    "camera": _text('an MJCF camera name ("" places the camera on body)'),
    "geomgroup": Rule(_group_flags, "[] (every geom group) or 6 flags 0/1, as mj_ray's geomgroup"),
    "exclude_robot": FLAG,
    "hfield_steps": COUNT,
    "hfield_refine": COUNT,
}


@dataclasses.dataclass(frozen=True)
class ForwardDepthSetting:
    """`env.forward_depth`, checked: which groups get the image, and the camera."""

    groups: tuple[str, ...] = key(GROUPS, ("policy",))
    spec: DepthCameraSpec = inline(DepthCameraSpec, FORWARD_DEPTH_RULES)

    def check(self, where: str) -> None:
        if self.spec.far <= self.spec.near:
            raise ConfigError(f"{where}.far must be metres > near ({self.spec.near}), got {self.spec.far!r}")


def forward_depth_setting(config: Any) -> ForwardDepthSetting | None:
    """`env.forward_depth` as a checked setting (None when `{}`: off), before any model loads."""
    return read_section(ForwardDepthSetting, config, f"env.{FORWARD_DEPTH}") if config else None


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
