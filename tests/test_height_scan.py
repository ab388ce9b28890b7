"""Height scans read MuJoCo's heightfield exactly: `terrain_heights` equals MuJoCo's own ray casts
straight down (a small synthetic field, shifted and turned, and the Go1 rough-terrain scene), the
grid turns with the base's yaw only, and points and images keep legged_gym's order."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from extras import require_playground

from strl_jax.envs import height_scan as hs

TOLERANCE = 1e-5  # metres; float32 lookups against MuJoCo's float64 rays
DOWN = np.array([0.0, 0.0, -1.0])

SYNTHETIC = """
<mujoco>
  <asset>
    <hfield name="bumps" nrow="5" ncol="7" size="1.2 0.8 0.3 0.1"
      elevation="{elevation}"/>
  </asset>
  <worldbody>
    <geom name="ground" type="hfield" hfield="bumps" pos="0.4 -0.3 0.05" euler="0 0 35"/>
    <body name="base" pos="0 0 1">
      <freejoint/>
      <geom type="sphere" size="0.05"/>
    </body>
  </worldbody>
</mujoco>
"""


def synthetic_model(seed: int = 0) -> mujoco.MjModel:
    elevation = np.random.default_rng(seed).uniform(0.0, 1.0, 5 * 7)
    return mujoco.MjModel.from_xml_string(SYNTHETIC.format(elevation=" ".join(f"{e:.6f}" for e in elevation)))


def ray_heights(model: mujoco.MjModel, geom: int, points: np.ndarray, top: float = 2.0) -> np.ndarray:
    """World z where a ray cast straight down from `top` meets the heightfield geom (MuJoCo, C)."""
    data = mujoco.MjData(model)
    mujoco.mj_kinematics(model, data)
    dist = [mujoco.mj_rayHfield(model, data, geom, np.array([x, y, top]), DOWN) for x, y in points]
    return top - np.asarray(dist)


lookup = jax.jit(hs.terrain_heights)


def field_points(model: mujoco.MjModel, geom: int, local: np.ndarray) -> np.ndarray:
    """World xy of points given in the heightfield geom's frame."""
    data = mujoco.MjData(model)
    mujoco.mj_kinematics(model, data)
    mat = data.geom_xmat[geom].reshape(3, 3)
    return local @ mat[:2, :2].T + data.geom_xpos[geom][:2]


def test_synthetic_field_matches_mujoco_rays():
    model = synthetic_model()
    geom = model.geom("ground").id
    field = hs.heightfield_of(model, "ground")
    assert field.elevation.shape == (5, 7)
    rng = np.random.default_rng(1)
    # Random points, every vertex, and points near both triangles of every cell's diagonal.
    size = model.hfield_size[0][:2]
    vx, vy = np.meshgrid(np.linspace(-size[0], size[0], 7), np.linspace(-size[1], size[1], 5))
    cell = np.array([2 * size[0] / 6, 2 * size[1] / 4])
    corners = np.stack([vx[:-1, :-1].ravel(), vy[:-1, :-1].ravel()], -1)
    local = np.concatenate(
        [
            rng.uniform(-size, size, (400, 2)),
            np.stack([vx.ravel(), vy.ravel()], -1) * (1 - 1e-7),
            corners + cell * [0.7, 0.3],  # below the diagonal
            corners + cell * [0.3, 0.7],  # above it
        ]
    )
    points = field_points(model, geom, local)
    expected = ray_heights(model, geom, points)
    got = np.asarray(lookup(field, jnp.asarray(points, jnp.float32)))
    np.testing.assert_allclose(got, expected, atol=TOLERANCE, rtol=0)
    # The other diagonal would differ: at (u, v) = (0.7, 0.3) it gives 0.7 h(r, c+1) + 0.3 h(r+1, c).
    e = np.asarray(field.elevation)
    other = 0.7 * e[:-1, 1:] + 0.3 * e[1:, :-1] + 0.05
    below = expected[-2 * corners.shape[0] : -corners.shape[0]]
    assert np.abs(other.ravel() - below).max() > 1e-2


