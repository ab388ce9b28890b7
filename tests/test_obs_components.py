"""Named Brax observation components (`env.obs_groups.<group>` as a mapping) and component
selection (`env.obs_components`) for Brax and Playground tasks: sizes, layouts, values, errors.

Values are checked by applying each env's (eager, slicing-only) `observe` to one state reset by
a single small jit, so the module compiles one program per env family.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from extras import require_playground

from strl_jax.configs.loader import resolve_config
from strl_jax.envs import make_env_from_config
from strl_jax.envs.obs_components import select_components
from strl_jax.errors import ConfigError
from strl_jax.static_take import contiguous_runs, take_static

NAMED = "env.obs_groups.policy={cart: [0], pole: [1], velocities: [2, 3]}"
PENDULUM_LAYOUT = (("cart", 1), ("pole", 1), ("velocities", 2))


def build(task: str, *overrides: str, amp: bool = False):
    cfg = resolve_config(task, overrides=["env.num_envs=2", *overrides])
    return make_env_from_config(cfg.env, extra_groups=("amp",) if amp else ())


@pytest.fixture(scope="module")
def pendulum_state():
    """One reset inverted_pendulum state (the raw Brax observation is `.obs`)."""
    env = build("inverted_pendulum")
    return jax.jit(env.env.reset)(jax.random.PRNGKey(0))


def observe(env, state) -> dict[str, np.ndarray]:
    return {k: np.asarray(v) for k, v in env.observe(state).items()}


# ---- static gathers -------------------------------------------------------------------------
def test_static_take_is_slices_in_order():
    assert contiguous_runs([3, 4, 5, 0, -1], 8) == ((3, 6), (0, 1), (7, 8))
    x = np.arange(16.0).reshape(2, 8)
    np.testing.assert_array_equal(take_static(x, (3, 4, 5, 0, -1)), x[:, [3, 4, 5, 0, 7]])
    np.testing.assert_array_equal(take_static(x, (2, 3)), x[:, 2:4])


# ---- Brax named groups -----------------------------------------------------------------------
def test_brax_named_group_values_and_components(pendulum_state):
    env = build("inverted_pendulum", NAMED, "env.obs_groups.actor={velocities: [2, 3], cart: [0]}")
    assert env.components == {
        "policy": PENDULUM_LAYOUT,
        "actor": (("velocities", 2), ("cart", 1)),
    }
    assert env.observation_shapes() == {"policy": (4,), "critic": (4,), "actor": (3,)}
    obs, raw = observe(env, pendulum_state), np.asarray(pendulum_state.obs)
    np.testing.assert_array_equal(obs["policy"], raw)
    np.testing.assert_array_equal(obs["critic"], raw)
    np.testing.assert_array_equal(obs["actor"], raw[[2, 3, 0]])
    hash(env.observe)  # a static field of the VecEnv


def test_brax_unnamed_groups_have_no_components():
    env = build("inverted_pendulum", "env.obs_groups.policy=[0, 1]")
    assert env.components == {}
    assert env.observation_shapes()["policy"] == (2,)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("{}", "at least one component"),
        ("{0: [1]}", "names must be strings"),
        ("{cart: []}", "env.obs_groups.policy.cart must be a non-empty list"),
        ("{cart: 0}", "env.obs_groups.policy.cart must be a non-empty list"),
        ("{cart: [0.5]}", "env.obs_groups.policy.cart must be a non-empty list"),
        ("{cart: [true]}", "env.obs_groups.policy.cart must be a non-empty list"),
        ("{cart: [0], pole: [4]}", "env.obs_groups.policy.pole has indices [4] outside"),
    ],
)
def test_brax_named_group_errors(value, expected):
    with pytest.raises(ConfigError, match="env.obs_groups.policy") as err:
        build("inverted_pendulum", f"env.obs_groups.policy={value}")
    assert expected in str(err.value)


# ---- selection on Brax -------------------------------------------------------------------------
def test_brax_selection_reorders_and_subsets(pendulum_state):
    env = build("inverted_pendulum", NAMED, "env.obs_components.policy=[velocities, cart]")
    assert env.components == {"policy": (("velocities", 2), ("cart", 1))}
    assert env.observation_shapes() == {"policy": (3,), "critic": (4,)}
    obs, raw = observe(env, pendulum_state), np.asarray(pendulum_state.obs)
    np.testing.assert_array_equal(obs["policy"], raw[[2, 3, 0]])
    np.testing.assert_array_equal(obs["critic"], raw)  # untouched

    single = build("inverted_pendulum", NAMED, "env.obs_components.policy=pole")
    assert single.components == {"policy": (("pole", 1),)}
    np.testing.assert_array_equal(observe(single, pendulum_state)["policy"], raw[[1]])


def test_brax_selection_on_several_groups_and_batches(pendulum_state):
    env = build(
        "inverted_pendulum",
        NAMED,
        "env.obs_groups.critic={pole: [1], cart: [0]}",
        "env.obs_components={policy: [pole], critic: [cart]}",
    )
    assert env.observation_shapes() == {"policy": (1,), "critic": (1,)}
    batch = jax.tree.map(lambda x: np.stack([x, x]), pendulum_state)
    obs, raw = observe(env, batch), np.asarray(batch.obs)
    np.testing.assert_array_equal(obs["policy"], raw[:, [1]])
    np.testing.assert_array_equal(obs["critic"], raw[:, [0]])


def test_selection_comes_before_amp_group():
    env = build(
        "inverted_pendulum",
        NAMED,
        "env.obs_components.policy=[pole]",
        "env.amp_obs_components=[joint_pos]",
        amp=True,
    )
    shapes = env.observation_shapes()
    assert shapes["policy"] == (1,) and shapes["critic"] == (4,) and "amp" in shapes


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ((NAMED, "env.obs_components.actor=[cart]"), ["unknown observation group", "'policy'", "'critic'"]),
        (
            (NAMED, "env.obs_components.critic=[cart]"),
            ["no named components", "env.obs_groups.<group> as a mapping", "groups with components"],
        ),
        (("env.obs_components.policy=[cart]",), ["no named components"]),  # the unnamed default
        ((NAMED, "env.obs_components.policy=[carts]"), ["['carts']", "valid components", "'velocities'"]),
        ((NAMED, "env.obs_components.policy=[cart, pole, cart]"), ["['cart']", "more than once"]),
        ((NAMED, "env.obs_components.policy=[]"), ["non-empty list"]),
        ((NAMED, "env.obs_components.policy=[1]"), ["non-empty list"]),
    ],
)
def test_brax_selection_errors(overrides, expected):
    with pytest.raises(ConfigError, match="env.obs_components.") as err:
        build("inverted_pendulum", *overrides)
    for part in expected:
        assert part in str(err.value), str(err.value)


def test_non_mapping_selection_is_refused():
    env = build("inverted_pendulum", NAMED)
    with pytest.raises(ConfigError, match="must be a mapping"):
        select_components(env, ["cart"])
    assert select_components(env, {}) is env


# ---- Playground ---------------------------------------------------------------------------------
GO1_WITHOUT_LIN_VEL = [
    "base_ang_vel",
    "projected_gravity",
    "dof_pos",
    "dof_vel",
    "last_action",
    "command",
]


@pytest.fixture(scope="module")
def go1():
    """Go1 with `policy` selected, and one reset state of the single env."""
    require_playground()
    env = build(
        "Go1JoystickFlatTerrain",
        "env.num_envs=32",  # the preset's minibatches divide it; no env is allocated here
        "env.domain_randomization=false",
        f"env.obs_components.policy=[{', '.join(GO1_WITHOUT_LIN_VEL)}]",
    )
    return env, jax.jit(env.env.reset)(jax.random.PRNGKey(0))


def test_playground_selection_values_and_components(go1):
    from strl_jax.envs.playground_components import component_layout  # noqa: PLC0415

    env, state = go1
    layout = dict(component_layout("Go1JoystickFlatTerrain", "state"))
    assert env.components["policy"] == tuple((name, layout[name]) for name in GO1_WITHOUT_LIN_VEL)
    assert env.components["critic"] == component_layout("Go1JoystickFlatTerrain", "privileged_state")
    shapes = env.observation_shapes()
    assert shapes["policy"] == (45,) and shapes["critic"] == (123,)
    obs, full = observe(env, state), {k: np.asarray(v) for k, v in env.observe.base(state).items()}
    assert full["policy"].shape == (48,)
    np.testing.assert_array_equal(obs["policy"], full["policy"][3:])
    np.testing.assert_array_equal(obs["critic"], full["critic"])


def test_playground_selection_reorders_and_errors(go1):
    env, state = go1
    picked = select_components(env, {"policy": ["command", "base_ang_vel"]})
    assert picked.components["policy"] == (("command", 3), ("base_ang_vel", 3))
    np.testing.assert_array_equal(
        observe(picked, state)["policy"], np.asarray(env.observe(state)["policy"])[[42, 43, 44, 0, 1, 2]]
    )
    with pytest.raises(ConfigError, match=r"\['base_lin_vel'\].*valid components"):
        select_components(env, {"policy": ["base_lin_vel"]})  # already dropped
