"""What the falls of a walking run are: each fall of `bench/go1_walk.py`'s evaluation, with the
command the robot held, how it moved before it fell and what the task's randomiser drew for it.

    python bench/walk_falls.py RUN_DIR [--checkpoints 426 571 673] [--envs 32] [--seed 0]
        [--before 10] [--average K] [--without pushes randomizer] [--hfield-contacts mjx|mujoco]
        [--scan-beyond-edge void|edge] [--off-terrain fall|continue] [--out FILE.json]

RUN_DIR is a strl_jax run folder (`runs/strl_jax-seed1` of a go1_walk output). Every checkpoint is
evaluated as go1_walk evaluates it (the unmodified task with its randomiser, `--envs` envs, one
1000-step episode each, deterministic actions, env keys from `--seed`), and so is the standing
robot (zero action about the default pose) on the same episodes. Printed per fall: the env, the
step, the command (vx, vy, yaw rate), the base's velocity `--before` steps earlier, and the env's
drawn robot mass, centre-of-mass offset of the base and floor friction beside the range over all
envs. Falls that recur in the same env across checkpoints and under the standing robot point at the
randomiser's draw; falls spread over envs at small commands point at the gait. On a task whose
floor is one heightfield (Go1JoystickRoughTerrain's is 20 x 20 m with nothing around it), each
fall also gives the base's position and how far it was past the heightfield's edge: a robot that
walks off the terrain falls off the world, which only a policy that sees the edge (a height scan
that reads the void past it, `env.height_scan.beyond_edge`) can stop short of.

`--without pushes` / `--without randomizer` (either or both) evaluates the same policies and
episodes on the task without its pushes (Playground's `push_config` or `pert_config` switched
off; Go1's and Spot's joystick tasks do not push by default, Barkour's kicks have no switch) or
without its domain randomiser: which part of the task the falls come from. The default is the
unmodified task. `--hfield-contacts` evaluates on a heightfield under the other contact rule than
the run's (`env.hfield_contacts`: MJX's own, or C MuJoCo's). `--scan-beyond-edge` evaluates a
height-scan policy with its scan reading the other thing past the terrain's edge than the run's
(`void`, or `edge`: legged_gym's clip, which runs saved before `beyond_edge` existed read).
`--off-terrain continue` evaluates with the task's own episodes past the terrain's edge, where a
robot that walked off falls freely until the time limit and counts as a fall only if it turns over
(`env.off_terrain`; the default `fall` ends its episode as a fall once it has dropped below the
field, as evaluations before that setting existed did not).

`--average K` evaluates beside each checkpoint the mean of its parameters and those of the K - 1
checkpoints saved before it (a checkpoint average, as stochastic weight averaging takes one;
observations normalised by the newest's statistics): whether averaging the last few minutes of
a run steadies its falls, which swing from one checkpoint to the next.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import numpy as np
from common import format_table, machine_info, write_json
from go1_walk import evaluation_env

from strl_jax.envs.off_terrain import OFF_TERRAIN

WITHOUT = ("pushes", "randomizer")
PUSH_SWITCHES = ("push_config", "pert_config")  # Playground's names for the switch
BASE_BODY = 1  # Playground's robots: body 0 is the world, body 1 the floating base


def drawn_physics(physics: dict, n: int) -> dict[str, np.ndarray]:
    """Per env: the robot's mass, the base's centre-of-mass offset from the median draw
    (a norm, metres) and the floor's sliding friction, where the randomiser draws them."""
    out = {}
    if "body_mass" in physics:
        out["mass kg"] = np.asarray(physics["body_mass"]).sum(axis=1)
    if "body_ipos" in physics:
        ipos = np.asarray(physics["body_ipos"])[:, BASE_BODY]
        out["base com offset m"] = np.linalg.norm(ipos - np.median(ipos, axis=0), axis=1)
    if "geom_friction" in physics:
        out["floor friction"] = np.asarray(physics["geom_friction"])[:, 0, 0]
    return {k: v.reshape(n) for k, v in out.items()}


