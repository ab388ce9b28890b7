"""The forward depth camera against analytic depths and MuJoCo's own ray casts."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from extras import require_playground
from mujoco import mjx

from strl_jax.envs.depth_camera import (
    DepthCameraSpec,
    camera_pose,
    camera_rays,
    depth_image,
    depth_metres,
    normalise_depth,
)

# A robot (box torso, sphere head) 1 m above a plane, facing a wall whose front face is at x = 2.9;
# the MJCF camera "eye" sits at the torso's centre looking along +x.
SCENE = """
<mujoco>
  <worldbody>
    <geom name="floor" type="plane" size="0 0 1"/>
    <geom name="wall" type="box" pos="3 0 1" size="0.1 2 1"/>
    <body name="torso" pos="0 0 1">
      <freejoint/>
      <geom type="box" size="0.2 0.1 0.05"/>
      <camera name="eye" pos="0 0 0" xyaxes="0 -1 0 0 0 1"/>
      <body name="head" pos="0.3 0 0">
        <geom type="sphere" size="0.05"/>
      </body>
    </body>
  </worldbody>
</mujoco>
"""

# A 5 x 5 heightfield with a ridge, 2 m x 2 m, up to 0.3 m high, under a camera body.
HFIELD_SCENE = """
<mujoco>
  <asset>
    <hfield name="terrain" nrow="5" ncol="5" size="1 1 0.3 0.1" elevation="
      0 0.1 0.3 0.2 0
      0.2 0.5 1 0.4 0.1
      0 0.3 0.8 0.6 0.2
      0.1 0.2 0.4 1 0.3
      0 0 0.2 0.3 0"/>
  </asset>
  <worldbody>
    <geom name="ground" type="hfield" hfield="terrain" pos="0.1 -0.2 0" euler="0 0 20"/>
    <body name="cam" pos="-0.9 0.1 0.8">
      <freejoint/>
      <geom type="sphere" size="0.05"/>
    </body>
  </worldbody>
