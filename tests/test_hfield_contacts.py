"""C MuJoCo's heightfield contacts inside MJX (`env.hfield_contacts: mujoco`).

On states of a Go1 on Playground's rough terrain (dropped at its home pose on spots of the field
and settled by C MuJoCo, its legs then driven off the pose so the feet roll over the prisms), MJX
under the rule makes the contacts C MuJoCo makes and accelerates the robot as C MuJoCo does; under
MJX's own rule (4 contacts at most, within a millimetre of the deepest) it does not, which is the
gap the rule closes (`bench/contact_agreement.py` measures it on a policy's states).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from extras import require_playground

require_playground()

from strl_jax.configs.loader import resolve_config  # noqa: E402
from strl_jax.envs import make_env_from_config  # noqa: E402
from strl_jax.envs.hfield_contacts import (  # noqa: E402
    SLOTS,
    check_hfield_contacts,
    deepest_penetrating,
    mujoco_hfield_contacts,
)
from strl_jax.errors import ConfigError  # noqa: E402

TASK = "Go1JoystickRoughTerrain"
FEET = ("FR", "FL", "RR", "RL")


@pytest.fixture(scope="module")
def go1_rough():
    from mujoco_playground import registry

    from strl_jax.envs.menagerie import use_offline_menagerie

    use_offline_menagerie(TASK)
    cfg = registry.get_default_config(TASK)
    cfg.impl = "jax"
    return registry.load(TASK, config=cfg)


def settled_states(model, starts: int = 6, seed: int = 0) -> np.ndarray:
    """(qpos, qvel, ctrl) rows of C MuJoCo states with feet on the heightfield."""
    rng = np.random.default_rng(seed)
    data = mujoco.MjData(model)
    home = model.keyframe("home").qpos
    rows = []
    for _ in range(starts):
        mujoco.mj_resetData(model, data)
        data.qpos[:] = home
        data.qpos[:2] = rng.uniform(-2.0, 2.0, size=2)
        data.qpos[2] += 0.3  # above the field's highest bumps; it falls onto them
        data.ctrl[:] = home[7:]
        for step in range(300):
            if step >= 150:  # drive the legs off the pose: the feet shift over the prisms
                data.ctrl[:] = home[7:] + 0.3 * np.sin(0.05 * step + np.arange(12))
            mujoco.mj_step(model, data)
            if step >= 150 and step % 15 == 0:
                rows.append(np.concatenate([data.qpos, data.qvel, data.ctrl]))
    return np.asarray(rows)


def native(model, rows: np.ndarray, feet: list[int]) -> tuple[np.ndarray, np.ndarray, int]:
    """C MuJoCo's accelerations and penetrating contacts per foot at each state, and how many of
    those contacts push more sideways than up (out through a prism's vertical side)."""
    data = mujoco.MjData(model)
    nq, nv = model.nq, model.nv
    qacc, counts, sideways = [], [], 0
    for row in rows:
        data.qpos[:], data.qvel[:], data.ctrl[:] = row[:nq], row[nq : nq + nv], row[nq + nv :]
        mujoco.mj_forward(model, data)
        qacc.append(data.qacc.copy())
        contact = data.contact[: data.ncon]
        geoms = np.stack([contact.geom1, contact.geom2], -1)
        counts.append([int(np.sum(np.any(geoms == g, -1) & (contact.dist < 0))) for g in feet])
        sideways += int(np.sum((contact.dist < 0) & (np.abs(contact.frame[:, 2]) < 0.5)))
    return np.asarray(qacc), np.asarray(counts), sideways


def mjx_forward(mjx_model, rows: np.ndarray, feet: list[int], rule: str) -> tuple[np.ndarray, np.ndarray]:
    from mujoco import mjx

    nq, nv = mjx_model.nq, mjx_model.nv
    opened = mujoco_hfield_contacts if rule == "mujoco" else None

    def one(row):
        d = template.replace(qpos=row[:nq], qvel=row[nq : nq + nv], ctrl=row[nq + nv :])
        d = mjx.forward(mjx_model, d)
        contact = d._impl.contact
        mine = [jnp.sum(jnp.any(contact.geom == g, -1) & (contact.dist < 0)) for g in feet]
        return d.qacc, jnp.stack(mine)

    if opened is None:
        template = mjx.make_data(mjx_model)
        out = jax.jit(jax.vmap(one))(jnp.asarray(rows, jnp.float32))
    else:
        with opened():
            template = mjx.make_data(mjx_model)
            out = jax.jit(jax.vmap(one))(jnp.asarray(rows, jnp.float32))
    return tuple(np.asarray(x, np.float64) for x in out)


@pytest.fixture(scope="module")
def compared(go1_rough):
    model = go1_rough.mj_model
    feet = [model.geom(name).id for name in FEET]
    rows = settled_states(model)
    c_qacc, c_counts, sideways = native(model, rows, feet)
    results = {rule: mjx_forward(go1_rough.mjx_model, rows, feet, rule) for rule in ("mjx", "mujoco")}
    return c_qacc, c_counts, sideways, results


def relative_gaps(qacc: np.ndarray, reference: np.ndarray) -> np.ndarray:
    return np.linalg.norm(qacc - reference, axis=-1) / np.linalg.norm(reference, axis=-1)


def test_the_states_press_feet_onto_several_prisms(compared):
    """The comparison is only worth something where C MuJoCo holds a foot with several contacts,
    some of them against a prism's side."""
    _, c_counts, sideways, _ = compared
    touching = c_counts[c_counts > 0]
    assert touching.size >= 40 and np.mean(touching >= 2) >= 0.5, np.bincount(touching)
    assert sideways >= 5, sideways


def test_mujoco_rule_makes_c_mujocos_contacts_and_accelerations(compared):
    c_qacc, c_counts, _, results = compared
    qacc, counts = results["mujoco"]
    assert c_counts.max() <= SLOTS
    np.testing.assert_array_equal(counts, c_counts)
    # where a foot touches the field (in the air a state's joint limits alone, under one solver
    # iteration in float32 against float64, can differ by 20%)
    touching = c_counts.sum(axis=-1) > 0
    gaps = relative_gaps(qacc[touching], c_qacc[touching])
    assert np.median(gaps) < 1e-3 and gaps.max() < 0.05, np.percentile(gaps, [50, 90, 100])


def test_mjx_rule_differs_where_the_mujoco_rule_agrees(compared):
    """MJX's own rule keeps fewer contacts per foot than C MuJoCo and accelerates the robot
    differently: the agreement above is the rule's doing."""
    c_qacc, c_counts, _, results = compared
    qacc, counts = results["mjx"]
    fewer = np.any(counts < c_counts, axis=-1)  # states where MJX's rule drops a contact
    assert np.mean(fewer) > 0.3, np.mean(fewer)
    mjx_gaps = relative_gaps(qacc[fewer], c_qacc[fewer])
    rule_gaps = relative_gaps(results["mujoco"][0][fewer], c_qacc[fewer])
    assert np.median(mjx_gaps) > 10 * np.median(rule_gaps)


def test_deepest_penetrating_keeps_the_deepest_prisms_once():
    dist = jnp.array([0.01, -0.004, -0.009, 0.02, -0.004, -0.001, -0.002])
    pos = jnp.array([[i, 0.0, 0.0] for i in range(7)], jnp.float32).at[4].set(jnp.array([1.0, 0.0, 0.0]))
    normal = jnp.tile(jnp.array([0.0, 0.0, 1.0]), (7, 1))
    kept, where, _ = deepest_penetrating(dist, pos, normal, slots=4)
    # deepest first; prism 4 repeats prism 1 (same point, same depth): kept once, its slot inactive
    np.testing.assert_allclose(np.asarray(kept), [-0.009, -0.004, 1.0, -0.002])
    np.testing.assert_array_equal(np.asarray(where[:, 0]), [2, 1, 1, 6])


def test_the_setting_reaches_the_env_step():
    """`env.hfield_contacts: mujoco` gives each foot-field pair SLOTS contact slots in the traced
    step (MJX's rule: 4)."""

    def contact_slots(rule: str) -> int:
        cfg = resolve_config(TASK, overrides=["env.num_envs=32", f"env.hfield_contacts={rule}"])
        env = make_env_from_config(cfg.env, num_envs=2)
        state = jax.eval_shape(env.reset, jax.random.PRNGKey(0))[0]
        return state.brax_state.data._impl.contact.dist.shape[-1]

    assert contact_slots("mujoco") - contact_slots("mjx") == len(FEET) * (SLOTS - 4)


def test_bad_values_and_tasks_are_refused():
    with pytest.raises(ConfigError, match=r"valid: \['mjx', 'mujoco'\]"):
        check_hfield_contacts("c")
    for task, found in (
        ("Go1JoystickFlatTerrain", "has no heightfield"),
        ("BerkeleyHumanoidJoystickRoughTerrain", "also touches"),
        ("ant", "not Brax task"),
    ):
        cfg = resolve_config(task, overrides=["env.num_envs=32", "env.hfield_contacts=mujoco"])
        with pytest.raises(ConfigError, match=found):
            make_env_from_config(cfg.env, num_envs=2)
