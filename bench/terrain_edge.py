"""How often does following the commands walk a Go1 off the rough task's terrain?

    python bench/terrain_edge.py [--episodes 20000] [--seed 0] [--margins 0 1 2]
        [--stop-margins 0.3 1] [--out FILE.json]

Playground's `Go1JoystickRoughTerrain` floor is one heightfield, 20 x 20 m around the origin, with
nothing beyond it: a robot that walks past its edge falls off the world, and the task ends the
episode as a fall. This script follows the task's commands with a robot that tracks every one of
them exactly (body-frame forward and sideways velocity and yaw rate integrated at the task's
control step) from the task's own starts (the home pose's position moved by up to 0.5 m, a
uniform heading) for one evaluation episode (1000 steps), and counts the episodes whose base
leaves the terrain, or comes within `--margins` metres of its edge. The commands are the task's:
its first command drawn uniformly within its ranges, each held for an exponential time of mean
5 s, then redrawn with the task's own `sample_command` (each component kept or replaced at even
odds, zeroed with the task's probabilities).

The share that leaves is what the unmodified task counts as falls for a perfect tracker; a policy
that tracks worse goes less far. `bench/walk_falls.py` reports which of a trained policy's falls
were past the edge.

`--stop-margins` prices staying on: a tracker that follows every command except the part that
would take its base within the margin of the edge (each step's move clipped to the rectangle
shrunk by the margin, the yaw rate always followed) never falls off, and its velrmsd over all
steps (the benchmark's score, ||(vx, vy, yaw rate) - command||) is what stopping at the edge
costs a policy that otherwise walks perfectly. It is not a lower bound: a policy that slowed down
sooner, or spent some falls at the edge, could pay less.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import NamedTuple

import numpy as np
from common import format_table, machine_info, write_json
from walk_falls import past_edge, terrain_rectangle

TASK = "Go1JoystickRoughTerrain"
START_OFFSET = 0.5  # m: the task's reset moves the home position by up to this in x and y
MEAN_HOLD_S = 5.0  # s: the task holds each command for an exponential time of this mean


def load_task():
    """The task's env as Playground builds it, on MJX's JAX implementation."""
    from mujoco_playground import registry

    from strl_jax.envs.menagerie import use_offline_menagerie

    use_offline_menagerie(TASK)
    cfg = registry.get_default_config(TASK)
    cfg.impl = "jax"
    return registry.load(TASK, config=cfg)


class Paths(NamedTuple):
    xy: np.ndarray  # [T, N, 2] base positions
    yaw: np.ndarray  # [T, N] headings
    error: np.ndarray  # [T, N] squared velocity error: the command's part the box clipped away


def follow_commands(task, key, episodes: int, steps: int, box=None) -> Paths:
    """The paths of robots that track the task's commands exactly; with `box = (low, high)`
    (world x, y bounds), each step's move is clipped to stay inside it."""
    import jax
    import jax.numpy as jnp

    dt = float(task.dt)
    limits = jnp.asarray(task._cmd_a, jnp.float32)
    home = jnp.asarray(task._init_q[:2], jnp.float32)
    low, high = (jnp.full(2, -jnp.inf), jnp.full(2, jnp.inf)) if box is None else map(jnp.asarray, box)

    def hold(k):
        return jnp.round(jax.random.exponential(k) * MEAN_HOLD_S / dt).astype(jnp.int32)

    def start(k):
        kxy, kyaw, kcmd, khold, knext = jax.random.split(k, 5)
        xy = home + jax.random.uniform(kxy, (2,), minval=-START_OFFSET, maxval=START_OFFSET)
        yaw = jax.random.uniform(kyaw, (), minval=-jnp.pi, maxval=jnp.pi)
        command = jax.random.uniform(kcmd, (3,), minval=-limits, maxval=limits)
        return xy, yaw, command, hold(khold), knext

    def step(carry, _):
        xy, yaw, command, left, k = carry
        c, s = jnp.cos(yaw), jnp.sin(yaw)
        velocity = jnp.stack([c * command[0] - s * command[1], s * command[0] + c * command[1]])
        target = xy + velocity * dt
        moved = jnp.clip(target, low, high)
        error = jnp.sum(jnp.square((target - moved) / dt))  # exactly 0 unclipped; a rotation keeps the norm
        xy, yaw = moved, yaw + command[2] * dt
        k, kcmd, khold = jax.random.split(k, 3)
        left = left - 1
        due = left <= 0
        command = jnp.where(due, task.sample_command(kcmd, command), command)
        left = jnp.where(due, hold(khold), left)
        return (xy, yaw, command, left, k), (xy, yaw, error)

    def episode(k):
        return jax.lax.scan(step, start(k), None, length=steps)[1]

    xy, yaw, error = jax.jit(jax.vmap(episode))(jax.random.split(key, episodes))
    return Paths(np.swapaxes(np.asarray(xy), 0, 1), np.asarray(yaw).T, np.asarray(error).T)


