"""C MuJoCo physics under a Playground task's own code: sim-to-sim for any MjxEnv.

Every Playground 0.2.0 locomotion task steps its physics through one function,
`mujoco_playground._src.mjx_env.step(model, data, ctrl, n_substeps)` (`data.ctrl = ctrl`, then
`n_substeps` times `mjx.step`). Replacing that module attribute while the task's `step` is traced
lets the task compute everything else (motor targets, pushes, observation, reward, termination,
commands and the rest of `state.info`) with its own code, while C MuJoCo (`mujoco.mj_step` on a
`mujoco.MjData` in float64) does the physics. One control step is three phases:

1. `plan`: the task's `step` with the physics replaced by "record the call, return the data
   unchanged" gives the ctrl it asks for and the physics inputs it changed before the call
   (a push on `qvel`, a force in `xfrc_applied`, ...);
2. C MuJoCo applies those changes to the native data and runs `mj_step` `n_substeps` times with
   that ctrl;
3. `finish`: the task's `step` again, the physics replaced by "return the native data", converted
   with `mujoco.mjx.put_data` (MJX's JAX implementation; contacts and constraint rows padded to
   MJX's fixed layout). After `mj_step`, as after `mjx.step` (= `forward`, then integrate), the
   kinematics and sensors date from before the last integration, so the task reads the native
   state exactly where it reads its own.

Both phases start from the same state, and the task draws its noise and commands from
`state.info["rng"]`, so they draw the same. Two jitted phases around a host step, rather than a
`jax.pure_callback` inside one: the native data is host state that persists in float64 between
steps (positions, velocities, warm start), which a pure callback cannot hold. Neither phase
contains any physics, so both compile quickly.

C MuJoCo may create more contacts than MJX's fixed layout holds: on a heightfield its box-terrain
collision returns many contacts per foot, while MJX's collision keeps a fixed number per geom
pair (`ncon` of the pair's collision function, 4 for a box on a heightfield) and `put_data`
refuses a state with more. Only when the plain conversion is refused, it converts a copy of the
native data whose contact list keeps, per geom pair, the deepest contacts (smallest `dist`) up to
that pair's room in MJX's layout (then, per condim, up to the layout's slots of that condim), with
their constraint rows. A task that reads `data.contact` (e.g. Playground's `geoms_colliding`) thus
sees the deepest contacts per pair, as under MJX's own collision; the physics stays C MuJoCo's,
whose `mj_step` used every contact, and contact sensors (`sensordata`) are C MuJoCo's. States
that fit convert unchanged.

A reset runs the task's own `reset`, sets the native data to its positions, velocities and
controls (`mj_forward`) and puts the native data into the state; the reset's observation is the
task's, computed from the same positions by MJX's `forward`. The model is the env's own nominal
`mj_model` (Playground's domain randomiser only changes MJX copies of it); a `VecEnv` with
per-env physics is refused. A task whose step does not call `mjx_env.step` is refused by name.

References: MuJoCo's simulation pipeline (`mj_step` = `mj_forward` + integration) and MJX's
`put_data` (https://mujoco.readthedocs.io/en/stable/mjx.html); Playground's `mjx_env.step`
(https://github.com/google-deepmind/mujoco_playground, `mujoco_playground/_src/mjx_env.py`).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from strl_jax.envs.hfield_contacts import contact_rule_of
from strl_jax.envs.vec_env import VecEnv, cast_like
from strl_jax.errors import ConfigError

# Physics inputs a task may change on `state.data` before it calls the physics (pushes, applied
# forces, mocap targets); the changed entries are copied into the native data.
INPUT_FIELDS = ("qpos", "qvel", "act", "qfrc_applied", "xfrc_applied", "mocap_pos", "mocap_quat")
# What a reset copies from the task's initial data into the native data before `mj_forward`.
RESET_FIELDS = (*INPUT_FIELDS, "ctrl", "qacc_warmstart")
NATIVE_IMPL = "jax"  # the MJX implementation whose data `put_data` builds from an MjData


@dataclasses.dataclass(frozen=True)
class PhysicsCall:
    """One call of `mjx_env.step` as the task made it (traced values)."""

    data: Any  # the mjx.Data the task passed in
    ctrl: jax.Array
    n_substeps: Any


@contextlib.contextmanager
def physics_replaced(result: Callable[[PhysicsCall], Any]) -> Iterator[list[PhysicsCall]]:
    """Inside the context, `mjx_env.step` records its call and returns `result(call)`."""
    from mujoco_playground._src import mjx_env  # noqa: PLC0415 - optional dependency

    calls: list[PhysicsCall] = []
    original = mjx_env.step

    def replaced(model: Any, data: Any, action: jax.Array, n_substeps: Any = 1) -> Any:
        del model  # the nominal model: C MuJoCo simulates the env's own mj_model
        call = PhysicsCall(data=data, ctrl=action, n_substeps=n_substeps)
        calls.append(call)
        return result(call)

    mjx_env.step = replaced
    try:
        yield calls
    finally:
        mjx_env.step = original


def mjx_env_of(env: Any) -> Any:
    """The Playground `MjxEnv` inside `env`'s wrappers (each keeps the wrapped env as `.env`)."""
    from mujoco_playground._src import mjx_env  # noqa: PLC0415 - optional dependency

    seen = env
    for _ in range(16):
        if isinstance(seen, mjx_env.MjxEnv):
            return seen
        seen = getattr(seen, "env", None)
        if seen is None:
            break
    raise ConfigError(
        f"native MuJoCo simulation needs an MJX env (mujoco_playground's mjx_env.MjxEnv: Playground tasks "
        f"or an env of one's own), got {type(env).__name__}; a Brax env's physics (its generalized, "
        f"positional or spring pipeline, or brax.mjx) has no C MuJoCo twin here: deploy its exported "
        f"policy (python -m strl_jax.export) on its own simulator"
    )