def test_points_outside_read_the_nearest_edge():
    model = synthetic_model()
    geom = model.geom("ground").id
    field = hs.heightfield_of(model, "bumps")  # by hfield asset name
    size = model.hfield_size[0][:2]
    outside = np.array([[2.0, 0.1], [-3.0, -2.0], [0.5, 1.5], [-0.2, -0.9]])
    edge = np.clip(outside, -size, size) * (1 - 1e-7)  # rays exactly on the rim can miss
    expected = ray_heights(model, geom, field_points(model, geom, edge))
    got = lookup(field, jnp.asarray(field_points(model, geom, outside), jnp.float32))
    np.testing.assert_allclose(np.asarray(got), expected, atol=TOLERANCE, rtol=0)


def test_points_past_the_edge_read_the_void_by_default_and_the_edge_as_legged_gym():
    """Where MuJoCo's downward ray misses the field, the default scan reads no ground (`clip`
    below the reference: the observation's largest value); `beyond_edge="edge"` reads the
    nearest edge point, as legged_gym does. Over the field both read the surface."""
    model = synthetic_model()
    geom = model.geom("ground").id
    field = hs.heightfield_of(model, "ground")
    spec = hs.HeightScanSpec(num_x=9, num_y=5, resolution=0.25)
    base, q = jnp.array([1.2, -0.1, 0.9]), quat(0.0, 0.0, 0.4)  # near the field's +x rim
    points = np.asarray(hs.scan_points(spec, base, q), np.float64)
    data = mujoco.MjData(model)
    mujoco.mj_kinematics(model, data)
    rays = np.array([mujoco.mj_rayHfield(model, data, geom, np.array([x, y, 2.0]), DOWN) for x, y in points])
    missed = rays < 0
    assert 5 <= missed.sum() <= points.shape[0] - 5  # both kinds of point in the grid
    void = np.asarray(hs.height_scan(spec, field, base, q))
    np.testing.assert_allclose(void[~missed], 2.0 - rays[~missed], atol=TOLERANCE, rtol=0)
    np.testing.assert_allclose(void[missed], float(base[2]) - spec.reference_height - spec.clip, atol=1e-6)
    obs = np.asarray(hs.scan_observation(spec, field, base, q))
    np.testing.assert_allclose(obs[missed], spec.clip * spec.scale, atol=1e-5)
    assert obs[~missed].max() < spec.clip * spec.scale - 0.5  # the field itself reads lower
    edge_spec = spec.replace(beyond_edge="edge")
    edge = np.asarray(hs.height_scan(edge_spec, field, base, q))
    np.testing.assert_allclose(edge, lookup(field, jnp.asarray(points, jnp.float32)), atol=1e-6)
    np.testing.assert_allclose(edge[~missed], void[~missed], atol=1e-6)
    assert np.abs(edge[missed] - void[missed]).min() > 0.5
    with pytest.raises(ValueError, match="beyond_edge 'floor'.*void.*edge"):
        hs.height_scan(spec.replace(beyond_edge="floor"), field, base, q)


def test_heightfield_of_rejects_other_geoms():
    model = synthetic_model()
    with pytest.raises(ValueError, match="no heightfield geom"):
        hs.heightfield_of(model, "nothing")


def test_grid_order_is_legged_gyms():
    spec = hs.HeightScanSpec()
    points = hs.grid_points(spec)
    x = np.round(np.arange(-0.8, 0.81, 0.1), 6)  # legged_gym's measured_points_x / _y
    y = np.round(np.arange(-0.5, 0.51, 0.1), 6)
    gx, gy = np.meshgrid(x, y, indexing="ij")  # torch.meshgrid(x, y), flattened
    np.testing.assert_allclose(points, np.stack([gx.ravel(), gy.ravel()], -1), atol=1e-6)
    assert spec.num_points == points.shape[0] == 187

    shifted = hs.grid_points(hs.HeightScanSpec(num_x=3, num_y=2, resolution=0.2, offset=(0.1, -0.05)))
    np.testing.assert_allclose(
        shifted,
        [[-0.1, -0.15], [-0.1, 0.05], [0.1, -0.15], [0.1, 0.05], [0.3, -0.15], [0.3, 0.05]],
        atol=1e-6,
    )


