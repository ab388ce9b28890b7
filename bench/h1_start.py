"""How long an H1 stands before anything is learned: episode lengths of fixed action rules on
Playground's `H1JoystickGaitTracking`, and which of the task's two terminations ends them.

    python bench/h1_start.py [--envs 64] [--steps 300] [--sigmas 0 0.05 0.1 0.2 0.5] [--out FILE.json]

The task's action moves the joint targets (`ctrl + action_scale * action`, action_scale 0.3)
instead of setting them, and its reset leaves the targets at zero rather than at the home pose;
an episode ends when a joint leaves its range or the base tilts (gravity z < 0.85). Rules measured,
each on the same `--envs` episodes of the task (impl jax, its own reset and noise):
- Gaussian actions of mean 0 and std sigma (what a fresh policy of that std does);
- `home`: the action that puts the targets on the home pose at once, unbounded;
- `home, clipped`: the same clipped to [-1, 1] (strl_jax's default `env.clip_actions` and the
  bound of Playground's tanh policy), which reaches the pose in three to four steps.
"""

from __future__ import annotations

import argparse
import sys
import time

import jax
import jax.numpy as jnp
from common import format_table, machine_info, write_json

TASK = "H1JoystickGaitTracking"


def load_task():
    """The task's env as Playground builds it, on MJX's JAX implementation."""
    from mujoco_playground import registry

    from strl_jax.envs.menagerie import use_offline_menagerie

    use_offline_menagerie(TASK)
    cfg = registry.get_default_config(TASK)
    cfg.impl = "jax"
    return registry.load(TASK, config=cfg)


def episodes(env, rule, n: int, steps: int, seed: int = 0) -> dict:
    """Mean episode length (capped at `steps`), how many survive, and how many ended by a joint
    limit or by the tilt, under `rule(state, key) -> actions [n, A]`."""
    reset, step = jax.jit(jax.vmap(env.reset)), jax.jit(jax.vmap(env.step))
    lo, hi = env._lowers, env._uppers  # the actuators' ranges, which the task's limit check uses

    def ends(data):
        joints = data.qpos[7:]
        return jnp.any(joints < lo) | jnp.any(joints > hi), env.get_gravity(data)[-1] < 0.85

    ends = jax.jit(jax.vmap(ends))
    key = jax.random.PRNGKey(seed)
    key, reset_key = jax.random.split(key)
    state = reset(jax.random.split(reset_key, n))
    alive, length, by_limit, by_tilt = jnp.ones(n), jnp.zeros(n), 0.0, 0.0
    for _ in range(steps):
        key, act_key = jax.random.split(key)
        state = step(state, rule(state, act_key))
        limit, tilt = ends(state.data)
        by_limit += float(jnp.sum(alive * limit))
        by_tilt += float(jnp.sum(alive * tilt * (1 - limit)))
        alive = alive * (1 - state.done)
        length = length + alive
    return {
        "mean_length": float(jnp.mean(length)),
        "survived": int(jnp.sum(alive)),
        "ended_by_joint_limit": int(by_limit),
        "ended_by_tilt": int(by_tilt),
    }


def gaussian(sigma: float, n: int, size: int):
    """Zero-mean Gaussian actions of std `sigma`."""
    return lambda state, key: sigma * jax.random.normal(key, (n, size))


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--envs", type=int, default=64)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--sigmas", type=float, nargs="+", default=[0.0, 0.05, 0.1, 0.2, 0.5])
    p.add_argument("--out", default=None, help="JSON of the table")
    args = p.parse_args(argv)
    env = load_task()
    home = jnp.asarray(env.mj_model.keyframe("home").ctrl)
    scale = env._config.action_scale
    rules = {f"gaussian, std {s:g}": gaussian(s, args.envs, env.action_size) for s in args.sigmas}
    rules["home"] = lambda st, k: (home - st.data.ctrl) / scale
    rules["home, clipped to [-1, 1]"] = lambda st, k: jnp.clip((home - st.data.ctrl) / scale, -1.0, 1.0)
    results, rows = {}, []
    for name, rule in rules.items():
        t0 = time.time()
        out = episodes(env, rule, args.envs, args.steps)
        results[name] = out
        rows.append(
            [
                name,
                f"{out['mean_length']:.1f}",
                f"{out['survived']}/{args.envs}",
                out["ended_by_joint_limit"],
                out["ended_by_tilt"],
            ]
        )
        print(f"{name}: {out} ({time.time() - t0:.0f} s)", flush=True)
    headers = [
        f"actions ({args.envs} episodes, {args.steps} steps)",
        "mean length",
        "survived",
        "ended: joint limit",
        "ended: tilt",
    ]
    print(format_table(headers, rows))
    if args.out:
        write_json(
            args.out, {"machine": machine_info(), "task": TASK, "args": vars(args), "results": results}
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
