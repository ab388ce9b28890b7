"""Sim-to-sim on the generic path (`strl_jax.envs.native_physics`): C MuJoCo's physics under a
Playground task's own code. On a quadruped (Go1) and a humanoid (T1): the task observes a native
state as it observes the same state in MJX, and one control step lands where the JAX env's step
lands; on Go1 the generic path agrees with the hand-written numpy twin (`native_mujoco`); a task
whose step has no `mjx_env.step` is refused. `strl_jax.deploy` end to end on the generic path, on a
robot that is not Go1: tests/test_custom_robot_example.py.

T1 is the humanoid: on BerkeleyHumanoid and G1 MJX and C MuJoCo already differ within one
physics step (MJX makes one contact per box foot where C MuJoCo makes four), T1's feet agree."""

from __future__ import annotations

from types import SimpleNamespace

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from extras import require_playground

require_playground()

from mujoco_playground._src import mjx_env  # noqa: E402
from test_deploy import QPOS_TOL, QVEL_TOL  # noqa: E402

from strl_jax.configs.loader import resolve_config  # noqa: E402
from strl_jax.envs import native_mujoco as nm  # noqa: E402
from strl_jax.envs import native_physics as npx  # noqa: E402
from strl_jax.envs.tasks import make_env_from_config  # noqa: E402
from strl_jax.errors import ConfigError  # noqa: E402
from strl_jax.native_episodes import nominal_env_config  # noqa: E402

QUADRUPED, HUMANOID = "Go1JoystickFlatTerrain", "T1JoystickFlatTerrain"
TINY_NET = ["policy.actor_hidden_dims=[8]", "policy.critic_hidden_dims=[8]"]
OBS_TOL = 1e-4  # the same physical state observed through C MuJoCo's and MJX's data (seen: 4e-7)
STEPS = 3


def robot(task: str) -> SimpleNamespace:
    """The nominal, noise-free env, its native simulation, its jitted single-env step, and a state
    after a few random actions."""
    cfg = resolve_config(task, overrides=TINY_NET)
    env_cfg = nominal_env_config(cfg.env, episode_length=50)
    env = make_env_from_config(env_cfg, num_envs=1)
    step = jax.jit(env.env.step)
    state = jax.jit(env.env.reset)(jax.random.PRNGKey(3))
    rng = np.random.default_rng(0)
    for _ in range(STEPS):
        state = step(state, jnp.asarray(rng.uniform(-0.5, 0.5, env.action_size), jnp.float32))
    return SimpleNamespace(
        task=task, cfg=env_cfg, env=env, sim=npx.native_simulation(env), step=step, state=state, rng=rng
    )


@pytest.fixture(scope="module")
def go1():
    return robot(QUADRUPED)


@pytest.fixture(scope="module")
def t1():
    return robot(HUMANOID)


def actions(r: SimpleNamespace, count: int) -> list[np.ndarray]:
    return [r.rng.uniform(-0.5, 0.5, r.env.action_size) for _ in range(count)]


def forward_data(r: SimpleNamespace) -> tuple:
    """The state's positions and velocities forward-computed by MJX and by C MuJoCo (as MJX data)."""
    from mujoco import mjx

    playground = npx.mjx_env_of(r.env.env)
    mjx_data = jax.jit(mjx.forward)(playground.mjx_model, r.state.data)
    native = mujoco.MjData(r.sim.model)
    for name in npx.RESET_FIELDS:
        getattr(native, name)[:] = np.asarray(getattr(r.state.data, name))
    mujoco.mj_forward(r.sim.model, native)
    return mjx_data, npx.to_mjx(r.sim, native)


@pytest.mark.parametrize("name", ["go1", "t1"])
def test_the_task_observes_a_native_state_as_the_same_mjx_state(name, request):
    """The task's step ending in C MuJoCo's data of a state and in MJX's data of the same state:
    the same observation (every group) and the same reward terms."""
    r = request.getfixturevalue(name)
    mjx_data, native_data = forward_data(r)
    action = jnp.asarray(actions(r, 1)[0], jnp.float32)
    via_mjx = r.sim.finish(r.state, action, mjx_data)
    via_c = r.sim.finish(r.state, action, native_data)
    np.testing.assert_allclose(
        npx.policy_observation(r.sim, via_c), npx.policy_observation(r.sim, via_mjx), atol=OBS_TOL
    )
    assert float(via_c.reward) == pytest.approx(float(via_mjx.reward), rel=1e-4, abs=1e-6)
    for key, value in via_mjx.metrics.items():
        if key.startswith("reward/"):
            assert float(via_c.metrics[key]) == pytest.approx(float(value), rel=1e-3, abs=1e-5), key


