"""Heightfield contacts as C MuJoCo makes them, inside MJX's JAX implementation.

A sphere pressed into a heightfield overlaps several of the field's triangular prisms. C MuJoCo
(`mjc_ConvexHField` in engine_collision_convex.c) keeps one contact for every prism the geom
penetrates (up to 50 per pair), each with that prism's own normal: a foot that barely overlaps a
neighbouring prism is pushed out through that prism's vertical side, sideways. MJX's `hfield_sphere`
(mjx/_src/collision_convex.py) computes the per-prism contacts too, but keeps at most 4, only those
within a millimetre of the deepest, and turns sideways normals to the prism's top face. On Go1's
rough terrain a touching foot has 2-3 contacts in C MuJoCo and 1.4 in MJX, so from the same state
the engines accelerate the robot differently, and a policy trained in MJX meets other ground in C
MuJoCo (`bench/contact_agreement.py`, `bench/sim_to_sim.py --hfield-contacts`).

`env.hfield_contacts: mujoco` trains on C MuJoCo's contacts: every penetrating prism's, with its own
normal, the deepest first, in `SLOTS` slots per pair (C MuJoCo made at most 6 per Go1 foot on the
task's field; where more prisms penetrate, the deepest are kept). Sphere geoms only (Go1's feet);
MJX's own rule (`mjx`, the default) stays Playground's physics.

The rule replaces MJX's collision function for (heightfield, sphere) while the wrapped env's `reset`
and `step` are traced: jax traces each jitted program once, so the compiled programs keep it and
nothing else in the process sees it.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp

from strl_jax.errors import ConfigError

HFIELD_CONTACTS = ("mjx", "mujoco")
SLOTS = 6  # contacts per (heightfield, sphere) pair under the `mujoco` rule


def check_hfield_contacts(value: str) -> str:
    """`env.hfield_contacts`, checked."""
    if value not in HFIELD_CONTACTS:
        raise ConfigError(
            f"env.hfield_contacts={value!r} names no contact rule; valid: {list(HFIELD_CONTACTS)}"
        )
    return value


def deepest_penetrating(dist: jax.Array, pos: jax.Array, normal: jax.Array, slots: int = SLOTS):
    """C MuJoCo's choice among per-prism contacts `(dist [P], pos [P, 3], normal [P, 3])`: the
    `slots` deepest, each one prism's; a prism counted twice (MJX clips its sub-grid at the field's
    edge, repeating the last row or column) is kept once. Contacts that do not penetrate stay in
    their slots with their positive distance, which the solver leaves inactive, as MJX does."""
    order = jnp.argsort(dist)[:slots]
    dist, pos, normal = dist[order], pos[order], normal[order]
    same = jnp.all(pos[:, None] == pos[None], axis=-1) & (dist[:, None] == dist[None])
    repeated = jnp.any(jnp.tril(same, k=-1), axis=1)
    return jnp.where(repeated, 1.0, dist), pos, normal


def prism_contacts(h: Any, sphere: Any, subgrid_size: tuple[int, int]) -> tuple[jax.Array, ...]:
    """`(dist [P], pos [P, 3], normal [P, 3])`: the sphere against each triangular prism of the
    heightfield's cells under it (`subgrid_size` cells, two prisms each), in the field's frame.

    A cell's corners (c, r), (c+1, r), (c, r+1), (c+1, r+1) at heights `data[c, r] * size[2]`
    split along the diagonal from (c, r) to (c+1, r+1); each prism runs from its triangle down
    to the field's base (`-size[3]`), as in C MuJoCo. Each contact keeps its prism's own normal,
    as C MuJoCo's does: sideways where the sphere barely overlaps the prism's vertical side (MJX's
    `hfield_sphere` turns such normals to the top face's).
    """
    from mujoco.mjx._src import mesh  # noqa: PLC0415 - MJX's prism as a convex polytope
    from mujoco.mjx._src.collision_convex import _sphere_convex  # noqa: PLC0415

    center = h.mat.T @ (sphere.pos - h.pos)
    local = sphere.replace(pos=center, mat=h.mat.T @ sphere.mat)
    radius = jnp.max(sphere.size)
    half_x, half_y, height, base = h.size[0], h.size[1], h.size[2], h.size[3]
    step_x, step_y = 2.0 * half_x / (h.ncol - 1), 2.0 * half_y / (h.nrow - 1)
    first_col = jnp.floor((center[0] - radius + half_x) / step_x).astype(int)
    first_row = jnp.floor((center[1] - radius + half_y) / step_y).astype(int)
    cols, rows = subgrid_size
    cell = jnp.arange(cols * rows)

    def corner(c: jax.Array, r: jax.Array) -> jax.Array:
        return jnp.array([step_x * c - half_x, step_y * r - half_y, h.data[c, r] * height])

    def below(top: jax.Array) -> jax.Array:
        return top.at[:, 2].set(-base)

    @jax.vmap
    def cell_prisms(index: jax.Array) -> tuple[Any, Any]:
        # cells past the field's edge repeat its last cell (`deepest_penetrating` keeps one)
        c = jnp.clip(first_col + index % cols, 0, h.ncol - 2)
        r = jnp.clip(first_row + index // cols, 0, h.nrow - 2)
        low, diagonal = corner(c, r), corner(c + 1, r + 1)
        prisms = []
        for other in (corner(c, r + 1), corner(c + 1, r)):
            # the vertex order MJX's prism builds its faces from: the bottom triangle, then the
            # top one, the bottom listed in the other direction
            top = jnp.stack([low, diagonal, other]) if not prisms else jnp.stack([low, other, diagonal])
            bottom = below(top[jnp.array([0, 2, 1])])
            prisms.append(mesh.hfield_prism(jnp.concatenate([bottom, top])))
        return prisms[0], prisms[1]

    first, second = cell_prisms(cell)
    prisms = jax.tree_util.tree_map(lambda *x: jnp.concatenate(x), first, second)
    dist, pos, normal = jax.vmap(_sphere_convex, in_axes=[None, 0])(local, prisms)
    # `_sphere_convex` gives the normal from the sphere to the prism; contacts point from the field
    return dist.reshape(-1), pos.reshape(-1, 3), -normal.reshape(-1, 3)


def _mujoco_hfield_sphere(slots: int) -> Any:
    """MJX's (heightfield, sphere) collider with C MuJoCo's contacts, `slots` of them."""
    from mujoco.mjx._src import math as mjx_math  # noqa: PLC0415 - MJX's own helpers
    from mujoco.mjx._src.collision_convex import collider  # noqa: PLC0415

    @collider(ncon=slots)
    def hfield_sphere(h: Any, s: Any, subgrid_size: tuple[int, int]) -> Any:
        dist, pos, normal = deepest_penetrating(*prism_contacts(h, s, subgrid_size), slots)
        # back to the world frame
        pos = jax.vmap(lambda p: h.mat @ p + h.pos)(pos)
        normal = jax.vmap(lambda n: h.mat @ n)(normal)
        return dist, pos, jax.vmap(mjx_math.make_frame)(normal)

    return hfield_sphere


_MUJOCO_RULE: dict[int, Any] = {}  # slots -> the collider, built once


@contextlib.contextmanager
def mujoco_hfield_contacts(slots: int = SLOTS) -> Iterator[None]:
    """While open, MJX collides spheres with heightfields by C MuJoCo's rule (`slots` contacts per
    pair: data made while it is open has room for them)."""
    from mujoco.mjx._src import collision_driver  # noqa: PLC0415
    from mujoco.mjx._src.types import GeomType  # noqa: PLC0415

    if slots not in _MUJOCO_RULE:
        _MUJOCO_RULE[slots] = _mujoco_hfield_sphere(slots)
    table, pair = collision_driver._COLLISION_FUNC, (GeomType.HFIELD, GeomType.SPHERE)  # noqa: SLF001
    saved = table[pair]
    table[pair] = _MUJOCO_RULE[slots]
    try:
        yield
    finally:
        table[pair] = saved


def hfield_pairs(mj_model: Any) -> dict[str, list[str]]:
    """Geom type -> names of the geoms that collide with a heightfield in `mj_model` (by contype
    and conaffinity, as MJX pairs them)."""
    import mujoco  # noqa: PLC0415

    pairs: dict[str, list[str]] = {}
    hfields = [g for g in range(mj_model.ngeom) if mj_model.geom_type[g] == mujoco.mjtGeom.mjGEOM_HFIELD]
    for h in hfields:
        for g in range(mj_model.ngeom):
            if g == h or mj_model.geom_bodyid[g] == mj_model.geom_bodyid[h]:
                continue
            touch = (mj_model.geom_contype[h] & mj_model.geom_conaffinity[g]) or (
                mj_model.geom_contype[g] & mj_model.geom_conaffinity[h]
            )
            if touch:
                kind = mujoco.mjtGeom(mj_model.geom_type[g]).name.removeprefix("mjGEOM_").lower()
                pairs.setdefault(kind, []).append(mj_model.geom(g).name or f"geom {g}")
    for pair in range(mj_model.npair):
        g1, g2 = mj_model.pair_geom1[pair], mj_model.pair_geom2[pair]
        for h, g in ((g1, g2), (g2, g1)):
            if mj_model.geom_type[h] == mujoco.mjtGeom.mjGEOM_HFIELD:
                kind = mujoco.mjtGeom(mj_model.geom_type[g]).name.removeprefix("mjGEOM_").lower()
                pairs.setdefault(kind, []).append(mj_model.geom(g).name or f"geom {g}")
    return pairs


def check_mujoco_rule_applies(task: str, env: Any) -> None:
    """`mujoco` needs MJX's JAX implementation and a heightfield touched by spheres only."""
    impl = getattr(getattr(env.mjx_model, "impl", None), "value", "jax")
    if impl != "jax":
        raise ConfigError(
            f"env.hfield_contacts=mujoco replaces a collision function of MJX's JAX implementation; "
            f"task {task!r} runs impl={impl!r}; set env.playground.impl=jax, or env.hfield_contacts=mjx"
        )
    pairs = hfield_pairs(env.mj_model)
    if not pairs:
        raise ConfigError(
            f"env.hfield_contacts=mujoco changes heightfield contacts, and task {task!r} has no "
            "heightfield; valid: rough-terrain tasks (Go1JoystickRoughTerrain), or env.hfield_contacts=mjx"
        )
    others = {kind: names for kind, names in pairs.items() if kind != "sphere"}
    if others:
        raise ConfigError(
            f"env.hfield_contacts=mujoco reproduces C MuJoCo's heightfield contacts for sphere geoms; "
            f"task {task!r}'s heightfield also touches {others}; valid: tasks whose heightfield only "
            "spheres touch (Go1JoystickRoughTerrain), or env.hfield_contacts=mjx"
        )