</mujoco>
"""


def scene(xml: str) -> tuple[mujoco.MjModel, mujoco.MjData, mjx.Model, mjx.Data]:
    model = mujoco.MjModel.from_xml_string(xml)
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)  # kinematics and cameras
    m = mjx.put_model(model, impl="jax")
    return model, data, m, mjx.put_data(model, data, impl="jax")


def metres(spec: DepthCameraSpec, m: mjx.Model, d: mjx.Data) -> np.ndarray:
    return np.asarray(jax.jit(lambda d: depth_metres(spec, m, d))(d))


def test_camera_rays_pinhole_layout():
    spec = DepthCameraSpec(height=3, width=5, horizontal_fov=90.0)
    rays = camera_rays(spec)
    assert rays.shape == (3, 5, 3)
    np.testing.assert_allclose(rays[..., 0], 1.0)
    np.testing.assert_allclose(rays[1, 2], [1.0, 0.0, 0.0], atol=1e-7)  # odd sizes: centre on axis
    assert rays[0, 0, 1] > 0 and rays[0, 0, 2] > 0  # top-left looks left and up
    assert rays[-1, -1, 1] < 0 and rays[-1, -1, 2] < 0
    # Square pixels of width 2 tan(45 deg) / 5; the outer pixel centres are half a pixel inside.
    np.testing.assert_allclose(rays[1, 0, 1], 0.8, rtol=1e-6)
    np.testing.assert_allclose(rays[0, 2, 2], 0.4, rtol=1e-6)


def test_normalise_depth_clips_and_offsets():
    spec = DepthCameraSpec(near=0.5, far=2.5, offset=-0.5)
    out = normalise_depth(spec, jnp.array([0.1, 0.5, 1.5, 2.5, 7.0, jnp.inf]))
    np.testing.assert_allclose(out, [-0.5, -0.5, 0.0, 0.5, 0.5, 0.5])


def test_plane_wall_exclusion_and_batch():
    _, _, m, d = scene(SCENE)
    # Looking straight down from 1 m: a plane's z-depth is 1 at every pixel.
    down = DepthCameraSpec(height=3, width=5, body="torso", position=(0.0, 0.0, 0.0), pitch=np.pi / 2)
    np.testing.assert_allclose(metres(down, m, d), 1.0, rtol=1e-5)
    # Looking ahead from the torso's centre: the wall at 2.9 m, or the torso's own front face.
    ahead = DepthCameraSpec(height=3, width=5, body="torso", position=(0.0, 0.0, 0.0), pitch=0.0, far=4.0)
    ahead_image = metres(ahead, m, d)
    np.testing.assert_allclose(ahead_image[1, 2], 2.9, rtol=1e-5)
    # The MJCF camera "eye" (looking along its -z) has the same pose: the same image.
    eye = DepthCameraSpec(height=3, width=5, camera="eye", far=4.0)
    np.testing.assert_allclose(metres(eye, m, d), ahead_image, rtol=1e-5)
    own = DepthCameraSpec(
        height=3, width=5, body="torso", position=(0.0, 0.0, 0.0), pitch=0.0, far=4.0, exclude_robot=False
    )
    np.testing.assert_allclose(metres(own, m, d)[1, 2], 0.2, rtol=1e-5)
    # A batch of envs: the second one 0.5 m higher (so 1.5 m above the plane), clipped at far.
    spec = DepthCameraSpec(
        height=3, width=5, body="torso", position=(0.0, 0.0, 0.0), pitch=np.pi / 2, far=1.2
    )
    batch = jax.tree.map(lambda x: jnp.stack([x, x]), d)
    batch = batch.replace(xpos=batch.xpos.at[1, :, 2].add(0.5))
    images = jax.jit(jax.vmap(lambda d: depth_image(spec, m, d)))(batch)
    assert images.shape == (2, 1, 3, 5)
    np.testing.assert_allclose(images[0], 1.0 / 1.2, rtol=1e-5)
    np.testing.assert_allclose(images[1], 1.0)


def test_pitched_down_rows_and_columns():
    _, _, m, d = scene(SCENE)
    spec = DepthCameraSpec(height=6, width=8, body="torso", pitch=0.4, far=10.0)
    depth = metres(spec, m, d)
    pos, rot = camera_pose(spec, m, d)
    # z-depth to the floor is h / (forward . ray) along the optical axis: analytic per pixel.
    dirs = camera_rays(spec) @ np.asarray(rot).T
    expected = np.asarray(pos)[2] / -dirs[..., 2]
    floor = (expected > 0) & (np.asarray(pos)[0] + expected * dirs[..., 0] < 2.9)
    assert floor[-1].all()
    np.testing.assert_allclose(depth[floor], expected[floor], rtol=1e-4)
    rows = floor[:, 4]
    assert rows.sum() >= 3
    assert np.all(np.diff(depth[rows, 4]) < 0)  # the top rows see farther away
    np.testing.assert_allclose(depth[:, 0], depth[:, -1], rtol=1e-5)  # left-right symmetric


def test_hfield_matches_mj_ray():
    model, data, m, d = scene(HFIELD_SCENE)
    spec = DepthCameraSpec(height=9, width=12, body="cam", position=(0.0, 0.0, 0.0), pitch=0.8, far=3.0)
    depth = metres(spec, m, d)
    pos, rot = (np.asarray(x, np.float64) for x in camera_pose(spec, m, d))
    dirs = camera_rays(spec).astype(np.float64) @ rot.T
    cam_body = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, "cam")
    expected = np.array(
        [
            mujoco.mj_ray(model, data, pos, v, None, 1, cam_body, np.zeros(1, np.int32))
            for v in dirs.reshape(-1, 3)
        ]
    ).reshape(depth.shape)
    hit = (expected >= 0) & (expected <= spec.far)
    assert hit.mean() > 0.6
    np.testing.assert_allclose(depth[hit], expected[hit], atol=1e-5)
    assert np.all(np.isinf(depth[expected < 0]) | (depth[expected < 0] > spec.far))


def test_go1_rough_terrain_matches_mj_ray():
    require_playground()
    from mujoco_playground import registry

    from strl_jax.envs.menagerie import use_offline_menagerie

    use_offline_menagerie("Go1JoystickRoughTerrain")
    env = registry.load("Go1JoystickRoughTerrain")
    model = env.mj_model
    data = mujoco.MjData(model)
    data.qpos[:] = model.keyframe("home").qpos
    data.qpos[:2] = (1.3, -2.1)  # somewhere with bumps
    mujoco.mj_kinematics(model, data)
    m, d = env.mjx_model, mjx.put_data(model, data, impl="jax")
    floor = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, "floor")
    spec = DepthCameraSpec()
    pos, rot = (np.asarray(x, np.float64) for x in camera_pose(spec, m, d))
    dirs = (camera_rays(spec).astype(np.float64) @ rot.T)[::6, ::6].reshape(-1, 3)
    # MuJoCo's own cast against the floor alone (its group, the robot excluded by the group mask).
    group = np.zeros(6, np.uint8)
    group[model.geom_group[floor]] = 1
    assert not np.any((model.geom_group == model.geom_group[floor]) & (model.geom_bodyid != 0))
    expected = np.array(
        [mujoco.mj_ray(model, data, pos, v, group, 1, -1, np.zeros(1, np.int32)) for v in dirs]
    )
    got = metres(spec, m, d)[::6, ::6].ravel()  # the whole image: robot excluded, mjx.ray and the field
    hit = (expected >= 0) & (expected <= spec.far)  # the top rows look over the horizon or past far
    assert hit.sum() >= 12
    np.testing.assert_allclose(got[hit], expected[hit], atol=1e-4)
    assert np.all(np.isinf(got[~hit]))
