"""AMP observation frames as pure functions of a Brax physics state (`brax_state.pipeline_state`).

A frame is a feature vector of named components; the AMP observation of a transition is the
pair `concat(frame(s), frame(s'))` (`strl_jax.buffers.motion.amp_observation`). Only fields that
every Brax backend (generalized, positional, spring, mjx) fills are read: `q`, `qd` and the
link transforms/velocities `x.pos`, `x.rot`, `xd.vel`, `xd.ang` (world frame; link 0 is the root).

The root is link 0 with its joint's degrees of freedom: a free joint (7 entries of q, 6 of qd:
ant, humanoid) or the planar slide-x / slide-z / hinge-y triple (hopper, walker2d, halfcheetah).
"Joints" are the q/qd entries after the root's.

Root quantities are expressed in the *heading frame*: the world frame turned by the root's yaw
(the heading of its x axis projected on the ground), so that a motion and the same motion facing
another direction give the same frame, as in AMP (Peng et al. 2021). Planar roots cannot yaw;
their heading frame is the world frame.

Components:
- `root_height` (1): world z of the root.
- `root_rot` (6): tangent-normal encoding of the root orientation in the heading frame, the
  root's x and z axes as heading-frame vectors (AMP's encoding; continuous, unlike angles).
- `projected_gravity` (3): the unit gravity direction in the root's own frame (legged_gym's
  projected gravity; no yaw to remove).
- `root_lin_vel`, `root_ang_vel` (3 each): root linear / angular velocity in the heading frame.
- `joint_pos`, `joint_vel`: joint positions and velocities.
- `link_pos` (3 per non-root link): link positions relative to the root, in the heading frame
  (AMP's key-body positions, here for every link).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import brax.envs
import jax
import jax.numpy as jnp
from brax import math as bmath

COMPONENTS = (
    "root_height",
    "root_rot",
    "projected_gravity",
    "root_lin_vel",
    "root_ang_vel",
    "joint_pos",
    "joint_vel",
    "link_pos",
)
DEFAULT_COMPONENTS = ("root_height", "root_rot", "root_lin_vel", "root_ang_vel", "joint_pos", "joint_vel")
# Tasks whose root moves freely (free joint) or in the sagittal plane get the AMP paper's frame.
TASK_DEFAULTS: dict[str, tuple[str, ...]] = {
    task: DEFAULT_COMPONENTS
    for task in ("ant", "humanoid", "humanoidstandup", "hopper", "walker2d", "halfcheetah")
}


@dataclasses.dataclass(frozen=True)
class BodyLayout:
    """Where the root and the joints live in a Brax system's q / qd and links."""

    root_q: int  # q entries of the root's joint: 7 free, 3 planar
    root_qd: int  # qd entries of the root's joint: 6 free, 3 planar
    free_root: bool
    q_size: int
    qd_size: int
    num_links: int


# Read from each env's system (`sys.link_types`, `q_size()`, `qd_size()`); checked by the tests.
KNOWN_LAYOUTS: dict[str, BodyLayout] = {
    "ant": BodyLayout(7, 6, True, 15, 14, 9),
    "humanoid": BodyLayout(7, 6, True, 24, 23, 11),
    "hopper": BodyLayout(3, 3, False, 6, 6, 4),
    "walker2d": BodyLayout(3, 3, False, 9, 9, 7),
    "halfcheetah": BodyLayout(3, 3, False, 9, 9, 7),
}


def layout_from_system(sys: Any) -> BodyLayout:
    """The layout of any Brax system: the root is link 0 and its joint's degrees of freedom."""
    root_type = sys.link_types[0]
    if root_type == "f":
        root_q, root_qd, free = 7, 6, True
    elif root_type.isdigit():
        root_q = root_qd = int(root_type)
        free = False
    else:
        raise ValueError(f"unsupported root joint type {root_type!r} (link types {sys.link_types!r})")
    return BodyLayout(root_q, root_qd, free, int(sys.q_size()), int(sys.qd_size()), len(sys.link_types))


@functools.cache
def body_layout(env_name: str) -> BodyLayout:
    """The layout of a Brax task (tabulated for the common ones, else read from its system)."""
    if env_name in KNOWN_LAYOUTS:
        return KNOWN_LAYOUTS[env_name]
    try:
        env = brax.envs.get_environment(env_name)
    except KeyError:
        raise ValueError(
            f"unknown task {env_name!r}; valid tasks: {sorted(brax.envs._envs)}"  # noqa: SLF001
        ) from None
    return layout_from_system(env.sys)


