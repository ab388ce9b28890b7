"""A forward depth image from MJX ray casts (st_rl / legged_gym parkour's `forward_depth`).

A camera rigidly attached to a robot body (or an MJCF camera) casts one ray per pixel through a
pinhole; the image is the *z-depth* of the first surface each ray meets (the distance along the
camera's optical axis, as Isaac Gym's depth camera that legged_gym uses renders it), clipped to
`[near, far]` and normalised to `(depth - near) / (far - near) + offset`: `[0, 1]` by default as
st_rl's parkour does, `offset=-0.5` gives extreme parkour's `[-0.5, 0.5]`. A ray that meets
nothing reads `far`.

Geometry:
- planes, spheres, capsules, ellipsoids, boxes and meshes go through `mujoco.mjx.ray` (MJX's JAX
  ray cast; it skips cylinders and heightfields, and geoms whose colour or material alpha is 0);
- heightfields, which `mjx.ray` ignores and rough terrains are made of, are cast here against
  MuJoCo's own triangulated surface (`height_scan.surface_height`, as `mj_rayHfield` splits each
  grid cell): `hfield_steps` uniform samples of the ray's stretch between the field's lowest and
  highest vertex find the first sample below the surface, `hfield_refine` samples inside that
  bracket narrow it, and a secant step places the hit. That is exact (to float32) when the final
  bracket holds one crossing within one triangle, and can miss a bump thinner than one sample
  step that the ray grazes; the field's side walls and base are not cast.
- the robot's own geoms (every body with the camera body's root) are excluded by default, as a
  head camera looking forward and down seldom sees its own legs and excluding them avoids
  casting against the robot's meshes.

Camera frame: x forward (the optical axis), y left, z up. A body camera sits at `position` on
the body and is pitched down by `pitch` radians about the body's y axis. An MJCF camera (looking
along its -z with y up, MuJoCo's convention) is used as is. Pixels are row-major from the top
left: row 0 is the top of the image (farther away when pitched down), column 0 its left.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from strl_jax.envs import height_scan as hs

OBJ_BODY = 1  # mujoco.mjtObj.mjOBJ_BODY
OBJ_CAMERA = 7  # mujoco.mjtObj.mjOBJ_CAMERA
# MJCF camera axes (x right, y up, z backwards) of the camera-frame axes (forward, left, up).
MJCF_FROM_CAMERA = np.array([[0.0, -1.0, 0.0], [0.0, 0.0, 1.0], [-1.0, 0.0, 0.0]])


@struct.dataclass
class DepthCameraSpec:
    """A depth camera: image size, optics, where it sits and what it sees.

    Defaults are a Go1 head camera in the style of legged_gym parkour: on the trunk 0.27 m ahead
    and 0.03 m up, pitched down 0.4 rad (about 23 degrees), a RealSense-like 87 degree horizontal
    field of view (square pixels, so about 71 degrees vertically at 4:3), depth in [0, 2] m.
    """

    height: int = struct.field(pytree_node=False, default=24)
    width: int = struct.field(pytree_node=False, default=32)
    horizontal_fov: float = struct.field(pytree_node=False, default=87.0)  # degrees
    near: float = struct.field(pytree_node=False, default=0.0)
    far: float = struct.field(pytree_node=False, default=2.0)
    offset: float = struct.field(pytree_node=False, default=0.0)  # added after scaling to [0, 1]
    body: str = struct.field(pytree_node=False, default="trunk")
    position: tuple[float, float, float] = struct.field(pytree_node=False, default=(0.27, 0.0, 0.03))
    pitch: float = struct.field(pytree_node=False, default=0.4)  # radians, positive looks down
    camera: str = struct.field(pytree_node=False, default="")  # an MJCF camera instead of body/pose
    geomgroup: tuple[int, ...] = struct.field(pytree_node=False, default=())  # 6 flags as mj_ray; () all
    exclude_robot: bool = struct.field(pytree_node=False, default=True)
    hfield_steps: int = struct.field(pytree_node=False, default=16)
    hfield_refine: int = struct.field(pytree_node=False, default=8)

    @property
    def shape(self) -> tuple[int, int, int]:
        return (1, self.height, self.width)


def camera_rays(spec: DepthCameraSpec) -> np.ndarray:
    """Pinhole ray directions `[H, W, 3]` in the camera frame (x forward, y left, z up).

    Each direction has forward component 1, so a ray cast's distance parameter is the z-depth.
    Pixels are square and sampled at their centres; row 0 is the top, column 0 the left.
    """
    pixel = 2.0 * np.tan(np.deg2rad(spec.horizontal_fov) / 2.0) / spec.width
    right = (np.arange(spec.width) + 0.5 - spec.width / 2.0) * pixel
    down = (np.arange(spec.height) + 0.5 - spec.height / 2.0) * pixel
    d, r = np.meshgrid(down, right, indexing="ij")
    return np.stack([np.ones_like(r), -r, -d], axis=-1).astype(np.float32)


def _pitch_matrix(pitch: float) -> np.ndarray:
    """Rotation about y by `pitch` (positive turns x towards -z: looking down)."""
    c, s = np.cos(pitch), np.sin(pitch)
    return np.array([[c, 0.0, s], [0.0, 1.0, 0.0], [-s, 0.0, c]])


def _name_id(m: Any, obj: int, name: str) -> int:
    from mujoco import mjx  # noqa: PLC0415 - MuJoCo is an optional dependency

    i = mjx.name2id(m, obj, name)
    if i < 0:
        kind = "camera" if obj == OBJ_CAMERA else "body"
        raise ValueError(f"the model has no {kind} named {name!r}")
    return i


def camera_body(spec: DepthCameraSpec, m: Any) -> int:
    """The body the camera moves with (an MJCF camera's body, or `spec.body`)."""
    if spec.camera:
        return int(m.cam_bodyid[_name_id(m, OBJ_CAMERA, spec.camera)])
    return _name_id(m, OBJ_BODY, spec.body)


def camera_pose(spec: DepthCameraSpec, m: Any, d: Any) -> tuple[jax.Array, jax.Array]:
    """World position `(3,)` and rotation `(3, 3)` (columns: forward, left, up) of the camera."""
    if spec.camera:
        cam = _name_id(m, OBJ_CAMERA, spec.camera)
        return d.cam_xpos[cam], d.cam_xmat[cam] @ jnp.asarray(MJCF_FROM_CAMERA, d.cam_xmat.dtype)
    body = camera_body(spec, m)
    rot = d.xmat[body]
    pos = d.xpos[body] + rot @ jnp.asarray(spec.position, rot.dtype)
    return pos, rot @ jnp.asarray(_pitch_matrix(spec.pitch), rot.dtype)


def excluded_bodies(spec: DepthCameraSpec, m: Any) -> tuple[int, ...]:
    """Bodies the rays pass through: the camera's whole robot (same root body), or none."""
    if not spec.exclude_robot:
        return ()
    root = m.body_rootid[camera_body(spec, m)]
    return tuple(int(b) for b in np.flatnonzero(np.asarray(m.body_rootid) == root) if b != 0)


def visible_hfields(spec: DepthCameraSpec, m: Any) -> list[int]:
    """Heightfield geoms the camera sees (group mask and robot exclusion as `mjx.ray`; unlike it,
    an invisible heightfield, alpha 0, is still seen: colours may be randomised per env)."""
    keep = np.asarray(m.geom_type) == hs.HFIELD_GEOM
    keep &= ~np.isin(np.asarray(m.geom_bodyid), excluded_bodies(spec, m))
    if spec.geomgroup:
        groups = np.array(spec.geomgroup, dtype=bool)
        keep &= groups[np.clip(np.asarray(m.geom_group), 0, groups.size - 1)]
    return [int(g) for g in np.flatnonzero(keep)]


def pick(values: jax.Array, index: jax.Array) -> jax.Array:
    """`values[index]` as a masked sum: under `vmap` on a CPU that fuses where a gather does not."""
    return jnp.sum(jnp.where(jnp.arange(values.shape[-1]) == index, values, 0.0), axis=-1)


def ray_hfield(spec: DepthCameraSpec, m: Any, d: Any, geom: int, pnt: jax.Array, vec: jax.Array) -> jax.Array:
    """Ray parameter `t` of the first crossing of heightfield geom `geom` in `[0, far]` (`pnt + t
    vec`), inf for none.

    The surface lies in the slab between the field's lowest and highest vertex, so the samples
    only cover the ray's stretch inside it (a few centimetres of a downward ray on gentle
    terrain): they bracket the first crossing, `hfield_refine` samples of the bracket narrow it
    and a secant step places it (samples vectorise; bisection's dependent steps cost more).
    """
    hfield = int(m.geom_dataid[geom])
    corners = hs.cell_corners(hs.hfield_elevation(m, hfield))
    half_size = tuple(float(v) for v in np.asarray(m.hfield_size[hfield])[:2])
    bottom, top = jnp.min(corners), jnp.max(corners)
    rot = d.geom_xmat[geom]
    lpnt, lvec = rot.T @ (pnt - d.geom_xpos[geom]), rot.T @ vec

    def gap(t: jax.Array) -> tuple[jax.Array, jax.Array]:
        p = lpnt + t[..., None] * lvec
        h, inside = hs.surface_height(corners, half_size, p[..., 0], p[..., 1])
        return p[..., 2] - h, inside

    down = lvec[2] < 0
    rate = jnp.where(down, -lvec[2], 1.0)
    enter = jnp.where(down, (lpnt[2] - top) / rate, jnp.where(lpnt[2] <= top, 0.0, jnp.inf))
    leave = jnp.where(down, (lpnt[2] - bottom) / rate, jnp.inf)
    t0, t1 = jnp.clip(enter, 0.0, spec.far), jnp.clip(leave, 0.0, spec.far)
    n = spec.hfield_steps
    g, inside = gap(t0 + (t1 - t0) * jnp.linspace(0.0, 1.0, n + 1, dtype=pnt.dtype))
    below = (g <= 0) & inside
    k = jnp.argmax(below)
    found = jnp.any(below) & ((k > 0) | (t0 > 0))  # a camera under the terrain sees nothing of it
    k = jnp.maximum(k, 1)
    lo, hi = t0 + (t1 - t0) * (k - 1) / n, t0 + (t1 - t0) * k / n
    g_lo, g_hi = pick(g, k - 1), pick(g, k)
    if spec.hfield_refine > 1:  # the same search again inside the bracket
        n = spec.hfield_refine
        g = jnp.concatenate(
            [g_lo[None], gap(lo + (hi - lo) * jnp.linspace(0.0, 1.0, n + 1, dtype=lo.dtype)[1:])[0]]
        )
        k = jnp.maximum(jnp.argmax(g <= 0), 1)
        lo, hi = lo + (hi - lo) * (k - 1) / n, lo + (hi - lo) * k / n
        g_lo, g_hi = pick(g, k - 1), pick(g, k)
    t = lo + (hi - lo) * g_lo / jnp.maximum(g_lo - g_hi, 1e-12)
    return jnp.where(found, jnp.where(g_lo > 0, t, lo), jnp.inf)


def ray_depth(spec: DepthCameraSpec, m: Any, d: Any, pnt: jax.Array, vec: jax.Array) -> jax.Array:
    """Ray parameter of the first surface the world ray `pnt + t vec` meets, inf for none."""
    from mujoco import mjx  # noqa: PLC0415 - MuJoCo is an optional dependency

    exclude = excluded_bodies(spec, m)
    # mjx.ray indexes the material colours even when no geom has a material.
    cast = m.replace(mat_rgba=jnp.ones((1, 4), jnp.float32)) if m.mat_rgba.shape[0] == 0 else m
    dist, _ = mjx.ray(cast, d, pnt, vec, geomgroup=spec.geomgroup, bodyexclude=exclude or -1)
    t = jnp.where(dist < 0, jnp.inf, dist)
    for geom in visible_hfields(spec, m):
        t = jnp.minimum(t, ray_hfield(spec, m, d, geom, pnt, vec))
    return t


def normalise_depth(spec: DepthCameraSpec, depth: jax.Array) -> jax.Array:
    """`(clip(depth, near, far) - near) / (far - near) + offset`; inf (a miss) reads far."""
    clipped = jnp.clip(depth, spec.near, spec.far)
    return (clipped - spec.near) / (spec.far - spec.near) + spec.offset


def depth_metres(spec: DepthCameraSpec, m: Any, d: Any) -> jax.Array:
    """Unclipped z-depth `[H, W]` in metres of one env (inf where a ray meets nothing)."""
    pos, rot = camera_pose(spec, m, d)
    dirs = jnp.asarray(camera_rays(spec), pos.dtype).reshape(-1, 3) @ rot.T
    depth = jax.vmap(lambda v: ray_depth(spec, m, d, pos, v))(dirs)
    return depth.reshape(spec.height, spec.width)


def depth_image(spec: DepthCameraSpec, m: Any, d: Any) -> jax.Array:
    """The normalised depth image `[1, H, W]` of one env (`jax.vmap` it over a batch)."""
    return normalise_depth(spec, depth_metres(spec, m, d))[None]
