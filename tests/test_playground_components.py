"""Named components of Playground observations: every layout matches its task's observation, and on
Go1 and G1 each named component holds the quantity it claims after a reset and after a step."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from extras import require_playground

require_playground()

from mujoco_playground import registry  # noqa: E402
from mujoco_playground._src import mjx_env  # noqa: E402
from mujoco_playground._src.locomotion.g1 import g1_constants  # noqa: E402
from mujoco_playground._src.locomotion.go1 import go1_constants  # noqa: E402

from strl_jax.envs.menagerie import use_offline_menagerie  # noqa: E402
from strl_jax.envs.playground_components import (  # noqa: E402
    component_indices,
    component_layout,
    component_slices,
    laid_out_tasks,
)
from strl_jax.errors import ConfigError  # noqa: E402

KEYS = ("state", "privileged_state")


def loaded(task: str, overrides: dict[str, Any] | None = None) -> tuple[Any, Any]:
    """`(env, resolved config)` of a task with MJX's JAX implementation (each test loads its own)."""
    use_offline_menagerie(task)
    config = registry.get_default_config(task)
    flat = {**(overrides or {}), **({"impl": "jax"} if "impl" in config else {})}
    env = registry.load(task, config=config, config_overrides=flat)
    return env, config  # `load` resolves `config` in place (overrides, per-task changes)


def observation_sizes(env: Any) -> dict[str, int]:
    """`{key: size}` of the reset observation, from shapes alone (nothing compiled)."""
    obs = jax.eval_shape(env.reset, jax.random.PRNGKey(0)).obs
    obs = obs if isinstance(obs, dict) else {"state": obs}
    return {key: value.shape[-1] for key, value in obs.items()}


def test_every_registry_task_is_laid_out_with_unique_names():
    assert set(laid_out_tasks()) == set(registry.ALL_ENVS)
    for task in registry.ALL_ENVS:
        config = registry.get_default_config(task)
        assert component_layout(task, "state", config) is not None, task
        for key in KEYS:
            layout = component_layout(task, key, config)
            if layout is None:
                continue
            names = [name for name, _ in layout]
            assert len(set(names)) == len(names), (task, key, names)
            assert all(isinstance(size, int) and size > 0 for _, size in layout), (task, key)
    assert component_layout("NoSuchTask", "state", None) is None
    assert component_layout("Go1JoystickFlatTerrain", "no_such_key", None) is None


@pytest.mark.slow
@pytest.mark.parametrize("task", registry.ALL_ENVS)
def test_layout_sizes_sum_to_the_observation_size(task):
    env, config = loaded(task)
    sizes = observation_sizes(env)
    for key, size in sizes.items():
        layout = component_layout(task, key, config)
        assert layout is not None, (task, key)
        assert sum(s for _, s in layout) == size, (task, key, layout)
    assert all(component_layout(task, key, config) is None for key in set(KEYS) - set(sizes))


@pytest.mark.parametrize(
    ("task", "setting", "value"),
    [("LeapCubeRotateZAxis", "history_len", 3), ("SpotFlatTerrainJoystick", "history_len", 5)],
)
def test_config_dependent_layouts_follow_the_config(task, setting, value):
    env, config = loaded(task, {setting: value})
    assert config[setting] == value
    for key, size in observation_sizes(env).items():
        assert sum(s for _, s in component_layout(task, key, config)) == size, key
    assert component_layout(task, "state", config) != component_layout(task, "state", None)


def test_vision_observations_are_not_laid_out():
    config = registry.get_default_config("CartpoleBalance")
    config.vision = True
    assert component_layout("CartpoleBalance", "state", config) is None


def test_slices_indices_and_unknown_names():
    layout = (("a", 2), ("b", 3), ("c", 1))
    assert component_slices(layout, ["c", "a"]) == ((5, 6), (0, 2))
    assert component_slices(layout, "b") == ((2, 5),)
    np.testing.assert_array_equal(component_indices(layout, ["b", "c"]), [2, 3, 4, 5])
    assert component_indices(layout, []).size == 0
    with pytest.raises(ConfigError, match=r"\['lin_vel'\].*\['a', 'b', 'c'\]"):
        component_slices(layout, ["a", "lin_vel"])


# ---- values on Go1 and G1 --------------------------------------------------------------------


def sensor(env: Any, data: Any, names: list[str]) -> jax.Array:
    return jnp.concatenate([mjx_env.get_sensor_data(env.mj_model, data, name) for name in names])