# ---- the two traced phases ----------------------------------------------------------------------
def only_call(task: str, calls: list[PhysicsCall]) -> PhysicsCall:
    """The one physics call of a step; none or several are refused by name."""
    if len(calls) == 1:
        return calls[0]
    if not calls:
        raise ConfigError(
            f"task {task!r}: its step never calls mujoco_playground's mjx_env.step(model, data, ctrl, "
            "n_substeps), so its physics cannot be replaced by C MuJoCo; native simulation supports "
            "tasks whose step does (Playground's locomotion tasks: Go1JoystickFlatTerrain, "
            "BerkeleyHumanoidJoystickFlatTerrain, G1JoystickFlatTerrain, ...)"
        )
    raise ConfigError(
        f"task {task!r}: its step calls mjx_env.step {len(calls)} times; native simulation replaces "
        "exactly one physics call per control step"
    )


def physics_call(env: Any, task: str, state: Any, action: jax.Array) -> PhysicsCall:
    """The physics call of the task's step, traced with the physics left out (data unchanged)."""
    with physics_replaced(lambda call: call.data) as calls:
        env.step(state, action)
    return only_call(task, calls)


def plan_step(env: Any, task: str, state: Any, action: jax.Array) -> tuple[jax.Array, dict]:
    """Phase 1: the ctrl the task's step asks for, and per physics input field
    `(changed entries, their new values)` of what it set on the data before the physics."""
    call = physics_call(env, task, state, action)
    inputs = {}
    for name in INPUT_FIELDS:
        new, old = getattr(call.data, name), getattr(state.data, name)
        inputs[name] = (new != old, new)
    return jnp.asarray(call.ctrl), inputs


def finish_step(env: Any, task: str, state: Any, action: jax.Array, data: Any) -> Any:
    """Phase 3: the task's step with the physics ending in `data` (the native result)."""
    data = cast_like(data, state.data)
    with physics_replaced(lambda _call: data) as calls:
        nxt = env.step(state, action)
    only_call(task, calls)
    return nxt


def adopt_data(state: Any, data: Any) -> Any:
    """`state` with its physics replaced by `data` (cast to the state's dtypes)."""
    return state.replace(data=cast_like(data, state.data))


