"""Does a legged policy step? Its feet under held commands in the JAX env.

    python bench/foot_lift.py RUN [--checkpoint N] [--envs 8] [--steps 400] [--skip 100]
        [--commands VX,VY,YAW ...] [--out FILE.json]

Each command (default: forward 0.5 and 1.0 m/s, turning 0.7 rad/s) is held for `--steps` steps in
`--envs` episodes of the task (nominal physics, noise-free observations, deterministic actions, as
`deploy` runs the JAX side). After the first `--skip` steps and up to each episode's fall, per foot
(the task's `feet` sites): the share of steps it is more than 1 cm above its lowest point of the
episode, and its largest lift; and the base's mean velocity in the commands' frame. A policy that stands or
shuffles keeps its feet down; one that walks lifts each foot a third to a half of the time.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from common import format_table, machine_info, write_json

DEFAULT_COMMANDS = ((0.5, 0.0, 0.0), (1.0, 0.0, 0.0), (0.0, 0.0, 0.7))
LIFT = 0.01  # m above the foot's lowest point that counts as off the ground


def feet_sites(task_env) -> np.ndarray:
    """The task's foot sites (Playground's locomotion tasks keep them as `_feet_site_id`)."""
    sites = getattr(task_env, "_feet_site_id", None)
    if sites is None:
        raise SystemExit(f"error: {type(task_env).__name__} names no foot sites (`_feet_site_id`)")
    return np.asarray(sites)


def foot_lift(z: np.ndarray, alive: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per foot, the share of live steps off the ground and the largest lift (m), from site heights
    `z [T, N, F]` and `alive [T, N]` (each foot measured from its own lowest point per episode)."""
    low = np.where(alive[..., None], z, np.inf).min(axis=0, keepdims=True)
    lift = np.where(alive[..., None], z - low, 0.0)
    off = (lift > LIFT) & alive[..., None]
    return off.sum(axis=(0, 1)) / max(alive.sum(), 1), lift.max(axis=(0, 1))


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", type=Path)
    p.add_argument("--checkpoint", type=int, default=None, help="default: the newest")
    p.add_argument("--envs", type=int, default=8)
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--skip", type=int, default=100, help="steps left out at the start (the first step)")
    p.add_argument(
        "--commands", nargs="*", default=None, help="VX,VY,YAW each (default: forward and turning)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    if not 0 <= args.skip < args.steps:
        raise SystemExit(f"error: --skip {args.skip} must lie in [0, --steps {args.steps})")
    commands = (
        [tuple(float(x) for x in c.split(",")) for c in args.commands] if args.commands else DEFAULT_COMMANDS
    )
    if any(len(c) != 3 for c in commands):
        raise SystemExit(f"error: --commands takes VX,VY,YAW triples, got {args.commands}")

    import jax

    from strl_jax.envs import make_env_from_config
    from strl_jax.envs.commands import with_command
    from strl_jax.envs.native_mujoco import command_frame
    from strl_jax.envs.native_physics import mjx_env_of
    from strl_jax.envs.true_state import base_state
    from strl_jax.inference import load_policy
    from strl_jax.native_episodes import noise_level_keys, nominal_env_config
    from strl_jax.train_loops.evaluation import act_in_env

    loaded = load_policy(args.run_dir, args.checkpoint)
    env_cfg = nominal_env_config(loaded.cfg.env, args.steps, noise_level_keys(loaded.env.env))
    base = make_env_from_config(env_cfg, num_envs=args.envs)
    task_env = mjx_env_of(base.env)
    sites, frame = feet_sites(task_env), command_frame(task_env.mj_model)
    actor = loaded.actor

    def rollout(env, key):
        state, obs = env.reset(key)

        def keep(s, _obs, _action, res):
            data = s.brax_state.data
            velocity = base_state(data, frame)["true_base_lin_vel"]
            return data.site_xpos[:, sites, 2], velocity, res.terminated

        act = lambda o, h, _k: actor.act(loaded.params, loaded.normalizers, o, h)  # noqa: E731
        carry = (state, obs, actor.initial_hidden(args.envs))
        return act_in_env(env, act, actor.reset_hidden, carry, keep, length=args.steps)[1]

    rows, report = [], []
    for command in commands:
        env = with_command(base, command)
        z, velocity, fell = jax.device_get(
            jax.jit(lambda k, e=env: rollout(e, k))(jax.random.PRNGKey(args.seed))
        )
        alive = (np.cumsum(fell, axis=0) - fell) == 0
        share, most = foot_lift(z[args.skip :], alive[args.skip :])
        live = alive[args.skip :]
        speed = velocity[args.skip :][live].mean(axis=0)
        falls = int(np.asarray(fell).any(axis=0).sum())
        rows.append(
            [
                str(list(command)),
                f"{falls} / {args.envs}",
                " ".join(f"{x:.2f}" for x in share),
                " ".join(f"{100 * x:.1f}" for x in most),
                f"{speed[0]:+.3f} / {speed[1]:+.3f}",
            ]
        )
        report.append(
            {
                "command": list(command),
                "falls": falls,
                "air_share": share.tolist(),
                "max_lift_m": most.tolist(),
                "base_velocity": speed.tolist(),
            }
        )
    print(
        f"{loaded.cfg.env.task}, checkpoint {loaded.step}, {args.envs} envs x {args.steps} steps per command"
    )
    headers = [
        "command",
        "falls",
        "share of steps off the ground, per foot",
        "largest lift cm",
        "base vx / vy",
    ]
    print(format_table(headers, rows))
    if args.out:
        write_json(
            args.out,
            {
                "machine": machine_info(),
                "run_dir": str(args.run_dir),
                "checkpoint": loaded.step,
                "commands": report,
            },
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