def expected_values(task: str, env: Any, data: Any, info: dict) -> dict[str, Any]:
    """What each component should hold in the observation made from `data` and `info` (at a step:
    the info before the step, as the task observes before it updates its info)."""
    if task.startswith("Go1"):
        frame, pose, consts = (), "home", go1_constants
        torso = env.mj_model.body(consts.ROOT_BODY).id
        extra = {
            "projected_gravity": env.get_gravity(data),
            "feet_contact": info["last_contact"],
            "perturbation_force": data.xfrc_applied[torso, :3],
            "perturbation_active": info["steps_since_last_pert"] >= info["steps_until_next_pert"],
        }
    else:
        frame, pose, consts = ("pelvis",), "knees_bent", g1_constants
        imu = env.mj_model.site("imu_in_pelvis").id
        found = [
            mjx_env.get_sensor_data(env.mj_model, data, f"{foot}_floor_found")[0]
            for foot in consts.FEET_SITES
        ]
        extra = {
            "projected_gravity": data.site_xmat[imu].T @ jnp.array([0.0, 0.0, -1.0]),
            "feet_contact": jnp.stack(found) > 0,  # the current contact, passed to `_get_obs`
            "base_height": data.qpos[2],
            "gait_phase": jnp.concatenate([jnp.cos(info["phase"]), jnp.sin(info["phase"])]),
        }
    feet_vel = [mjx_env.get_sensor_data(env.mj_model, data, f"{s}_global_linvel") for s in consts.FEET_SITES]
    return {
        "base_lin_vel": env.get_local_linvel(data, *frame),
        "base_ang_vel": env.get_gyro(data, *frame),
        "dof_pos": data.qpos[7:] - env.mj_model.keyframe(pose).qpos[7:],
        "dof_vel": data.qvel[6:],
        "last_action": info["last_act"],
        "command": info["command"],
        "accelerometer": env.get_accelerometer(data, *frame),
        "global_ang_vel": env.get_global_angvel(data, *frame),
        "actuator_force": data.actuator_force,
        "feet_vel": jnp.concatenate(feet_vel),
        **extra,
    }


def named(task: str, config: Any, obs: dict, key: str) -> dict[str, np.ndarray]:
    """`{component: value}` of one observation key, cut by its layout."""
    layout = component_layout(task, key, config)
    names = [name for name, _ in layout]
    return {
        n: np.asarray(obs[key][a:b]) for n, (a, b) in zip(names, component_slices(layout, names), strict=True)
    }


def check_components(task: str, config: Any, obs: dict, expected: dict[str, Any]) -> set[str]:
    """Compare every component with its expected value; the names that were checked."""
    state = named(task, config, obs, "state")
    privileged = named(task, config, obs, "privileged_state")
    for name, value in privileged.items():  # noise off: the policy's copy equals the true value
        if name.startswith("state_"):
            np.testing.assert_allclose(value, state[name.removeprefix("state_")], err_msg=name)
    checked = set()
    for key, parts in (("state", state), ("privileged_state", privileged)):
        for name, value in parts.items():
            if name in expected:
                want = np.ravel(np.asarray(expected[name], dtype=np.float32))
                np.testing.assert_allclose(value, want, rtol=1e-5, atol=1e-5, err_msg=f"{task} {key} {name}")
                checked.add(name)
    return checked


@pytest.mark.parametrize("task", ["Go1JoystickFlatTerrain", "G1JoystickFlatTerrain"])
def test_components_hold_their_values_after_reset_and_step(task):
    env, config = loaded(task, {"noise_config.level": 0.0})
    nu = env.action_size
    previous_action = jnp.linspace(-0.5, 0.5, nu)

    @jax.jit
    def reset_and_step(key):
        first = env.reset(key)
        # A known previous action, which the step's observation reports.
        before = {**first.info, "last_act": previous_action}
        second = env.step(first.replace(info=dict(before)), jnp.full(nu, 0.1))  # step edits its info
        return first, before, second

    first, before, second = reset_and_step(jax.random.PRNGKey(3))

    expected = expected_values(task, env, first.data, first.info)
    expected["feet_air_time"] = first.info["feet_air_time"]
    checked = check_components(task, config, first.obs, expected)
    np.testing.assert_array_equal(named(task, config, first.obs, "state")["last_action"], 0.0)
    gravity = named(task, config, first.obs, "state")["projected_gravity"]
    np.testing.assert_allclose(gravity, [0.0, 0.0, -1.0], atol=1e-5)  # a level start

    checked |= check_components(task, config, second.obs, expected_values(task, env, second.data, before))
    np.testing.assert_allclose(named(task, config, second.obs, "state")["last_action"], previous_action)

    names = {n for key in KEYS for n, _ in component_layout(task, key, config) if not n.startswith("state_")}
    assert names <= checked, f"not value-checked: {names - checked}"