@dataclasses.dataclass(frozen=True, eq=False)
class WithMujocoHfieldContacts:
    """An MJX env whose `reset` and `step` collide spheres with heightfields by C MuJoCo's rule.
    Other attributes are the env's own."""

    env: Any

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "env":
            raise AttributeError(name)
        return getattr(self.env, name)

    def reset(self, rng: jax.Array) -> Any:
        with mujoco_hfield_contacts():
            return self.env.reset(rng)

    def step(self, state: Any, action: jax.Array) -> Any:
        with mujoco_hfield_contacts():
            return self.env.step(state, action)


def contact_rule_of(env: Any) -> contextlib.AbstractContextManager:
    """The contact rule `env` simulates with, to open where MJX data is built outside its `reset`
    and `step` (C MuJoCo's state converted to MJX's layout): `env` or a wrapper inside it (each
    keeps the wrapped env as `.env`) under the `mujoco` rule opens it, else nothing."""
    seen = env
    for _ in range(16):
        if isinstance(seen, WithMujocoHfieldContacts):
            return mujoco_hfield_contacts()
        seen = getattr(seen, "env", None)
        if seen is None:
            break
    return contextlib.nullcontext()


def with_hfield_contacts(task: str, env: Any, rule: str) -> Any:
    """`env` under the contact rule `rule` (`env.hfield_contacts`)."""
    if check_hfield_contacts(rule) == "mjx":
        return env
    check_mujoco_rule_applies(task, env)
    return WithMujocoHfieldContacts(env)
