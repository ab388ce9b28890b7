"""The floating base's true state (`env.true_state`): a privileged critic for tasks whose critic
sees only the policy's observation. The values are checked against MuJoCo's own rotations in C on
Barkour, whose commands' frame is turned from the base's; the components are checked on Op3's
groups and its mirror. Only shapes are traced: no env program is compiled here.
"""

from __future__ import annotations

import types

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from extras import require_playground

require_playground()

from strl_jax.configs.loader import resolve_config  # noqa: E402
from strl_jax.envs import make_env_from_config  # noqa: E402
from strl_jax.envs import symmetry as mirrors  # noqa: E402
from strl_jax.envs.native_mujoco import base_velocity, command_frame  # noqa: E402
from strl_jax.envs.true_state import TRUE_COMPONENTS, TrueStateSetting, WithTrueState  # noqa: E402
from strl_jax.errors import ConfigError  # noqa: E402

OP3_FRAMES = 3 * 49  # Op3Joystick's observation: 3 stacked frames of 49


def build(task: str, *overrides: str):
    cfg = resolve_config(task, overrides=["env.num_envs=32", *overrides])
    return make_env_from_config(cfg.env, num_envs=2)


@pytest.fixture(scope="module")
def op3():
    return build("Op3Joystick", "env.true_state={groups: critic}")


def test_the_critic_gets_the_true_state_after_the_policys_observation(op3):
    shapes = op3.observation_shapes()
    assert shapes["policy"] == (OP3_FRAMES,)
    assert shapes["critic"] == (OP3_FRAMES + 10,)
    assert op3.components["critic"][:-4] == op3.components["policy"]
    assert op3.components["critic"][-4:] == tuple(TRUE_COMPONENTS.items())


def test_the_mirror_takes_the_true_state(op3):
    """Op3's mirror covers the critic's new components: velocity and gravity polar, the angular
    velocity axial, the height unchanged; mirroring twice gives the input back."""
    rng = np.random.default_rng(0)
    obs = {
        g: jnp.asarray(rng.normal(size=(4, n[0])), jnp.float32) for g, n in op3.observation_shapes().items()
    }
    out, _ = jax.jit(lambda o: mirrors.op3_joystick(o, None, op3))(obs)
    critic, mirrored = np.asarray(obs["critic"][0]), np.asarray(out["critic"][4])
    lin, ang, gravity, height = (slice(OP3_FRAMES + 3 * i, OP3_FRAMES + 3 * i + 3) for i in range(4))
    np.testing.assert_array_equal(mirrored[lin], critic[lin] * [1, -1, 1])
    np.testing.assert_array_equal(mirrored[ang], critic[ang] * [-1, 1, -1])
    np.testing.assert_array_equal(mirrored[gravity], critic[gravity] * [1, -1, 1])
    np.testing.assert_array_equal(mirrored[-1], critic[-1])
    again, _ = mirrors.op3_joystick({k: v[4:] for k, v in out.items()}, None, op3)
    np.testing.assert_array_equal(again["critic"][4:], obs["critic"])


def random_states(model: mujoco.MjModel, count: int, seed: int = 0) -> list[mujoco.MjData]:
    rng = np.random.default_rng(seed)
    states = []
    for _ in range(count):
        data = mujoco.MjData(model)
        data.qpos[:] = model.key_qpos[0]
        quat = rng.normal(size=4)
        data.qpos[0:3] = rng.normal(size=3)
        data.qpos[3:7] = quat / np.linalg.norm(quat)
        data.qvel[:] = rng.normal(size=model.nv)
        states.append(data)
    return states


def in_frame(vector: np.ndarray, quat: np.ndarray, frame: np.ndarray | None) -> np.ndarray:
    """`vector` (world) in the base's frame by MuJoCo's rotation, then in the commands' frame."""
    inverse, out = np.zeros(4), np.zeros(3)
    mujoco.mju_negQuat(inverse, quat)
    mujoco.mju_rotVecQuat(out, vector, inverse)
    return out if frame is None else frame.T @ out


