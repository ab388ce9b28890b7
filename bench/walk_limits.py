"""The tracking limits of a shipped walking policy: held commands in the JAX env and in C MuJoCo.

    python bench/walk_limits.py examples/go1_walk [--seeds 0 1] [--envs 8] [--steps 500]
        [--native hand|generic] [--margin 1.25] [--commands forward sideways turning]
        [--out FILE.json]

Forward 1 m/s, sideways 0.5 m/s and turning 1 rad/s (or those `--commands` names), each held for
`--steps` steps from the same starts in both simulators (`strl_jax.command_tracking`), `--envs`
episodes per seed (env key) and command. Prints, per command and simulator, the median and worst
episode's RMS errors (linear m/s, yaw rate rad/s) and falls, then the limits
`tests/test_walk_examples.py` holds: the worst episode over both simulators times `--margin`,
rounded up to 0.01.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

from common import format_table, machine_info, write_json

from strl_jax.command_tracking import HELD_COMMANDS, held_command_episodes, worst_errors
from strl_jax.inference import load_policy
from strl_jax.native_episodes import NATIVE_PATHS, exported_onnx, load_onnx_policy

NAMED_COMMANDS = dict(zip(("forward", "sideways", "turning"), HELD_COMMANDS, strict=True))


def round_up(value: float) -> float:
    return math.ceil(value * 100 - 1e-9) / 100


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a run folder, e.g. examples/go1_walk")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="env keys (default 0 1)")
    parser.add_argument("--envs", type=int, default=8, help="episodes per key and command (default 8)")
    parser.add_argument("--steps", type=int, default=500, help="steps per episode (default 500)")
    parser.add_argument("--native", choices=NATIVE_PATHS, default="generic")
    parser.add_argument("--margin", type=float, default=1.25)
    parser.add_argument(
        "--commands",
        nargs="+",
        choices=list(NAMED_COMMANDS),
        default=list(NAMED_COMMANDS),
        help="the held commands to measure (default: all three)",
    )
    parser.add_argument("--out", type=Path, help="also write every episode's numbers as JSON")
    args = parser.parse_args(argv)

    loaded = load_policy(args.run)
    policy = load_onnx_policy(exported_onnx(args.run, loaded))
    commands = [NAMED_COMMANDS[name] for name in args.commands]
    per_command = {c: {"JAX": [], "C MuJoCo": []} for c in commands}
    for seed in args.seeds:
        compared = held_command_episodes(loaded, policy, commands, args.envs, args.steps, seed, args.native)
        for command, c in zip(commands, compared, strict=True):
            per_command[command]["JAX"] += c.jax
            per_command[command]["C MuJoCo"] += c.native

    rows, limits = [], {}
    for command, sides in per_command.items():
        for side, episodes in sides.items():
            lin = [e["lin_vel_rms"] for e in episodes]
            yaw = [e["yaw_rate_rms"] for e in episodes]
            falls = sum(e["fell"] for e in episodes)
            spread = [statistics.median(lin), max(lin), statistics.median(yaw), max(yaw)]
            rows.append([str(command), side, *spread, falls])
        worst = [worst_errors(episodes) for episodes in sides.values()]
        limits[command] = tuple(round_up(args.margin * max(w[k] for w in worst)) for k in (0, 1))
    headers = ["command", "simulator", "lin median", "lin worst", "yaw median", "yaw worst", "falls"]
    print(f"{args.run}: {len(args.seeds)} keys x {args.envs} envs x {args.steps} steps, native {args.native}")
    print(format_table(headers, [[*r[:2], *(f"{v:.3f}" for v in r[2:6]), int(r[6])] for r in rows]))
    print("limits (linear m/s, yaw rad/s):", {c: list(v) for c, v in limits.items()})
    if args.out:
        write_json(
            args.out,
            {
                "run": str(args.run),
                "args": {k: str(v) for k, v in vars(args).items()},
                "episodes": {str(c): s for c, s in per_command.items()},
                "limits": {str(c): v for c, v in limits.items()},
                "machine": machine_info(),
            },
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