# ---- the simulation --------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, eq=False)
class NativeSimulation:
    """A VecEnv's single env stepped by C MuJoCo: its jitted phases and the native model."""

    vec: VecEnv
    task: str
    model: Any  # mujoco.MjModel: the env's nominal model
    n_substeps: int
    plan: Callable[[Any, jax.Array], tuple[jax.Array, dict]]
    finish: Callable[[Any, jax.Array, Any], Any]
    adopt: Callable[[Any, Any], Any]
    observe: Callable[[Any], dict[str, jax.Array]]


def native_simulation(vec: VecEnv) -> NativeSimulation:
    """Check that `vec`'s task can run on C MuJoCo and trace its phases once.

    `vec` must simulate nominal physics (no per-env randomised model) with MJX's JAX
    implementation (the layout `put_data` converts to); its single env may be wrapped (held
    command, depth camera): the wrappers run in both phases.
    """
    task = vec.task or type(vec.env).__name__
    if vec.physics is not None:
        raise ConfigError(
            f"task {task!r}: native simulation runs the nominal model; build the env with "
            "env.domain_randomization=false"
        )
    base = mjx_env_of(vec.env)
    impl = getattr(getattr(base.mjx_model, "impl", None), "value", NATIVE_IMPL)
    if impl != NATIVE_IMPL:
        raise ConfigError(
            f"task {task!r} runs MJX impl={impl!r}; native simulation converts C MuJoCo's data to MJX's "
            f"{NATIVE_IMPL!r} layout; valid: env.playground.impl={NATIVE_IMPL}"
        )
    env = vec.env
    abstract = jax.eval_shape(env.reset, jax.random.PRNGKey(0))
    action = jax.ShapeDtypeStruct((vec.action_size,), jnp.float32)
    found: list[PhysicsCall] = []
    jax.eval_shape(lambda s, a: found.append(physics_call(env, task, s, a)), abstract, action)
    n_substeps = found[0].n_substeps
    if isinstance(n_substeps, bool) or not isinstance(n_substeps, int | np.integer):
        raise ConfigError(
            f"task {task!r} passes a traced n_substeps to mjx_env.step; native simulation needs a "
            "Python int (the number of mj_step calls per control step)"
        )
    return NativeSimulation(
        vec=vec,
        task=task,
        model=base.mj_model,
        n_substeps=int(n_substeps),
        plan=jax.jit(lambda s, a: plan_step(env, task, s, a)),
        finish=jax.jit(lambda s, a, d: finish_step(env, task, s, a, d)),
        adopt=jax.jit(adopt_data),
        observe=jax.jit(vec.observe),
    )


def mjx_contact_room(model: Any) -> tuple[dict[tuple[int, int], int], dict[int, int]]:
    """MJX's contact layout for `model` (the layout `put_data` fills): `(contacts per geom pair,
    keyed by the sorted geom ids; contact slots per condim)`."""
    from mujoco.mjx._src import collision_driver  # noqa: PLC0415 - heavy import, only where simulated

    per_pair = {}
    for key, pairs in collision_driver._geom_groups(model).items():  # noqa: SLF001 - MJX's pair grouping
        if key.types[1] == mujoco.mjtGeom.mjGEOM_SDF:
            room = int(model.opt.sdf_initpoints)
        else:
            room = int(collision_driver._COLLISION_FUNC[key.types].ncon)  # noqa: SLF001
        for g1, g2, _ in pairs:
            per_pair[(min(g1, g2), max(g1, g2))] = room
    dims, slots = np.unique(collision_driver.make_condim(model), return_counts=True)
    return per_pair, {int(dim): int(n) for dim, n in zip(dims, slots, strict=True)}


def kept_contacts(model: Any, data: Any) -> np.ndarray:
    """Indices (ascending) of the native contacts that fit MJX's layout: per geom pair the deepest
    (smallest `dist`) up to the pair's room, then per condim the deepest up to its slots."""
    per_pair, per_dim = mjx_contact_room(model)
    contacts = data.contact
    used: dict[tuple, int] = {}
    kept = []
    for i in np.argsort(contacts.dist, kind="stable"):
        pair, dim = tuple(sorted(int(g) for g in contacts.geom[i])), int(contacts.dim[i])
        room = {("pair", pair): per_pair.get(pair, data.ncon), ("dim", dim): per_dim.get(dim, 0)}
        if all(used.get(key, 0) < n for key, n in room.items()):
            kept.append(i)
            for key in room:
                used[key] = used.get(key, 0) + 1
    return np.sort(np.asarray(kept, dtype=int))