def test_values_are_mujocos_in_the_commands_frame():
    """Barkour's commands are given in its IMU's frame, turned half a circle about z from the base's:
    each component equals MuJoCo's rotation of the world quantity (and `deploy`'s base velocity),
    one env at a time and as a batch."""
    cfg = resolve_config("BarkourJoystick", overrides=["env.num_envs=32"])
    model = make_env_from_config(cfg.env, num_envs=2).env.mj_model
    frame = command_frame(model)
    assert frame is not None and np.allclose(frame, np.diag([-1.0, -1.0, 1.0]), atol=1e-6)
    turned = np.zeros(9)  # and a frame turned about every axis, where a transposition would show
    mujoco.mju_quat2Mat(turned, np.array([0.9, 0.3, -0.2, 0.25]) / np.linalg.norm([0.9, 0.3, -0.2, 0.25]))
    for chosen in (frame, turned.reshape(3, 3)):
        check_values(model, chosen)


def check_values(model: mujoco.MjModel, frame: np.ndarray) -> None:
    truth = WithTrueState(base=dict, groups=(), components=tuple(TRUE_COMPONENTS), frame=frame)
    states = random_states(model, 5)
    batch = types.SimpleNamespace(
        qpos=jnp.asarray(np.stack([d.qpos for d in states]), jnp.float32),
        qvel=jnp.asarray(np.stack([d.qvel for d in states]), jnp.float32),
    )
    batched = truth.values(batch)
    for row, data in enumerate(states):
        one = truth.values(types.SimpleNamespace(qpos=jnp.asarray(data.qpos), qvel=jnp.asarray(data.qvel)))
        quat = data.qpos[3:7]
        angular = frame.T @ data.qvel[3:6]
        want = {
            "true_base_lin_vel": in_frame(data.qvel[0:3], quat, frame),
            "true_base_ang_vel": angular,
            "true_projected_gravity": in_frame(np.array([0.0, 0.0, -1.0]), quat, frame),
            "true_base_height": data.qpos[2:3],
        }
        for name, value in want.items():
            np.testing.assert_allclose(one[name], value, rtol=1e-5, atol=1e-5, err_msg=name)
            np.testing.assert_allclose(batched[name][row], value, rtol=1e-5, atol=1e-5, err_msg=name)
        vx, vy, yaw = base_velocity(data, frame)
        np.testing.assert_allclose(
            [*one["true_base_lin_vel"][:2], one["true_base_ang_vel"][2]], [vx, vy, yaw], rtol=1e-5, atol=1e-5
        )


def test_components_and_groups_are_chosen():
    env = build(
        "SpotFlatTerrainJoystick", "env.true_state={groups: [policy, critic], components: [true_base_height]}"
    )
    shapes = env.observation_shapes()
    assert env.components["policy"][-1] == ("true_base_height", 1)
    assert env.components["critic"][-1] == ("true_base_height", 1)
    assert shapes["policy"] == (sum(n for _, n in env.components["policy"]),)
    assert TrueStateSetting().components == tuple(TRUE_COMPONENTS)
    picked = build(
        "SpotFlatTerrainJoystick",
        "env.true_state={groups: critic}",
        "env.obs_components={critic: [true_base_lin_vel, command]}",
    )
    assert picked.components["critic"] == (("true_base_lin_vel", 3), ("command", 3))
    assert picked.observation_shapes()["critic"] == (6,)


@pytest.mark.parametrize(
    ("task", "override", "match"),
    [
        (
            "Op3Joystick",
            "env.true_state={components: [base_lin_vel]}",
            r"true_state\.components must be a list of distinct names from \['true_base_lin_vel'",
        ),
        (
            "Op3Joystick",
            "env.true_state={groups: [teacher]}",
            r"true_state\.groups: \['teacher'\] are not observation groups .*\['policy', 'critic'\]",
        ),
        ("Op3Joystick", "env.true_state={frame: world}", r"unknown env\.true_state key 'frame'; valid keys"),
        ("CartpoleBalance", "env.true_state={groups: critic}", r"floating base.*'CartpoleBalance' has none"),
        ("ant", "env.true_state={groups: critic}", r"true_state reads .* not of Brax task 'ant'"),
    ],
)
def test_bad_settings_name_the_key_and_the_choices(task, override, match):
    with pytest.raises(ConfigError, match=match):
        build(task, override)
