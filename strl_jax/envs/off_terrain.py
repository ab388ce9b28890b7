"""A robot that walks off a heightfield floor has fallen off the world: its episode ends there.

Playground's rough-terrain tasks (Go1JoystickRoughTerrain: one 20 x 20 m heightfield, nothing
around it) end an episode only when the trunk turns over. A robot that walks past the field's edge
drops into the void, often upright, and its episode goes on as a free fall to the time limit (6 s
later its base is 170 m below the field). In training those steps teach nothing and fill the
batches; in an evaluation the fall is not counted and the free fall's velocities swamp the
tracking error of the whole run. legged_gym never meets this (its terrains have a flat border
wider than an episode's walk); there the robot would have walked on.

`env.off_terrain: fall` (the default) ends the episode as a fall (terminated, not a time-out) at
the first step whose base is off the field (outside its rectangle in the field's frame) and below
the field's lowest point, where no ground can hold it again; `continue` keeps the task's own
episode. Only worlds whose floor is one static heightfield (and no plane) have such an edge; the
rule wraps the single env's `step`, so training, evaluation, `play` and `deploy`'s C MuJoCo side
all end the episode alike.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from strl_jax.envs.height_scan import HFIELD_GEOM, HeightField, heightfield_of
from strl_jax.envs.perception import FREE_JOINT
from strl_jax.errors import ConfigError

OFF_TERRAIN = ("fall", "continue")
PLANE_GEOM = 0  # mujoco.mjtGeom.mjGEOM_PLANE


def check_off_terrain(value: str) -> str:
    """`env.off_terrain`, checked."""
    if value not in OFF_TERRAIN:
        raise ConfigError(f"env.off_terrain={value!r} is not a choice; valid: {list(OFF_TERRAIN)}")
    return value


def floor_heightfield(mj_model: Any) -> HeightField | None:
    """The world's floor where it is one static, level heightfield geom and no plane (a floor with
    an edge), else None."""
    types = np.asarray(mj_model.geom_type)
    fields = np.flatnonzero(types == HFIELD_GEOM)
    if fields.size != 1 or np.any(types == PLANE_GEOM):
        return None
    try:  # a field that moves or tilts is no floor to walk off
        return heightfield_of(mj_model, mj_model.geom(int(fields[0])).name)
    except ValueError:
        return None


@dataclasses.dataclass(frozen=True)
class OffTerrain:
    """Whether a robot on a free joint (its position `qpos[:3]`) is off the field: outside its
    rectangle (in the field's frame) and below its lowest surface point. Plain arithmetic, so it
    reads JAX arrays in the env's step and NumPy ones in C MuJoCo's."""

    centre: tuple[float, float]  # the field's world x, y
    rotation: tuple[float, float]  # cos and sin of the field's yaw
    half_size: tuple[float, float]  # the field's radii along its x and y
    lowest: float  # world z of the field's lowest surface point

    def __call__(self, qpos: Any) -> Any:
        (cos, sin), (dx, dy) = self.rotation, (qpos[0] - self.centre[0], qpos[1] - self.centre[1])
        along_x, along_y = cos * dx + sin * dy, cos * dy - sin * dx  # in the field's frame
        outside = (abs(along_x) > self.half_size[0]) | (abs(along_y) > self.half_size[1])
        return outside & (qpos[2] < self.lowest)


def off_terrain_rule(mj_model: Any) -> OffTerrain | None:
    """The rule for a robot on a free joint over a heightfield floor, else None (no edge)."""
    if mj_model.njnt == 0 or int(mj_model.jnt_type[0]) != FREE_JOINT:
        return None
    hfield = floor_heightfield(mj_model)
    if hfield is None:
        return None
    pos, rotation, size = (np.asarray(a, np.float64) for a in (hfield.pos, hfield.rotation, hfield.size))
    return OffTerrain(
        centre=(float(pos[0]), float(pos[1])),
        rotation=(float(rotation[0]), float(rotation[1])),
        half_size=(float(size[0]), float(size[1])),
        lowest=float(pos[2] + np.min(np.asarray(hfield.elevation))),
    )


@dataclasses.dataclass(frozen=True, eq=False)
class WithOffTerrainFall:
    """An MJX env whose `step` is terminal where its robot has left the field (`OffTerrain`).
    Other attributes are the env's own."""

    env: Any
    rule: OffTerrain

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("env", "rule"):
            raise AttributeError(name)
        return getattr(self.env, name)

    def reset(self, rng: jax.Array) -> Any:
        return self.env.reset(rng)

    def step(self, state: Any, action: jax.Array) -> Any:
        nxt = self.env.step(state, action)
        off = jnp.asarray(self.rule(nxt.data.qpos), nxt.done.dtype)
        return nxt.replace(done=jnp.maximum(nxt.done, off))


def off_terrain_of(env: Any) -> OffTerrain | None:
    """The rule `env` or a wrapper inside it (each keeps the wrapped env as `.env`) ends episodes
    by, for native stepping of the same env; None where it has none."""
    seen = env
    for _ in range(16):
        if isinstance(seen, WithOffTerrainFall):
            return seen.rule
        seen = getattr(seen, "env", None)
        if seen is None:
            break
    return None


def with_off_terrain(env: Any, setting: str) -> Any:
    """`env` under `env.off_terrain`: wrapped where its floor has an edge and the setting is `fall`."""
    if check_off_terrain(setting) == "continue":
        return env
    rule = off_terrain_rule(env.mj_model)
    return env if rule is None else WithOffTerrainFall(env=env, rule=rule)