def test_image_rows_run_along_x():
    spec = hs.HeightScanSpec()
    scan = jnp.arange(2 * 3 * spec.num_points, dtype=jnp.float32).reshape(2, 3, spec.num_points)
    image = hs.height_image(scan, spec)
    assert image.shape == (2, 3, 1, 17, 11)
    points = hs.grid_points(spec)
    i, j = 4, 9
    k = i * spec.num_y + j
    assert image[1, 2, 0, i, j] == scan[1, 2, k]
    np.testing.assert_allclose(points[k], [-0.8 + 0.1 * i, -0.5 + 0.1 * j], atol=1e-6)


def quat(roll: float, pitch: float, yaw: float) -> jnp.ndarray:
    """MuJoCo `(w, x, y, z)` of the rotation yaw (z), then pitch (y), then roll (x) in the body."""
    q = np.zeros(4)
    mujoco.mju_euler2Quat(q, np.array([roll, pitch, yaw]), "XYZ")
    return jnp.asarray(q, jnp.float32)


def test_heading_frame_turns_with_yaw_only():
    spec = hs.HeightScanSpec(num_x=3, num_y=3, resolution=0.5)
    base = jnp.array([1.0, -2.0, 0.4])
    level = hs.scan_points(spec, base, quat(0.0, 0.0, np.pi / 2))
    # A quarter turn: the point ahead (x = 0.5) is to the world's +y of the base.
    forward = 2 * spec.num_y + 1  # (x_2, y_1) = (0.5, 0)
    np.testing.assert_allclose(level[forward], [1.0, -1.5], atol=1e-6)
    left = 1 * spec.num_y + 2  # (x_1, y_2) = (0, 0.5)
    np.testing.assert_allclose(level[left], [0.5, -2.0], atol=1e-6)
    for convention in hs.YAW_CONVENTIONS:
        turned = spec.replace(yaw=convention)
        for roll, pitch in ((0.3, 0.0), (0.0, -0.4)):
            tilted = hs.scan_points(turned, base, quat(roll, pitch, np.pi / 2))
            np.testing.assert_allclose(tilted, level, atol=1e-5)
    # With both roll and pitch the heading (projected x axis) and legged_gym's twist differ.
    q = np.asarray(quat(0.4, 0.5, 0.3))
    heading, twist = hs.base_yaw(q, "heading"), hs.base_yaw(q, "twist")
    rot = np.zeros(9)
    mujoco.mju_quat2Mat(rot, q.astype(np.float64))
    np.testing.assert_allclose(heading, np.arctan2(rot[3], rot[0]), atol=1e-6)
    np.testing.assert_allclose(hs.base_yaw(1.3 * q), heading, atol=1e-6)  # any quaternion norm
    assert abs(float(heading - twist)) > 1e-3


def test_batched_scan_equals_one_env_at_a_time():
    model = synthetic_model()
    field = hs.heightfield_of(model, "ground")
    spec = hs.HeightScanSpec(num_x=5, num_y=3)
    pos = jnp.array([[0.3, -0.2, 0.5], [0.9, 0.1, 0.4], [-0.4, -0.6, 0.6]])
    quats = jnp.stack([quat(0.1, 0.2, 0.3), quat(0.0, 0.0, -2.0), quat(-0.3, 0.1, 1.0)])
    batched = hs.height_scan(spec, field, pos, quats)
    assert batched.shape == (3, spec.num_points)
    single = jax.vmap(lambda p, q: hs.height_scan(spec, field, p, q))(pos, quats)
    np.testing.assert_allclose(batched, single, atol=1e-7)


def test_observation_is_legged_gyms_normalisation():
    spec = hs.HeightScanSpec()
    heights = jnp.array([[0.0, 0.1, -1.0, 0.5]])
    obs = hs.height_observation(spec, heights, jnp.array([0.8]))
    np.testing.assert_allclose(obs, [[1.5, 1.0, 5.0, -1.0]], atol=1e-6)