CONTACT_ROWS = (
    mujoco.mjtConstraint.mjCNSTR_CONTACT_FRICTIONLESS,
    mujoco.mjtConstraint.mjCNSTR_CONTACT_PYRAMIDAL,
    mujoco.mjtConstraint.mjCNSTR_CONTACT_ELLIPTIC,
)
# Per-row constraint fields moved with the kept contacts' rows (those `put_data` reads, the rows'
# type and id; the Jacobian's rows as stored: dense rows, or the sparse rows' counts and addresses).
EFC_ROW_FIELDS = (
    "efc_type",
    "efc_id",
    "efc_pos",
    "efc_margin",
    "efc_frictionloss",
    "efc_D",
    "efc_aref",
    "efc_force",
)
EFC_SPARSE_ROW_FIELDS = ("efc_J_rownnz", "efc_J_rowadr")


def fit_contacts(model: Any, data: Any) -> Any:
    """A copy of the native data whose contact list holds only `kept_contacts` (in their order),
    and whose constraint rows are the non-contact rows, then each kept contact's rows."""
    kept = kept_contacts(model, data)
    nefc = data.nefc
    efc_id = data.efc_id[:nefc]
    is_contact = np.isin(data.efc_type[:nefc], CONTACT_ROWS)
    order, new_id = [np.flatnonzero(~is_contact)], [efc_id[~is_contact]]
    address = np.full(kept.size, -1, dtype=int)
    start = order[0].size
    for new, old in enumerate(kept):
        rows = np.flatnonzero(is_contact & (efc_id == old))
        if rows.size:
            address[new], start = start, start + rows.size
            order.append(rows)
            new_id.append(np.full(rows.size, new))
    order = np.concatenate(order)

    fitted = copy.copy(data)
    contacts = fitted.contact
    for name in (f for f in dir(contacts) if not f.startswith("_")):
        field = getattr(contacts, name)
        field[: kept.size] = field[kept].copy()
    contacts.efc_address[: kept.size] = address
    sparse = mujoco.mj_isSparse(model)
    for name in EFC_ROW_FIELDS + (EFC_SPARSE_ROW_FIELDS if sparse else ()):
        field = getattr(fitted, name)
        field[: order.size] = field[order].copy()
    if not sparse:
        jacobian = fitted.efc_J[: nefc * model.nv].reshape(nefc, model.nv)
        jacobian[: order.size] = jacobian[order].copy()
    fitted.efc_id[: order.size] = np.concatenate(new_id)
    fitted.ncon, fitted.nefc = kept.size, order.size
    return fitted


class _HostOnlyJax:
    """The `jax` module as `mujoco.mjx`'s io module sees it inside `host_put_data`: every name
    forwards to jax, except `device_put`, which leaves the tree on the host."""

    def __getattr__(self, name: str) -> Any:
        return getattr(jax, name)

    @staticmethod
    def device_put(tree: Any, *_args: Any, **_kwargs: Any) -> Any:
        return tree


def _host_leaf(leaf: Any) -> Any:
    """A numpy array of the dtype JAX would give the leaf (float64 -> float32 without x64)."""
    value = np.asarray(leaf)
    return value.astype(jax.dtypes.canonicalize_dtype(value.dtype), copy=False)


def host_put_data(model: Any, data: Any) -> Any:
    """`mujoco.mjx.put_data(model, data, impl="jax")` with numpy leaves of the same values, dtypes
    and shapes. MJX builds the tree on the host and then moves it to the device leaf by leaf
    (`jax.device_put`, then a cast of each leaf): about two thirds of a native control step. The
    jitted phase that takes the tree moves it in its own dispatch instead. Where MJX's io module
    is laid out otherwise, the tree comes back on the device, as `put_data` gives it."""
    from mujoco import mjx  # noqa: PLC0415 - heavy import, only where simulated
    from mujoco.mjx._src import io as mjx_io  # noqa: PLC0415 - the module whose transfer is deferred

    original = getattr(mjx_io, "jax", None)
    if original is jax:
        mjx_io.jax = _HostOnlyJax()
    try:
        tree = mjx.put_data(model, data, impl=NATIVE_IMPL)
    finally:
        if original is jax:
            mjx_io.jax = original
    return jax.tree.map(_host_leaf, tree)


