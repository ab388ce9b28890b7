"""Terrain heights on a grid of points around a robot's base (legged_gym's `measured_heights`).

A rough-terrain task's ground is one static MuJoCo heightfield, so the scan reads it exactly
instead of casting rays: `heightfield_of` copies the field once from the `MjModel`, and
`terrain_heights` evaluates MuJoCo's own surface at any world `(x, y)` with one gather of a
cell's corners per point (`surface_height`, shared with the depth camera's heightfield ray cast).
MuJoCo splits every grid cell `(r, c)` into two triangles along the diagonal from vertex `(r, c)`
to `(r + 1, c + 1)` (its ray casts, `mj_rayHfield`, and MJX's hfield collisions use the same two
triangles), so the surface is piecewise planar; bilinear interpolation of the four corners is
not it. MJX's `ray` has no heightfield case.

Conventions follow legged_gym:
- the grid is `num_x` x `num_y` points `resolution` apart, centred on the base plus `offset`, in
  the base's *heading frame*: rotated by the base's yaw only, so pitch and roll never move the
  points; the heading is the direction of the base's x axis projected on the ground (`yaw="heading"`)
  or legged_gym's `quat_apply_yaw` twist angle `2 atan2(qz, qw)` (`yaw="twist"`); both agree when
  roll or pitch is zero;
- point `k = i * num_y + j` sits at `(x_i, y_j)` (`torch.meshgrid(x, y)` flattened, x outer), so
  `height_image` is a `[1, num_x, num_y]` image with rows along the heading and columns to the side;
- the observation is `clip(base_z - reference_height - heights, -clip, clip) * scale`, and the
  policy's noisy view adds `U(-1, 1) * level * noise * scale` (legged_gym's noise vector,
  Playground's uniform noise convention).

Past the field's edge there is no ground in a task whose floor is the field alone (Playground's
rough-terrain tasks: a robot that walks off falls off the world). With `beyond_edge="void"` (the
default) a point there reads the deepest ground the scan reports, `clip` metres below the
reference (the observation's `clip * scale`, as a gap deeper than the clip reads in legged_gym),
as the depth camera's rays miss there. `"edge"` reads the field's nearest edge point instead,
as legged_gym clips its height-sample indices; there the field is ringed by a wide flat border
(`border_size`), so that reading is the ground a robot stands on.

Quaternions are MuJoCo's `(w, x, y, z)`.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

HFIELD_GEOM = 1  # mujoco.mjtGeom.mjGEOM_HFIELD
FREE_JOINT = 0  # mujoco.mjtJoint.mjJNT_FREE
YAW_CONVENTIONS = ("heading", "twist")
MODES = ("legged_gym", "heights")
BEYOND_EDGE = ("void", "edge")


@struct.dataclass
class HeightScanSpec:
    """Where to measure and how to normalise (legged_gym's 17 x 11 grid at 0.1 m by default)."""

    num_x: int = struct.field(pytree_node=False, default=17)
    num_y: int = struct.field(pytree_node=False, default=11)
    resolution: float = struct.field(pytree_node=False, default=0.1)
    offset: tuple[float, float] = struct.field(pytree_node=False, default=(0.0, 0.0))
    body: str = struct.field(pytree_node=False, default="")  # the base; "" means the task's root body
    yaw: str = struct.field(pytree_node=False, default="heading")  # or "twist" (legged_gym)
    reference_height: float = struct.field(pytree_node=False, default=0.5)
    clip: float = struct.field(pytree_node=False, default=1.0)
    scale: float = struct.field(pytree_node=False, default=5.0)
    # "legged_gym": the normalised clearance (`height_observation`); "heights": world heights.
    mode: str = struct.field(pytree_node=False, default="legged_gym")
    noise: float = struct.field(pytree_node=False, default=0.1)  # metres at noise level 1 (legged_gym)
    # What a point past the field's edge reads: "void" (no ground) or "edge" (legged_gym's clip).
    beyond_edge: str = struct.field(pytree_node=False, default="void")

    @property
    def num_points(self) -> int:
        return self.num_x * self.num_y


@struct.dataclass
class HeightField:
    """A static MuJoCo heightfield as world-frame constants.

    `elevation[r, c]` is vertex `(r, c)`'s height above the geom's origin (MuJoCo's normalised
    data times `elevation_z`); row `r` runs along the geom's y axis, column `c` along its x axis.
    `rotation` is the geom's yaw as `(cos, sin)`; the geom's z axis must point up.
    """

    elevation: jax.Array  # [nrow, ncol]
    corners: jax.Array  # [nrow - 1, ncol - 1, 4]: `cell_corners(elevation)`
    size: jax.Array  # (radius_x, radius_y, elevation_z, base_z) as in `hfield_size`
    pos: jax.Array  # (3,) the geom's world position
    rotation: jax.Array  # (2,) cos and sin of the geom's yaw


def heightfield_of(mj_model: Any, name: str) -> HeightField:
    """The heightfield of geom `name`, or of the one geom using hfield asset `name`.

    The geom must be static (welded to the world) with its z axis vertical: its pose is read
    once, at the model's reference configuration.
    """
    import mujoco  # noqa: PLC0415 - MuJoCo is an optional dependency

    geom = mujoco.mj_name2id(mj_model, mujoco.mjtObj.mjOBJ_GEOM, name)
    if geom < 0 or int(mj_model.geom_type[geom]) != HFIELD_GEOM:
        hfield = mujoco.mj_name2id(mj_model, mujoco.mjtObj.mjOBJ_HFIELD, name)
        users = np.flatnonzero((mj_model.geom_type == HFIELD_GEOM) & (mj_model.geom_dataid == hfield))
        if hfield < 0 or users.size != 1:
            fields = [mj_model.geom(int(g)).name for g in np.flatnonzero(mj_model.geom_type == HFIELD_GEOM)]
            raise ValueError(
                f"{name!r} names no heightfield geom (or hfield used by one geom); geoms: {fields}"
            )
        geom = int(users[0])
    if int(mj_model.body_weldid[mj_model.geom_bodyid[geom]]) != 0:
        raise ValueError(f"heightfield geom {name!r} moves with its body; only static terrain is supported")
    data = mujoco.MjData(mj_model)
    mujoco.mj_kinematics(mj_model, data)
    mat = data.geom_xmat[geom].reshape(3, 3)
    if not np.allclose(mat[:, 2], (0.0, 0.0, 1.0), atol=1e-9):
        raise ValueError(f"heightfield geom {name!r} is tilted; only a vertical z axis is supported")
    hfield = int(mj_model.geom_dataid[geom])
    size = np.asarray(mj_model.hfield_size[hfield], np.float64)
    elevation = jnp.asarray(hfield_elevation(mj_model, hfield), jnp.float32)
    return HeightField(
        elevation=elevation,
        corners=cell_corners(elevation),
        size=jnp.asarray(size, jnp.float32),
        pos=jnp.asarray(data.geom_xpos[geom], jnp.float32),
        rotation=jnp.asarray([mat[0, 0], mat[1, 0]], jnp.float32),
    )


def hfield_elevation(model: Any, hfield: int) -> Any:
    """Vertex heights `[nrow, ncol]` above the geom's origin of heightfield asset `hfield`:
    MuJoCo's normalised data times `elevation_z`, from an `MjModel` (NumPy, float64) or an
    `mjx.Model` (JAX)."""
    nrow, ncol = int(model.hfield_nrow[hfield]), int(model.hfield_ncol[hfield])
    adr = int(model.hfield_adr[hfield])
    scale = np.asarray(model.hfield_size[hfield], np.float64)[2]
    data = model.hfield_data[adr : adr + nrow * ncol].reshape(nrow, ncol)
    return np.asarray(data, np.float64) * scale if isinstance(data, np.ndarray) else data * float(scale)


def cell_corners(elevation: jax.Array) -> jax.Array:
    """Heights `[nrow - 1, ncol - 1, 4]` of each grid cell's corners `(r, c), (r, c + 1),
    (r + 1, c), (r + 1, c + 1)`: a surface point then costs one gather instead of four (gathers
    under `vmap` dominate on a CPU)."""
    e = elevation
    return jnp.stack([e[:-1, :-1], e[:-1, 1:], e[1:, :-1], e[1:, 1:]], axis=-1)


def surface_height(
    corners: jax.Array, half_size: Any, x: jax.Array, y: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """MuJoCo's triangulated surface above the geom's origin at local `(x, y)` (metres in the
    geom's frame), and whether the point lies over the field.

    `corners` are `cell_corners` of the elevation, `half_size` the field's `(radius_x, radius_y)`.
    In cell `(r, c)` with fractions `(u, v)` along x and y the surface is the triangle
    `(0,0) (1,0) (1,1)` where `u >= v`, else `(0,0) (1,1) (0,1)`. A point outside the field reads
    the field's nearest edge point, as legged_gym clips its height-sample indices.
    """
    rows, cols = corners.shape[0], corners.shape[1]  # cells: one fewer than vertices
    # Continuous grid coordinates: column along x, row along y.
    gx = (x + half_size[0]) * (cols / (2 * half_size[0]))
    gy = (y + half_size[1]) * (rows / (2 * half_size[1]))
    inside = (gx >= 0) & (gx <= cols) & (gy >= 0) & (gy <= rows)
    gx, gy = jnp.clip(gx, 0.0, float(cols)), jnp.clip(gy, 0.0, float(rows))
    c = jnp.clip(jnp.floor(gx).astype(jnp.int32), 0, cols - 1)
    r = jnp.clip(jnp.floor(gy).astype(jnp.int32), 0, rows - 1)
    u, v = gx - c, gy - r
    h = corners[r, c]
    h00, h11 = h[..., 0], h[..., 3]
    # Below the diagonal (u >= v): the triangle through vertex (r, c + 1), else through (r + 1, c).
    side = jnp.where(u >= v, h[..., 1], h[..., 2])
    # Barycentric weights: (1 - max, max - min, min) over (h00, side, h11).
    big, small = jnp.maximum(u, v), jnp.minimum(u, v)
    return h00 + big * (side - h00) + small * (h11 - side), inside


def terrain_surface(hfield: HeightField, points_xy: jax.Array) -> tuple[jax.Array, jax.Array]:
    """World z of MuJoCo's heightfield surface below world points `[..., 2]` -> `[...]`, and
    whether each point lies over the field (`surface_height` in the field's frame; a point
    outside reads the nearest edge point)."""
    cos, sin = hfield.rotation[0], hfield.rotation[1]
    d = points_xy - hfield.pos[:2]
    local_x = cos * d[..., 0] + sin * d[..., 1]
    local_y = -sin * d[..., 0] + cos * d[..., 1]
    height, inside = surface_height(hfield.corners, hfield.size, local_x, local_y)
    return hfield.pos[2] + height, inside


def terrain_heights(hfield: HeightField, points_xy: jax.Array) -> jax.Array:
    """World z of the surface below world points `[..., 2]` -> `[...]` (`terrain_surface`; a
    point outside reads the nearest edge point)."""
    return terrain_surface(hfield, points_xy)[0]


def grid_points(spec: HeightScanSpec) -> np.ndarray:
    """The scan's `[num_points, 2]` points in the heading frame, x outer (legged_gym's order)."""
    x = (np.arange(spec.num_x) - (spec.num_x - 1) / 2) * spec.resolution + spec.offset[0]
    y = (np.arange(spec.num_y) - (spec.num_y - 1) / 2) * spec.resolution + spec.offset[1]
    gx, gy = np.meshgrid(x, y, indexing="ij")
    return np.stack([gx.ravel(), gy.ravel()], axis=-1).astype(np.float32)


def base_yaw(quat: jax.Array, convention: str = "heading") -> jax.Array:
    """The base's yaw from a `(w, x, y, z)` quaternion: the heading of its x axis, or legged_gym's
    twist about the world z axis (`quat_apply_yaw` zeroes qx, qy and renormalises)."""
    w, x, y, z = quat[..., 0], quat[..., 1], quat[..., 2], quat[..., 3]
    if convention == "heading":
        # R[1, 0] and R[0, 0] times |q|^2: exact for a quaternion that is not quite unit.
        return jnp.arctan2(2.0 * (w * z + x * y), w * w + x * x - y * y - z * z)
    if convention == "twist":
        return 2.0 * jnp.arctan2(z, w)
    raise ValueError(f"unknown yaw convention {convention!r}; valid: {YAW_CONVENTIONS}")


def scan_points(spec: HeightScanSpec, base_pos: jax.Array, base_quat: jax.Array) -> jax.Array:
    """World `[..., num_points, 2]` points of the grid around bases `[..., 3]`, `[..., 4]`
    (heading frame: turned by the yaw only)."""
    yaw = base_yaw(base_quat, spec.yaw)[..., None]
    cos, sin = jnp.cos(yaw), jnp.sin(yaw)
    local = jnp.asarray(grid_points(spec))
    x = cos * local[:, 0] - sin * local[:, 1] + base_pos[..., 0:1]
    y = sin * local[:, 0] + cos * local[:, 1] + base_pos[..., 1:2]
    return jnp.stack([x, y], axis=-1)


def height_scan(
    spec: HeightScanSpec, hfield: HeightField, base_pos: jax.Array, base_quat: jax.Array
) -> jax.Array:
    """World terrain heights `[..., num_points]` at the grid around bases `[..., 3]`, `[..., 4]`
    (legged_gym's `measured_heights`); one env or a batch alike. Points past the field's edge
    read as `spec.beyond_edge` says: with "void", `clip` metres below the base's reference."""
    heights, inside = terrain_surface(hfield, scan_points(spec, base_pos, base_quat))
    if spec.beyond_edge == "edge":
        return heights
    if spec.beyond_edge == "void":
        void = base_pos[..., 2:3] - spec.reference_height - spec.clip
        return jnp.where(inside, heights, void)
    raise ValueError(f"unknown height scan beyond_edge {spec.beyond_edge!r}; valid: {BEYOND_EDGE}")


def height_observation(spec: HeightScanSpec, heights: jax.Array, base_z: jax.Array) -> jax.Array:
    """legged_gym's observation of `heights` `[..., num_points]` below a base at height `base_z`
    `[...]`: the base's clearance above each point minus `reference_height`, clipped and scaled."""
    clearance = jnp.expand_dims(base_z, -1) - spec.reference_height - heights
    return jnp.clip(clearance, -spec.clip, spec.clip) * spec.scale


def height_image(scan: jax.Array, spec: HeightScanSpec) -> jax.Array:
    """A scan `[..., num_points]` as an image `[..., 1, num_x, num_y]` for a Conv2d encoder: row i
    is the i-th x (backwards to forwards), column j the j-th y (right to left)."""
    return scan.reshape(*scan.shape[:-1], 1, spec.num_x, spec.num_y)


def scan_observation(
    spec: HeightScanSpec, hfield: HeightField, base_pos: jax.Array, base_quat: jax.Array
) -> jax.Array:
    """The scan as `spec.mode` observes it, `[..., num_points]`."""
    heights = height_scan(spec, hfield, base_pos, base_quat)
    if spec.mode == "heights":
        return heights
    if spec.mode == "legged_gym":
        return height_observation(spec, heights, base_pos[..., 2])
    raise ValueError(f"unknown height scan mode {spec.mode!r}; valid: {MODES}")


def noisy(
    spec: HeightScanSpec, observation: jax.Array, key: jax.Array, level: float | jax.Array
) -> jax.Array:
    """`observation` plus uniform noise of half-width `level * noise` metres in its own units."""
    units = spec.scale if spec.mode == "legged_gym" else 1.0
    draw = jax.random.uniform(key, observation.shape, observation.dtype, -1.0, 1.0)
    return observation + draw * (level * spec.noise * units)


def base_body(mj_model: Any, name: str = "") -> int:
    """The id of body `name`, or with `""` of the body of the model's free joint (the root)."""
    if name:
        import mujoco  # noqa: PLC0415 - MuJoCo is an optional dependency

        body = mujoco.mj_name2id(mj_model, mujoco.mjtObj.mjOBJ_BODY, name)
        if body < 0:
            raise ValueError(f"no body {name!r} in the model")
        return int(body)
    free = np.flatnonzero(np.asarray(mj_model.jnt_type) == FREE_JOINT)
    if free.size == 0:
        raise ValueError("the model has no free joint; name the base body")
    return int(mj_model.jnt_bodyid[free[0]])