def test_modes_noise_and_base_body():
    model = synthetic_model()
    field = hs.heightfield_of(model, "ground")
    assert hs.base_body(model) == hs.base_body(model, "base") == model.body("base").id
    pos, q = jnp.array([0.2, 0.1, 0.9]), quat(0.0, 0.1, 0.5)
    heights = hs.height_scan(hs.HeightScanSpec(), field, pos, q)
    raw = hs.scan_observation(hs.HeightScanSpec(mode="heights"), field, pos, q)
    np.testing.assert_allclose(raw, heights)
    spec = hs.HeightScanSpec()
    obs = hs.scan_observation(spec, field, pos, q)
    np.testing.assert_allclose(obs, hs.height_observation(spec, heights, pos[2]), atol=1e-6)
    noise = hs.noisy(spec, obs, jax.random.PRNGKey(3), 0.5) - obs
    bound = 0.5 * spec.noise * spec.scale
    assert 0.5 * bound < float(jnp.max(jnp.abs(noise))) <= bound + 1e-6


def scan_rays(model: mujoco.MjModel, points: np.ndarray, top: float = 2.0) -> np.ndarray:
    """Heights from rays over the whole scene (the robot parked far off the field)."""
    data = mujoco.MjData(model)
    data.qpos[:3] = (100.0, 100.0, 10.0)
    mujoco.mj_forward(model, data)
    hit = np.zeros(1, np.int32)
    dist = [mujoco.mj_ray(model, data, np.array([x, y, top]), DOWN, None, 1, -1, hit) for x, y in points]
    return top - np.asarray(dist)


def test_go1_rough_terrain_matches_mujoco_rays():
    require_playground()
    from etils import epath  # noqa: PLC0415 - Playground's path type
    from mujoco_playground._src.locomotion.go1 import base, go1_constants  # noqa: PLC0415

    from strl_jax.envs.menagerie import use_offline_menagerie  # noqa: PLC0415

    use_offline_menagerie("Go1JoystickRoughTerrain")  # the test extra installs the model: no skip
    xml = epath.Path(go1_constants.FEET_ONLY_ROUGH_TERRAIN_XML).read_text()
    model = mujoco.MjModel.from_xml_string(xml, assets=base.get_assets())
    field = hs.heightfield_of(model, "floor")
    assert field.elevation.shape == (256, 256)
    np.testing.assert_allclose(field.size, [10.0, 10.0, 0.05, 1.0])
    rng = np.random.default_rng(2)
    points = rng.uniform(-10.0, 10.0, (2000, 2))
    expected = ray_heights(model, model.geom("floor").id, points)
    np.testing.assert_allclose(
        np.asarray(lookup(field, jnp.asarray(points, jnp.float32))), expected, atol=TOLERANCE
    )

    # A scan around a tilted, turned base equals the scene's own rays at the same points.
    spec = hs.HeightScanSpec()
    base_pos, base_quat = jnp.array([3.1, -4.7, 0.3]), quat(0.2, -0.1, 2.5)
    scan = jax.jit(lambda p, q: hs.height_scan(spec, field, p, q))(base_pos, base_quat)
    world = np.asarray(hs.scan_points(spec, base_pos, base_quat))
    np.testing.assert_allclose(np.asarray(scan), scan_rays(model, world), atol=TOLERANCE)


def test_rough_scenes_share_one_heightfield():
    """Go1's and the humanoids' rough-terrain scenes declare the same heightfield."""
    playground = require_playground()
    root = Path(playground.__file__).parent / "_src" / "locomotion"
    found = {}
    for robot in ("go1", "g1", "t1", "berkeley_humanoid"):
        scene = ET.parse(root / robot / "xmls" / "scene_mjx_feetonly_rough_terrain.xml").getroot()
        (hfield,) = scene.iter("hfield")
        (geom,) = (g for g in scene.iter("geom") if g.get("type") == "hfield")
        found[robot] = (hfield.get("file"), hfield.get("size"), geom.get("pos"), geom.get("name"))
        image = (root / robot / "xmls" / hfield.get("file")).read_bytes()
        found[robot] += (hash(image),)
    assert len(set(found.values())) == 1, found
    assert found["go1"][:4] == ("assets/hfield.png", "10 10 .05 1.0", None, "floor")
