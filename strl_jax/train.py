"""`python -m strl_jax.train`: train PPO on a Brax task.

Flags follow legged_gym / IsaacLab scripts; any config field can be set with `key.sub=value`.
"""

from __future__ import annotations

import argparse
import sys

from strl_jax.configs.loader import ConfigError, resolve_config


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m strl_jax.train",
        description="Train PPO on a Brax environment. Extra arguments are dotted config overrides, "
        "e.g. algorithm.learning_rate=3e-4 policy.actor_hidden_dims=[128,128].",
    )
    parser.add_argument("--task", default="inverted_pendulum", help="Brax task (preset if one exists)")
    parser.add_argument("--num_envs", type=int, help="number of parallel environments (env.num_envs)")
    parser.add_argument("--seed", type=int, help="random seed")
    parser.add_argument("--max_iterations", type=int, help="training iterations (runner.max_iterations)")
    parser.add_argument("--log_dir", help="output folder (default runs/<task>/<timestamp>)")
    parser.add_argument("--config", action="append", default=[], metavar="FILE.yaml",
                        help="YAML config merged over the preset (may be repeated)")
    parser.add_argument("--quiet", action="store_true", help="no console summaries or progress bar")
    parser.add_argument("overrides", nargs="*", metavar="key.sub=value", help="config overrides")
    return parser


def overrides_from_flags(args: argparse.Namespace) -> list[str]:
    """Translate the convenience flags into dotted overrides (they win over YAML files)."""
    flags = {
        "env.num_envs": args.num_envs,
        "seed": args.seed,
        "runner.max_iterations": args.max_iterations,
        "runner.log_dir": args.log_dir,
    }
    return [f"{k}={v}" for k, v in flags.items() if v is not None]


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        cfg = resolve_config(args.task, args.config, list(args.overrides) + overrides_from_flags(args))
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    from strl_jax.train_loops.runner import train

    result = train(cfg, verbose=not args.quiet)
    print(f"outputs written to {result.log_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
