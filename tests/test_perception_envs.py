"""Perception components of Playground envs: the height scan (`env.height_scan`) of rough-terrain
tasks appended to the chosen groups, clean for the critic and noisy for the policy, and the
forward depth image (`env.forward_depth`) cast at each reset and step, appended after it.

One Go1 rough-terrain env of 2 envs with both is built per module and one jitted reset + step
compiled (about a minute on a CPU); every other check reuses that state or only traces shapes.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from extras import require_playground

require_playground()

from strl_jax.config_sections import section_keys  # noqa: E402
from strl_jax.configs.loader import resolve_config  # noqa: E402
from strl_jax.envs import height_scan as hs  # noqa: E402
from strl_jax.envs import make_env_from_config  # noqa: E402
from strl_jax.envs.depth_camera import DepthCameraSpec, depth_image  # noqa: E402
from strl_jax.envs.perception import ForwardDepthSetting, HeightScanSetting  # noqa: E402
from strl_jax.errors import ConfigError  # noqa: E402

TASK = "Go1JoystickRoughTerrain"
SCAN = "env.height_scan={groups: [policy, critic]}"
POINTS = hs.HeightScanSpec().num_points  # legged_gym's 17 x 11
DEPTH = "env.forward_depth={height: 6, width: 8}"  # the policy's (its default group)
CAMERA = DepthCameraSpec(height=6, width=8)
PIXELS = 6 * 8


def build(task: str, *overrides: str, num_envs: int = 2):
    cfg = resolve_config(task, overrides=["env.num_envs=32", *overrides])
    return make_env_from_config(cfg.env, num_envs=num_envs)


@pytest.fixture(scope="module")
def env():
    return build(TASK, SCAN, DEPTH, num_envs=3)


OFF_THE_FIELD = jnp.array([10.3, -2.0, -0.2])  # past the 10 m field's +x edge, below it, upright


@pytest.fixture(scope="module")
def rollout(env):
    """The reset state and observation, and one step with zero actions (one compiled program)
    in which env 1 reaches its time limit and restarts, and env 2, moved off the terrain's edge,
    falls off the world (`env.off_terrain: fall`, the default) and restarts."""

    def run(key):
        state, obs = env.reset(key)
        state = state.replace(step_count=state.step_count.at[1].set(env.episode_length - 1))
        data = state.brax_state.data
        moved = data.replace(qpos=data.qpos.at[2, :3].set(OFF_THE_FIELD))
        stepped = state.replace(brax_state=state.brax_state.replace(data=moved))
        nxt, result = env.step(stepped, jnp.zeros((env.num_envs, env.action_size)))
        return state, obs, nxt, result

    return jax.jit(run)(jax.random.PRNGKey(0))


def scan_of(obs, group: str) -> jax.Array:
    """The scan component of `group` (the policy's is followed by the depth image)."""
    end = obs[group].shape[-1] - (PIXELS if group == "policy" else 0)
    return obs[group][:, end - POINTS : end]


def expected_scan(env, brax_state) -> np.ndarray:
    """height_scan.py's observation at the states' base poses (free joint in qpos), own field."""
    field = hs.heightfield_of(env.env.mj_model, "floor")
    qpos = brax_state.data.qpos
    scan = jax.jit(hs.scan_observation, static_argnums=0)(
        hs.HeightScanSpec(), field, qpos[:, :3], qpos[:, 3:7]
    )
    return np.asarray(scan)


def test_component_is_appended_to_the_chosen_groups(env):
    shapes = env.observation_shapes()
    assert env.components["policy"][-2:] == (("height_scan", POINTS), ("forward_depth", PIXELS))
    assert env.components["critic"][-1] == ("height_scan", POINTS)
    for group in ("policy", "critic"):
        assert sum(n for _, n in env.components[group]) == shapes[group][0]
    assert shapes == {"policy": (48 + POINTS + PIXELS,), "critic": (123 + POINTS,)}
    assert env.component_shapes == {"height_scan": (1, 17, 11), "forward_depth": (1, 6, 8)}
    # By default only the critic sees the terrain.
    default = build(TASK, "env.height_scan={num_x: 5, num_y: 3}")
    assert default.observation_shapes() == {"policy": (48,), "critic": (123 + 15,)}
    assert "height_scan" not in dict(default.components["policy"])
    assert default.components["critic"][-1] == ("height_scan", 15)
    assert default.component_shapes == {"height_scan": (1, 5, 3)}


def assert_computed_alike(seen, expected) -> None:
    """The env's values against the same computation jitted apart: two programs, which XLA may
    fuse and round differently (by ~1e-8 under its older fusion emitter, by up to 3e-6 on scan
    heights near 1 on other CPUs of the same kind)."""
    np.testing.assert_allclose(seen, expected, rtol=1e-5, atol=1e-5)


def test_reset_and_step_observe_the_scan_at_the_base(env, rollout):
    state, obs, nxt, result = rollout
    assert {g: tuple(v.shape[1:]) for g, v in obs.items()} == env.observation_shapes()
    for brax_state, seen in ((state.brax_state, obs), (nxt.brax_state, result.obs)):
        clean = scan_of(seen, "critic")
        assert_computed_alike(clean, expected_scan(env, brax_state))
        # Playground's own observation is untouched and comes first.
        base = env.observe.base.base(brax_state)
        for group in ("policy", "critic"):
            np.testing.assert_array_equal(seen[group][:, : base[group].shape[-1]], base[group])
        # The policy's copy is noisy: uniform, at most level (1) x noise (0.1 m) x scale (5).
        noise = np.asarray(scan_of(seen, "policy") - clean)
        assert 0.4 < np.abs(noise).max() <= 0.5 + 1e-5
    # Env 0 went on: its final observation is its next one.
    np.testing.assert_array_equal(result.final_obs["critic"][0], result.obs["critic"][0])
    # A new draw each step: the noise key follows the state's rng.
    first = scan_of(obs, "policy") - scan_of(obs, "critic")
    second = scan_of(result.obs, "policy") - scan_of(result.obs, "critic")
    assert not np.allclose(first, second)


def test_a_robot_off_the_terrain_has_fallen_off_the_world(env, rollout):
    """Playground's task ends an episode only when the trunk turns over; off the heightfield's
    edge and below it the robot is gone, and the env ends its episode as a fall, not a time-out."""
    _, _, nxt, result = rollout
    assert result.terminated.tolist() == [False, False, True]
    assert result.truncated.tolist() == [False, True, False]
    # it left upright: the fall is the edge's, not the task's own (the up-vector's z below 0)
    assert float(result.final_obs["policy"][2, 8]) < -0.9  # gravity's z in the base frame (noisy)
    assert int(nxt.step_count[2]) == 0 and float(nxt.brax_state.data.qpos[2, 2]) > 0.2  # restarted


def test_one_env_observes_as_its_row_of_the_batch(env, rollout):
    state = rollout[0].brax_state
    observe = jax.jit(env.observe)
    batched = observe(state)
    single = observe(jax.tree.map(lambda x: x[1], state))
    for group, value in single.items():
        np.testing.assert_allclose(value, batched[group][1], atol=1e-6)


def test_noise_off_gives_the_policy_the_clean_scan(rollout):
    quiet = build(TASK, SCAN, "env.playground.noise_config.level=0")
    obs = quiet.observe(rollout[0].brax_state)
    np.testing.assert_array_equal(obs["policy"][:, -POINTS:], obs["critic"][:, -POINTS:])


def test_obs_components_can_select_the_scan(env, rollout):
    selected = build(TASK, SCAN, "env.obs_components={policy: [height_scan, dof_pos]}")
    assert selected.components["policy"] == (("height_scan", POINTS), ("dof_pos", 12))
    assert selected.observation_shapes()["policy"] == (POINTS + 12,)
    assert selected.component_shapes == {"height_scan": (1, 17, 11)}
    state = rollout[0].brax_state
    full, picked = env.observe(state), selected.observe(state)["policy"]
    np.testing.assert_array_equal(picked[:, :POINTS], scan_of(full, "policy"))
    np.testing.assert_array_equal(picked[:, POINTS:], full["policy"][:, 9:21])  # after lin vel, gyro, gravity


def test_humanoid_scan_reads_its_root_body():
    env = build("T1JoystickRoughTerrain", "env.height_scan={groups: policy, num_x: 4, num_y: 2}")
    assert env.observe.free_qpos == 0 and env.observe.body == hs.base_body(env.env.mj_model)
    assert env.components["policy"][-1] == ("height_scan", 8)
    assert env.observation_shapes()["policy"] == (85 + 8,)


@pytest.mark.parametrize(
    ("override", "match"),
    [
        (
            "env.height_scan={spacing: 0.1}",
            r"unknown env\.height_scan key 'spacing'; valid keys: \['groups', 'geom', 'num_x'",
        ),
        ("env.height_scan={yaw: north}", r"height_scan\.yaw must be one of \['heading', 'twist'\]"),
        ("env.height_scan={beyond_edge: floor}", r"beyond_edge must be one of \['void', 'edge'\]"),
        ("env.height_scan={num_x: 0}", r"height_scan\.num_x must be an integer >= 1"),
        ("env.height_scan={offset: [0.1]}", r"height_scan\.offset must be \[x, y\]"),
        (
            "env.height_scan={groups: [actor]}",
            r"\['actor'\] are not observation groups .*\['policy', 'critic'\]",
        ),
        ("env.height_scan={geom: ground}", r"height_scan\.geom='ground'.*floor"),
        ("env.height_scan={body: head}", r"height_scan\.body='head'"),
    ],
)
def test_bad_settings_name_the_key_and_the_choices(override, match):
    with pytest.raises(ConfigError, match=match):
        build(TASK, override)


@pytest.mark.parametrize("task", ["Go1JoystickFlatTerrain", "ant"])
def test_tasks_without_a_heightfield_name_those_with_one(task):
    with pytest.raises(ConfigError, match=r"heightfield.*G1JoystickRoughTerrain"):
        build(task, "env.height_scan={num_x: 3}")


# ---- forward depth ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def images(env):
    """`depth_image` of a batch's states, flat, compiled once (the states share one shape)."""
    cast = jax.jit(jax.vmap(lambda d: depth_image(CAMERA, env.env.mjx_model, d).reshape(-1)))
    return lambda brax_state: np.asarray(cast(brax_state.data))


def test_perception_settings_take_every_field_of_their_specs():
    """Each field of the camera's and the scan's specs is a key of its setting."""
    assert section_keys(ForwardDepthSetting) == (
        "groups",
        *(f.name for f in dataclasses.fields(DepthCameraSpec)),
    )
    scan_fields = tuple(f.name for f in dataclasses.fields(hs.HeightScanSpec))
    assert section_keys(HeightScanSetting) == ("groups", "geom", *scan_fields)


def test_reset_observes_the_depth_image_of_its_state(env, rollout, images):
    state, obs, _, _ = rollout
    expected = images(state.brax_state)
    assert 0.0 < expected.min() and expected.max() <= 1.0  # the terrain, within [near, far]
    assert_computed_alike(state.brax_state.info["forward_depth"], expected)
    assert_computed_alike(obs["policy"][:, -PIXELS:], expected)  # last, after the scan
    assert obs["critic"].shape[-1] == 123 + POINTS  # not the critic's


def test_step_observes_the_stepped_and_the_restarted_state(env, rollout, images):
    _, _, nxt, result = rollout
    assert result.truncated.tolist() == [False, True, False]
    expected = images(nxt.brax_state)  # env 0's stepped state, env 1's and env 2's fresh ones
    assert_computed_alike(nxt.brax_state.info["forward_depth"], expected)
    assert_computed_alike(result.obs["policy"][:, -PIXELS:], expected)
    # The final observation is the stepped state's: env 0's next one, not env 1's restart.
    final = np.asarray(result.final_obs["policy"][:, -PIXELS:])
    np.testing.assert_array_equal(final[0], expected[0])
    assert not np.array_equal(final[1], expected[1])
    assert not np.array_equal(final[2], expected[2])


def test_forward_depth_alone_and_in_other_groups():
    env = build(TASK, "env.forward_depth={height: 2, width: 3, groups: [policy, critic], far: 3.0}")
    assert env.component_shapes == {"forward_depth": (1, 2, 3)}
    assert env.observation_shapes() == {"policy": (48 + 6,), "critic": (123 + 6,)}
    for group in ("policy", "critic"):
        assert env.components[group][-1] == ("forward_depth", 6)
    assert env.env.spec == DepthCameraSpec(height=2, width=3, far=3.0)


def test_flat_terrain_sees_its_plane_through_playground_steps():
    """Go1's flat floor is a plane (`mjx.ray`): one env's reset (compiled) sees it, and
    Playground's own step (traced only) takes and keeps the info key."""
    env = build("Go1JoystickFlatTerrain", "env.forward_depth={height: 4, width: 3}")
    camera = DepthCameraSpec(height=4, width=3)

    def reset(key):
        state = env.env.reset(key)
        return state, depth_image(camera, env.env.mjx_model, state.data).reshape(-1)

    state, expected = jax.jit(reset)(jax.random.PRNGKey(0))
    image = np.asarray(state.info["forward_depth"])
    np.testing.assert_array_equal(image, expected)
    rows = image.reshape(4, 3)
    np.testing.assert_allclose(rows, rows[:, :1].repeat(3, axis=1), atol=1e-3)  # a level floor
    assert rows[-1, 0] < rows[-2, 0] < 1.0  # nearer below; the top rows may look past `far`
    nxt = jax.eval_shape(env.env.step, state, jnp.zeros(env.action_size))
    assert set(nxt.info) == set(state.info) and nxt.info["forward_depth"].shape == (12,)
    assert jax.eval_shape(env.observe, nxt)["policy"].shape == (48 + 12,)


@pytest.mark.parametrize(
    ("override", "match"),
    [
        (
            "env.forward_depth={fov: 90}",
            r"unknown env\.forward_depth key 'fov'; valid keys: \['groups', 'height', 'width'",
        ),
        ("env.forward_depth={height: 0}", r"forward_depth\.height must be an integer >= 1"),
        ("env.forward_depth={horizontal_fov: 180}", r"forward_depth\.horizontal_fov must be degrees"),
        ("env.forward_depth={near: 2.0, far: 1.0}", r"forward_depth\.far must be metres > near \(2\.0\)"),
        ("env.forward_depth={position: [0.1, 0]}", r"forward_depth\.position must be \[x, y, z\]"),
        ("env.forward_depth={geomgroup: [1, 0]}", r"forward_depth\.geomgroup must be \[\] .*6 flags"),
        ("env.forward_depth={exclude_robot: 1}", r"forward_depth\.exclude_robot must be true or false"),
        ("env.forward_depth={groups: [actor]}", r"\['actor'\] are not observation groups .*'critic'\]"),
        ("env.forward_depth={body: head}", r"forward_depth\.body='head'.*valid: \['world', 'trunk'"),
        ("env.forward_depth={camera: eye}", r"forward_depth\.camera='eye'.*valid: \["),
        ("env.playground.impl=warp", r"JAX implementation .*impl='warp'.*impl=jax"),
    ],
)
def test_bad_depth_settings_name_the_key_and_the_choices(override, match):
    overrides = [override] if override.startswith("env.forward_depth") else [DEPTH, override]
    with pytest.raises(ConfigError, match=match):
        build(TASK, *overrides)


def test_forward_depth_needs_a_playground_task():
    with pytest.raises(ConfigError, match=r"forward_depth .*Brax task 'ant'.*Go1JoystickFlatTerrain"):
        build("ant", DEPTH)