def inside(rectangle, margin: float) -> tuple[np.ndarray, np.ndarray]:
    """`(low, high)` world bounds of the terrain's rectangle shrunk by `margin` m on every side."""
    centre, half = rectangle
    return centre - half + margin, centre + half - margin


def leaving(xy: np.ndarray, rectangle, margin: float) -> np.ndarray:
    """Per episode, the first step whose base is within `margin` m of the edge or past it (-1: never)."""
    centre, half = rectangle
    out = past_edge(xy, (centre, half - margin)) > 0  # [T, N]
    return np.where(out.any(axis=0), out.argmax(axis=0), -1)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--episodes", type=int, default=20000)
    p.add_argument("--steps", type=int, default=1000, help="the evaluation's episode length")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--margins", type=float, nargs="*", default=[0.0, 1.0, 2.0])
    p.add_argument(
        "--stop-margins",
        type=float,
        nargs="*",
        default=[0.3, 1.0],
        help="velrmsd of a tracker that stops this far (m) short of the edge",
    )
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    if args.episodes < 1 or args.steps < 1:
        raise SystemExit("error: --episodes and --steps must be positive")
    if any(m < 0 for m in args.margins + args.stop_margins):
        raise SystemExit("error: --margins and --stop-margins are distances in metres, >= 0")

    import jax

    start = time.time()
    task = load_task()
    rectangle = terrain_rectangle(task.mj_model)
    if rectangle is None:
        raise SystemExit(f"error: {TASK}'s floor is not one heightfield")
    half_width = float(min(rectangle[1]))
    if any(m >= half_width for m in args.margins + args.stop_margins):
        raise SystemExit(f"error: a margin must be under half the terrain's width, {half_width:g} m")
    key = jax.random.PRNGKey(args.seed)
    xy = follow_commands(task, key, args.episodes, args.steps).xy
    rows, results = [], []
    for margin in args.margins:
        first = leaving(xy, rectangle, margin)
        share = float((first >= 0).mean())
        median = float(np.median(first[first >= 0])) if (first >= 0).any() else None
        results.append({"margin_m": margin, "share": round(share, 4), "median_step": median})
        rows.append([f"{margin:g}", f"{share:.3f}", "-" if median is None else f"{median:.0f}"])
    stops, stop_rows = [], []
    for margin in args.stop_margins:  # the same commands (the same key), clipped short of the edge
        paths = follow_commands(task, key, args.episodes, args.steps, box=inside(rectangle, margin))
        clipped = (paths.error > 0).any(axis=0)
        velrmsd = float(np.sqrt(paths.error.mean()))
        stops.append(
            {
                "margin_m": margin,
                "velrmsd": round(velrmsd, 4),
                "share_stopped": round(float(clipped.mean()), 4),
            }
        )
        stop_rows.append([f"{margin:g}", f"{clipped.mean():.3f}", f"{velrmsd:.3f}"])
    centre, half = rectangle
    print(
        f"{TASK}: terrain {2 * half[0]:g} x {2 * half[1]:g} m around {centre.tolist()}; "
        f"{args.episodes} episodes of {args.steps} steps, every command tracked exactly"
    )
    print(format_table(["within m of the edge", "share of episodes", "median step"], rows))
    if stop_rows:
        print("A tracker that stops short of the edge (the rest of every command followed exactly):")
        print(format_table(["stops m short", "share of episodes it stops in", "velrmsd"], stop_rows))
    if args.out:
        write_json(
            args.out,
            {
                "machine": machine_info(),
                "task": TASK,
                "episodes": args.episodes,
                "steps": args.steps,
                "seed": args.seed,
                "terrain_half_size_m": half.tolist(),
                "results": results,
                "stop_short": stops,
                "wall_s": round(time.time() - start, 1),
            },
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