def component_size(name: str, layout: BodyLayout) -> int:
    sizes = {
        "root_height": 1,
        "root_rot": 6,
        "projected_gravity": 3,
        "root_lin_vel": 3,
        "root_ang_vel": 3,
        "joint_pos": layout.q_size - layout.root_q,
        "joint_vel": layout.qd_size - layout.root_qd,
        "link_pos": 3 * (layout.num_links - 1),
    }
    return sizes[name]


def resolve_components(env_name: str, components: Sequence[str] | None) -> tuple[str, ...]:
    """The given components, checked, or the task's default list."""
    if components is None:
        if env_name not in TASK_DEFAULTS:
            raise ValueError(
                f"task {env_name!r} has no default AMP observation; name its components "
                f"(valid: {list(COMPONENTS)}); tasks with defaults: {sorted(TASK_DEFAULTS)}"
            )
        return TASK_DEFAULTS[env_name]
    components = tuple(components)
    if not components:
        raise ValueError(f"the AMP observation needs at least one component; valid: {list(COMPONENTS)}")
    unknown = [c for c in components if c not in COMPONENTS]
    if unknown:
        raise ValueError(
            f"unknown AMP observation component {unknown[0]!r}; valid components: {list(COMPONENTS)}"
        )
    if len(set(components)) != len(components):
        raise ValueError(f"AMP observation components repeat a name: {list(components)}")
    return components


def amp_observation_size(env_name: str, components: Sequence[str] | None = None) -> int:
    """Size of one AMP frame of `env_name` (the AMP observation of a transition is twice this)."""
    layout = body_layout(env_name)
    return sum(component_size(c, layout) for c in resolve_components(env_name, components))


def heading_quat(rot: jax.Array, free_root: bool) -> jax.Array:
    """The yaw-only rotation of the root's heading (identity for planar roots)."""
    if not free_root:
        return jnp.array([1.0, 0.0, 0.0, 0.0], rot.dtype)
    forward = bmath.rotate(jnp.array([1.0, 0.0, 0.0], rot.dtype), rot)
    half_yaw = 0.5 * jnp.arctan2(forward[1], forward[0])
    return jnp.stack(
        [jnp.cos(half_yaw), jnp.zeros_like(half_yaw), jnp.zeros_like(half_yaw), jnp.sin(half_yaw)]
    )


def make_amp_observation(
    env_name: str, components: Sequence[str] | None = None
) -> Callable[[Any], jax.Array]:
    """`frame(pipeline_state) -> [amp_observation_size]` for one (unbatched) Brax physics state."""
    layout = body_layout(env_name)
    names = resolve_components(env_name, components)

    def frame(ps: Any) -> jax.Array:
        pos, rot = ps.x.pos[0], ps.x.rot[0]
        heading = heading_quat(rot, layout.free_root)
        to_heading = lambda v: bmath.inv_rotate(v, heading)
        parts = {
            "root_height": lambda: pos[2:3],
            "root_rot": lambda: _tangent_normal(bmath.quat_mul(bmath.quat_inv(heading), rot)),
            "projected_gravity": lambda: bmath.inv_rotate(jnp.array([0.0, 0.0, -1.0], rot.dtype), rot),
            "root_lin_vel": lambda: to_heading(ps.xd.vel[0]),
            "root_ang_vel": lambda: to_heading(ps.xd.ang[0]),
            "joint_pos": lambda: ps.q[layout.root_q :],
            "joint_vel": lambda: ps.qd[layout.root_qd :],
            "link_pos": lambda: jax.vmap(to_heading)(ps.x.pos[1:] - pos).reshape(-1),
        }
        return jnp.concatenate([parts[name]() for name in names]).astype(jnp.float32)

    return frame


def _tangent_normal(rot: jax.Array) -> jax.Array:
    tangent = bmath.rotate(jnp.array([1.0, 0.0, 0.0], rot.dtype), rot)
    normal = bmath.rotate(jnp.array([0.0, 0.0, 1.0], rot.dtype), rot)
    return jnp.concatenate([tangent, normal])


@dataclasses.dataclass(frozen=True)
class WithAmpObservation:
    """An env observation function (`brax_state -> {group: array}`) extended by an `amp` group.

    Fits `VecEnv.observe`: on a step that ends an episode the env keeps the observation of
    the state reached before the reset (`final_obs`), so the pre-reset AMP frame comes with it.
    Works on one state or a batch of states (leading env axis).
    """

    base: Callable[[Any], dict]  # hashable, e.g. `ObservationGroups`
    task: str
    components: tuple[str, ...] | None = None
    group: str = "amp"

    def __call__(self, brax_state: Any) -> dict:
        obs = dict(self.base(brax_state))
        frame = make_amp_observation(self.task, self.components)
        ps = brax_state.pipeline_state
        obs[self.group] = jax.vmap(frame)(ps) if ps.q.ndim > 1 else frame(ps)
        return obs