@pytest.mark.parametrize("name", ["go1", "t1"])
def test_one_control_step_lands_where_the_jax_step_lands(name, request):
    """From the JAX env's state, one native control step and one JAX step with the same action:
    the same motor targets and bookkeeping, the next state within MJX-vs-C tolerances
    (tests/test_deploy.py), the observation and reward accordingly."""
    r = request.getfixturevalue(name)
    state = r.state
    for action in actions(r, STEPS):
        data, native_state = npx.native_reset(r.sim, state)
        native_state, ctrl = npx.native_step(r.sim, data, native_state, action)
        state = r.step(state, jnp.asarray(action, jnp.float32))
        np.testing.assert_allclose(ctrl, np.asarray(state.data.ctrl), atol=1e-6)
        np.testing.assert_allclose(data.qpos, np.asarray(state.data.qpos), atol=QPOS_TOL)
        np.testing.assert_allclose(data.qvel, np.asarray(state.data.qvel), atol=QVEL_TOL)
        np.testing.assert_allclose(
            npx.policy_observation(r.sim, native_state),
            np.asarray(r.sim.observe(state)["policy"]),
            atol=QVEL_TOL,
        )
        assert float(native_state.done) == float(state.done)
        assert float(native_state.reward) == pytest.approx(float(state.reward), rel=0.05, abs=0.02)
        for key in ("rng", "command", "last_act"):
            np.testing.assert_array_equal(np.asarray(native_state.info[key]), np.asarray(state.info[key]))


def hand_bookkeeping(state) -> nm.Bookkeeping:
    info = {k: np.asarray(v) for k, v in state.info.items()}
    return nm.Bookkeeping(
        command=info["command"].astype(np.float64),
        last_act=info["last_act"].astype(np.float64),
        last_last_act=info["last_last_act"].astype(np.float64),
        feet_air_time=info["feet_air_time"].astype(np.float64),
        last_contact=info["last_contact"],
        swing_peak=info["swing_peak"].astype(np.float64),
    )


def test_the_generic_path_agrees_with_the_hand_written_go1(go1):
    """Both native paths from the same state with the same actions: the same motor targets and
    trajectory; for the same native state the same observation (to 1e-4) and reward terms."""
    task = nm.native_task(
        npx.mjx_env_of(go1.env.env), QUADRUPED, go1.cfg.episode_length, go1.cfg.clip_actions
    )
    layout = list(go1.env.components["policy"])
    generic_data, state = npx.native_reset(go1.sim, go1.state)
    hand_data = nm.reset_data(task, np.asarray(go1.state.data.qpos), np.asarray(go1.state.data.qvel))
    hand_data.ctrl[:] = np.asarray(go1.state.data.ctrl)
    hand_data.qacc_warmstart[:] = np.asarray(go1.state.data.qacc_warmstart)
    book = hand_bookkeeping(go1.state)
    for action in actions(go1, 5):
        before = state
        state, ctrl = npx.native_step(go1.sim, generic_data, state, action)
        out = nm.step(task, hand_data, book, action)
        np.testing.assert_allclose(ctrl, hand_data.ctrl, atol=1e-6)
        np.testing.assert_allclose(generic_data.qpos, hand_data.qpos, atol=1e-5)
        np.testing.assert_allclose(generic_data.qvel, hand_data.qvel, atol=1e-3)
        same = go1.sim.finish(before, jnp.asarray(action, jnp.float32), npx.to_mjx(go1.sim, hand_data))
        np.testing.assert_allclose(
            npx.policy_observation(go1.sim, same), nm.assemble(out.obs, layout), atol=OBS_TOL
        )
        assert float(same.reward) == pytest.approx(out.reward, rel=1e-4, abs=1e-6)
        for name, value in out.terms.items():
            assert float(same.metrics[f"reward/{name}"]) == pytest.approx(value, rel=1e-3, abs=1e-5), name
        assert float(state.reward) == pytest.approx(out.reward, rel=1e-3, abs=1e-5)
        assert bool(state.done) == out.fell
        book.command = np.asarray(state.info["command"], np.float64)  # the task's own draws


def test_only_the_inputs_a_task_changed_reach_the_native_data(go1):
    """A push the task adds to `qvel` replaces those entries natively; the rest stay float64."""
    data = mujoco.MjData(go1.sim.model)
    data.qvel[:] = np.linspace(0.1, 0.9, data.qvel.size)
    before = data.qvel.copy()
    changed = np.zeros(data.qvel.size, bool)
    changed[:2] = True
    value = np.asarray(before + 1.0, np.float32)
    npx.apply_inputs(
        data, {"qvel": (changed, value), "xfrc_applied": (np.zeros((data.xfrc_applied.shape), bool), 0)}
    )
    np.testing.assert_array_equal(data.qvel[:2], value[:2].astype(np.float64))
    np.testing.assert_array_equal(data.qvel[2:], before[2:])
    assert not data.xfrc_applied.any()


BOXES_ON_TERRAIN = """<mujoco><asset><hfield name="h" nrow="9" ncol="9" size="1 1 .1 .1"/></asset>
<worldbody><geom type="hfield" hfield="h"/>
<body pos="0 0 .08" euler="3 2 0"><freejoint/><geom type="box" size=".3 .2 .1"/></body>
<body pos=".6 .6 .08" euler="0 4 0"><freejoint/><geom type="box" size=".3 .2 .1"/></body>
</worldbody></mujoco>"""