def terrain_rectangle(mj_model) -> tuple[np.ndarray, np.ndarray] | None:
    """The floor heightfield's centre (x, y) and half-sizes (metres) where the world's only
    heightfield geom is the floor, else None (a plane extends forever)."""
    import mujoco

    geoms = np.flatnonzero(mj_model.geom_type == mujoco.mjtGeom.mjGEOM_HFIELD)
    if geoms.size != 1:
        return None
    geom = int(geoms[0])
    half = np.asarray(mj_model.hfield_size[mj_model.geom_dataid[geom]][:2], np.float64)
    return np.asarray(mj_model.geom_pos[geom, :2], np.float64), half


def past_edge(xy: np.ndarray, rectangle: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """How far (metres) each base position `xy [..., 2]` lies outside the rectangle (<= 0: over it)."""
    centre, half = rectangle
    return np.max(np.abs(xy - centre) - half, axis=-1)


def left_terrain(position: np.ndarray, rectangle: tuple[np.ndarray, np.ndarray]) -> list[int]:
    """Per episode, the first step whose base `position [T, N, 2+]` is past the heightfield's
    edge (-1: it never was)."""
    off = past_edge(np.asarray(position[..., :2], np.float64), rectangle) > 0
    return [int(np.argmax(off[:, env])) if off[:, env].any() else -1 for env in range(off.shape[1])]


def fall_rows(
    what: str, term, command, velocity, drawn: dict, before: int, position=None, rectangle=None
) -> list[dict]:
    """One record per env that fell: its first terminal step and what it held and did; with the
    base's positions `position [T, N, 2+]` and a heightfield `rectangle`, where it fell from."""
    rows = []
    for env in np.where(term.any(axis=0))[0]:
        step = int(np.argmax(term[:, env]))
        row = {
            "policy": what,
            "env": int(env),
            "step": step,
            "command": [round(float(c), 2) for c in command[step, env]],
            "velocity_before": [round(float(v), 2) for v in velocity[max(step - before, 0), env]],
            **{k: round(float(v[env]), 3) for k, v in drawn.items()},
        }
        if position is not None and rectangle is not None:
            xy = np.asarray(position[step, env, :2], np.float64)
            row["base xy"] = [round(float(c), 2) for c in xy]
            row["past the edge m"] = round(float(past_edge(xy, rectangle)), 2)
        rows.append(row)
    return rows


def without_overrides(task: str, without: list[str]) -> dict:
    """The Playground overrides that switch the task's pushes off when `without` names them (its
    `push_config` or `pert_config`); an error when the task has no pushes switched on."""
    if "pushes" not in without:
        return {}
    from strl_jax.envs.playground_components import playground_default_config

    config = playground_default_config(task)
    for key in PUSH_SWITCHES:
        if key in config and config[key].get("enable", False):
            return {key: {"enable": False}}
    raise SystemExit(
        f"error: --without pushes: task {task!r} has no push switch that is on "
        f"({' or '.join(PUSH_SWITCHES)} with enable: true); evaluate it as it is"
    )


def with_scan_beyond_edge(env_cfg, beyond_edge: str | None):
    """`env_cfg` with its height scan reading `beyond_edge` past the terrain's edge (None: as is)."""
    if beyond_edge is None:
        return env_cfg
    if not env_cfg.height_scan:
        raise SystemExit("error: --scan-beyond-edge needs a run with a height scan (env.height_scan)")
    return dataclasses.replace(env_cfg, height_scan={**env_cfg.height_scan, "beyond_edge": beyond_edge})


def tracking_error(term: np.ndarray, command: np.ndarray, velocity: np.ndarray) -> float:
    """velrmsd as the benchmark's evaluation takes it: over each episode's steps up to and with
    its first fall, the root mean square of ||(vx, vy, yaw rate) - command||."""
    fallen_before = np.cumsum(term, axis=0) - term > 0
    alive = 1.0 - fallen_before.astype(np.float64)
    error = np.sum(np.square(velocity - command), axis=-1)
    return float(np.sqrt(np.sum(error * alive) / max(np.sum(alive), 1.0)))


def episode_errors(term: np.ndarray, command: np.ndarray, velocity: np.ndarray) -> np.ndarray:
    """Each episode's own velrmsd `[envs]`, over its steps up to and with its first fall: which
    episodes make a policy's score (one episode far from its command outweighs many close ones)."""
    fallen_before = np.cumsum(term, axis=0) - term > 0
    alive = 1.0 - fallen_before.astype(np.float64)
    error = np.sum(np.square(velocity - command), axis=-1)
    return np.sqrt(np.sum(error * alive, axis=0) / np.maximum(np.sum(alive, axis=0), 1.0))


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", type=Path)
    p.add_argument("--checkpoints", type=int, nargs="*", default=None, help="default: the newest")
    p.add_argument("--envs", type=int, default=32)
    p.add_argument("--seed", type=int, default=0, help="the evaluation's env keys (go1_walk's --eval-seed)")
    p.add_argument("--episode-length", type=int, default=1000)
    p.add_argument("--before", type=int, default=10, help="steps before the fall to show the velocity of")
    p.add_argument("--average", type=int, default=1, help="also evaluate the mean of K checkpoints")
    p.add_argument("--worst", type=int, default=5, help="how many of the worst episodes to name")
    p.add_argument(
        "--without",
        nargs="*",
        default=[],
        choices=WITHOUT,
        help="evaluate on the task without its pushes or its randomiser (a diagnostic)",
    )
    p.add_argument("--hfield-contacts", choices=("mjx", "mujoco"), default=None, help="default: the run's")
    p.add_argument("--scan-beyond-edge", choices=("void", "edge"), default=None, help="default: the run's")
    p.add_argument("--off-terrain", choices=OFF_TERRAIN, default=None, help="default: the run's")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)

    import jax
    import jax.numpy as jnp

    from strl_jax.envs.native_physics import mjx_env_of
    from strl_jax.inference import load_policy
    from strl_jax.networks.policy import reset_hidden_groups
    from strl_jax.train_loops.evaluation import act_in_env

    checkpoints = args.checkpoints or [None]
    first = load_policy(args.run_dir, checkpoints[0])
    spec = {"task": first.cfg.env.task, "eval_envs": args.envs, "episode_length": args.episode_length}
    playground = without_overrides(first.cfg.env.task, args.without)
    env_cfg = first.cfg.env
    if args.hfield_contacts:
        env_cfg = dataclasses.replace(env_cfg, hfield_contacts=args.hfield_contacts)
    env_cfg = with_scan_beyond_edge(env_cfg, args.scan_beyond_edge)
    if args.off_terrain:
        env_cfg = dataclasses.replace(env_cfg, off_terrain=args.off_terrain)
    env = evaluation_env(env_cfg, spec, playground, randomize="randomizer" not in args.without)
    rectangle = terrain_rectangle(mjx_env_of(env.env).mj_model)
    actor, n = first.actor, args.envs

    def episodes(act, hidden, key):
        state, obs = env.reset(key)

        def keep(state, _obs, _action, res):
            xyz = state.brax_state.data.qpos[:, :3]  # the step the robot fell from
            return res.terminated, res.probe["command"], res.probe["velocity"], xyz

        _, out = act_in_env(
            env, act, reset_hidden_groups, (state, obs, hidden), keep, length=env.episode_length
        )
        return out, state.physics

    key = jax.random.PRNGKey(args.seed)
    zero = jnp.zeros((n, env.action_size))
    standing = jax.jit(lambda k: episodes(lambda o, h, _k: (zero, h), {}, k))
    policy = jax.jit(
        lambda params, norms, k: episodes(
            lambda o, h, _k: actor.act(params, norms, o, h), actor.initial_hidden(n), k
        )
    )
    runs = [("standing", lambda: standing(key))]
    saved = sorted(int(d.name) for d in (args.run_dir / "checkpoints").iterdir() if d.name.isdigit())
    for it in checkpoints:
        loaded = first if it == checkpoints[0] else load_policy(args.run_dir, it)
        runs.append((f"iteration {loaded.step}", lambda p=loaded: policy(p.params, p.normalizers, key)))
        if args.average > 1:
            members = [s for s in saved if s <= loaded.step][-args.average :]
            trees = [loaded.params] + [load_policy(args.run_dir, s).params for s in members[:-1]]
            mean = jax.tree.map(lambda *x: sum(x) / len(x), *trees)
            what = f"mean of iterations {' '.join(map(str, members))}"
            runs.append((what, lambda m=mean, p=loaded: policy(m, p.normalizers, key)))

    rows, summary, policies = [], [], []
    for what, run in runs:
        (term, command, velocity, position), physics = jax.device_get(run())
        term, command, velocity, position = map(np.asarray, (term, command, velocity, position))
        drawn = drawn_physics(physics, n)
        fell = fall_rows(what, term, command, velocity, drawn, args.before, position, rectangle)
        rows += fell
        velrmsd = tracking_error(term, command, velocity)
        # a plane floor has no edge to fall off: no count rather than a zero
        off = sum(r["past the edge m"] > 0 for r in fell) if rectangle is not None else None
        summary.append(
            [
                what,
                f"{velrmsd:.3f}",
                f"{len(fell)}/{n}",
                "-" if off is None else off,
                " ".join(str(r["env"]) for r in fell),
            ]
        )
        each = episode_errors(term, command, velocity)
        worst = [int(e) for e in np.argsort(-each)[: args.worst]]
        policies.append(
            {
                "policy": what,
                "velrmsd": round(velrmsd, 4),
                "falls": len(fell),
                "episodes": n,
                "falls_off_the_terrain": off,
                "episode_velrmsd": [round(float(e), 4) for e in each],
                # where the floor has an edge: the step each robot crossed it (-1: never) and how
                # low its base went (a robot off the field the task lets fall keeps falling)
                **(
                    {
                        "episode_left_terrain_step": left_terrain(position, rectangle),
                        "episode_lowest_base_z": [round(float(z), 2) for z in position[..., 2].min(axis=0)],
                    }
                    if rectangle is not None
                    else {}
                ),
            }
        )
        print(f"{what}: velrmsd {velrmsd:.3f}, {len(fell)} of {n} episodes fell", flush=True)
        named = ", ".join(f"{e}: {each[e]:.2f}" for e in worst)
        print(f"  worst episodes (env: velrmsd): {named}", flush=True)
    drawn_all = drawn_physics(physics, n)
    print(format_table(["policy", "velrmsd", "falls", "off the terrain", "envs that fell"], summary))
    where = ["base xy", "past the edge m"] if rectangle is not None else []
    headers = ["policy", "env", "step", "command", f"velocity {args.before} steps before", *drawn_all, *where]
    print(
        format_table(
            headers,
            [
                [
                    r["policy"],
                    r["env"],
                    r["step"],
                    r["command"],
                    r["velocity_before"],
                    *[r[k] for k in drawn_all],
                    *[r[k] for k in where],
                ]
                for r in rows
            ],
        )
    )
    ranges = {
        k: [round(float(v.min()), 3), round(float(np.median(v)), 3), round(float(v.max()), 3)]
        for k, v in drawn_all.items()
    }
    print("drawn over all envs (min / median / max):", ranges)
    if args.out:
        write_json(
            args.out,
            {
                "machine": machine_info(),
                "run_dir": str(args.run_dir),
                "without": args.without,
                "hfield_contacts": env_cfg.hfield_contacts,
                "height_scan": env_cfg.height_scan,
                "off_terrain": env_cfg.off_terrain,
                "policies": policies,
                "falls": rows,
                "drawn": ranges,
            },
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