def to_mjx(sim: NativeSimulation, data: Any) -> Any:
    """The native data as MJX data (`mujoco.mjx.put_data`, MJX's JAX implementation, numpy leaves:
    `host_put_data`); a state with more contacts than MJX's layout holds converts with the deepest
    per pair (`fit_contacts`)."""
    with contact_rule_of(sim.vec.env):  # the layout the env's own states have
        try:
            return host_put_data(sim.model, data)
        except ValueError:  # more contacts or constraints than MJX's fixed layout holds
            pass
        try:
            return host_put_data(sim.model, fit_contacts(sim.model, data))
        except ValueError as err:  # constraints other than contacts exceed the layout
            message = f"task {sim.task!r}: C MuJoCo's state does not fit MJX's layout: {err}"
            raise ConfigError(message) from None


def native_reset(sim: NativeSimulation, state: Any) -> tuple[Any, Any]:
    """`(native data, state)` from one initial state of the task (`env.reset`, one env): the
    native data at its positions, velocities and controls, forward-computed, and the state with
    that data in place of its own."""
    data = mujoco.MjData(sim.model)
    for name in RESET_FIELDS:
        value = np.asarray(getattr(state.data, name), np.float64)
        getattr(data, name)[:] = value.reshape(getattr(data, name).shape)
    data.time = float(state.data.time)
    mujoco.mj_forward(sim.model, data)
    return data, sim.adopt(state, to_mjx(sim, data))


def apply_inputs(data: Any, inputs: dict) -> None:
    """Copy the physics inputs the task changed (`plan_step`) into the native data."""
    for name, (changed, value) in inputs.items():
        if np.any(changed):
            target = getattr(data, name)
            mask = np.asarray(changed).reshape(target.shape)
            target[mask] = np.asarray(value, np.float64).reshape(target.shape)[mask]


def control_step(sim: NativeSimulation, data: Any, state: Any, action: np.ndarray) -> tuple[Any, np.ndarray]:
    """One control step of the task on C MuJoCo (`data` changes in place): `(state', ctrl)`."""
    action = jnp.asarray(action, jnp.float32)
    ctrl, inputs = jax.device_get(sim.plan(state, action))
    apply_inputs(data, inputs)
    data.ctrl[:] = np.asarray(ctrl, np.float64)
    for _ in range(sim.n_substeps):
        mujoco.mj_step(sim.model, data)
    return sim.finish(state, action, to_mjx(sim, data)), np.asarray(ctrl)


def native_step(sim: NativeSimulation, data: Any, state: Any, action: np.ndarray) -> tuple[Any, np.ndarray]:
    """One VecEnv step on C MuJoCo: the action clipped to `clip_actions`, held for
    `action_repeat` control steps (rewards summed, done if any was, `termination_reward` added
    on a terminal step), as `VecEnv.step` does."""
    action = np.asarray(action, np.float32)
    if sim.vec.clip_actions is not None:
        action = np.clip(action, -sim.vec.clip_actions, sim.vec.clip_actions)
    reward, done, ctrl = 0.0, 0.0, np.zeros(0)
    for _ in range(sim.vec.action_repeat):
        state, ctrl = control_step(sim, data, state, action)
        reward += float(state.reward)
        done = max(done, float(state.done))
    charged = done > 0 and bool(sim.vec.termination_reward)
    if charged:
        reward += sim.vec.termination_reward
    if sim.vec.action_repeat > 1 or charged:
        state = state.replace(
            reward=jnp.asarray(reward, state.reward.dtype), done=jnp.asarray(done, state.done.dtype)
        )
    return state, ctrl


def policy_observation(sim: NativeSimulation, state: Any, group: str = "policy") -> np.ndarray:
    """The group the VecEnv's `observe` builds from the state (components, height scan, ...)."""
    return np.asarray(sim.observe(state)[group])