def test_contacts_beyond_mjx_layout_convert_with_the_deepest_per_pair():
    """Two boxes sunk into rough terrain: C MuJoCo makes more contacts per box than MJX's layout
    holds (4 per box-heightfield pair), so the plain `put_data` refuses; the conversion keeps the
    4 deepest per pair, each with its own constraint rows."""
    from mujoco import mjx  # noqa: PLC0415 - heavy import

    model = mujoco.MjModel.from_xml_string(BOXES_ON_TERRAIN)
    model.hfield_data[:] = np.random.default_rng(0).uniform(0, 1, model.hfield_data.size)
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    per_pair, _ = npx.mjx_contact_room(model)
    assert per_pair[(0, 1)] == per_pair[(0, 2)] == 4 and data.ncon > 12
    with pytest.raises(ValueError, match="too high"):
        mjx.put_data(model, data, impl=npx.NATIVE_IMPL)

    converted = npx.to_mjx(SimpleNamespace(model=model, task="boxes", vec=SimpleNamespace(env=None)), data)
    fitted = npx.fit_contacts(model, data)
    assert data.ncon > 12 and fitted.ncon == 8  # the native data is left as it was
    dist = np.asarray(converted._impl.contact.dist)
    geom = np.asarray(converted._impl.contact.geom)
    for box in (1, 2):
        deepest = np.sort(data.contact.dist[data.contact.geom[:, 1] == box])[:4]
        np.testing.assert_allclose(np.sort(dist[(geom[:, 1] == box) & (dist < 1)]), deepest, rtol=1e-6)
    rows = 4  # pyramidal cone, condim 3
    for new, old in enumerate(npx.kept_contacts(model, data)):
        a, b = fitted.contact.efc_address[new], data.contact.efc_address[old]
        np.testing.assert_array_equal(fitted.efc_pos[a : a + rows], data.efc_pos[b : b + rows])
        np.testing.assert_array_equal(fitted.efc_force[a : a + rows], data.efc_force[b : b + rows])
        jac = slice(a * model.nv, (a + rows) * model.nv), slice(b * model.nv, (b + rows) * model.nv)
        np.testing.assert_array_equal(fitted.efc_J[jac[0]], data.efc_J[jac[1]])
        assert (fitted.efc_id[a : a + rows] == new).all()


def test_the_host_conversion_is_put_data_left_on_the_host():
    """`host_put_data` (what each native control step converts) gives `mjx.put_data`'s tree: the
    same structure, and per leaf the same dtype, shape and values, as numpy arrays that the jitted
    phase moves in one dispatch."""
    from mujoco import mjx  # noqa: PLC0415 - heavy import

    model = mujoco.MjModel.from_xml_string(BOXES_ON_TERRAIN)
    model.hfield_data[:] = np.random.default_rng(1).uniform(0, 1, model.hfield_data.size)
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    data = npx.fit_contacts(model, data)
    on_device, on_host = mjx.put_data(model, data, impl=npx.NATIVE_IMPL), npx.host_put_data(model, data)
    assert jax.tree.structure(on_host) == jax.tree.structure(on_device)
    for (path, want), got in zip(
        jax.tree_util.tree_leaves_with_path(on_device), jax.tree.leaves(on_host), strict=True
    ):
        assert isinstance(got, np.ndarray), path
        assert (got.dtype, got.shape) == (want.dtype, want.shape), path
        np.testing.assert_array_equal(got, np.asarray(want), err_msg=str(path))
    assert isinstance(mjx.put_data(model, data, impl=npx.NATIVE_IMPL).qpos, jax.Array)  # MJX left as it was


class FrozenEnv(mjx_env.MjxEnv):
    """A Playground env whose step leaves the physics alone (no `mjx_env.step`)."""

    def __init__(self, inner):
        self.inner = inner

    def reset(self, rng):
        return self.inner.reset(rng)

    def step(self, state, action):
        return state.replace(reward=jnp.sum(action) * 0.0)

    xml_path = property(lambda self: self.inner.xml_path)
    action_size = property(lambda self: self.inner.action_size)
    mj_model = property(lambda self: self.inner.mj_model)
    mjx_model = property(lambda self: self.inner.mjx_model)


def test_a_task_without_a_physics_call_is_refused_by_name(go1):
    frozen = go1.env.replace(env=FrozenEnv(npx.mjx_env_of(go1.env.env)), task="FrozenGo1")
    with pytest.raises(ConfigError, match=r"task 'FrozenGo1': its step never calls .*mjx_env\.step"):
        npx.native_simulation(frozen)
    with pytest.raises(ConfigError, match="domain_randomization=false"):
        npx.native_simulation(go1.env.replace(physics=object()))
