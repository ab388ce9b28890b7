"""`python -m strl_jax.train`: train on a Brax or MuJoCo Playground task, or continue a run.

Flags follow legged_gym / IsaacLab scripts; any config field can be set with `key.sub=value`.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from strl_jax.configs.loader import resolve_config
from strl_jax.errors import CheckpointError, ConfigError, DivergenceError, NonFiniteError
from strl_jax.runners.devices import initialize_distributed
from strl_jax.runners.runner import train

EXIT_CONFIG_ERROR = 2
# the run diverged (not finite, or runner.stop_on_divergence); its newest checkpoint is the last good state
EXIT_NON_FINITE = 3

DEFAULT_TASK = "inverted_pendulum"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m strl_jax.train",
        description="Train a policy on a Brax or MuJoCo Playground task with any algorithm.class_name "
        "(PPO, TPPO, Distillation, APPO, ...), or continue a run. Extra arguments are dotted config "
        "overrides, e.g. algorithm.learning_rate=3e-4 policy.actor_hidden_dims=[128,128].",
    )
    parser.add_argument(
        "--task",
        help="Brax or MuJoCo Playground task (its preset in configs/ if one exists; default "
        f"{DEFAULT_TASK}), or an env of one's own as package.module:Name (an MjxEnv or Brax env "
        "class, or a function returning one; imported from the current folder or the installed packages)",
    )
    parser.add_argument("--num_envs", type=int, help="number of parallel environments (env.num_envs)")
    parser.add_argument("--seed", type=int, help="random seed")
    parser.add_argument(
        "--num_seeds",
        type=int,
        metavar="K",
        help="train K runs (seeds seed .. seed+K-1) in one compiled program, each in its own subfolder "
        "(runner.num_seeds); with sweep.<section>.<field>=[v1, v2, ...] overrides, K runs per value",
    )
    parser.add_argument("--max_iterations", type=int, help="training iterations (runner.max_iterations)")
    parser.add_argument(
        "--more_iterations",
        type=int,
        metavar="N",
        help="run N iterations from where the run starts (rsl_rl's learn(num_learning_iterations)); "
        "--max_iterations instead counts the whole run, resumed iterations included",
    )
    parser.add_argument(
        "--init_at_random_ep_len",
        action="store_true",
        default=None,
        help="start each env's first episode at a random step (runner.init_at_random_ep_len)",
    )
    parser.add_argument("--log_dir", help="output folder (default runs/<task>/<timestamp>)")
    parser.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="FILE",
        help="strl_jax YAML, or an rsl_rl/IsaacLab runner config (YAML or JSON), merged over the preset "
        "(may be repeated)",
    )
    parser.add_argument("--quiet", action="store_true", help="no console summaries or progress bar")
    add_start_arguments(parser)
    add_distributed_arguments(parser)
    parser.add_argument("overrides", nargs="*", metavar="key.sub=value", help="config overrides")
    return parser


def add_start_arguments(parser: argparse.ArgumentParser) -> None:
    """Where a run starts: fresh, resumed from its own checkpoint, or warm-started from another's."""
    parser.add_argument(
        "--resume",
        metavar="LOG_DIR",
        help="continue the run in LOG_DIR from its newest checkpoint, with its config.yaml "
        "(overrides such as runner.max_iterations=N still apply)",
    )
    parser.add_argument(
        "--checkpoint", type=int, metavar="N", help="with --resume: continue from checkpoint N"
    )
    parser.add_argument(
        "--load",
        metavar="PATH",
        help="warm start: params and normalisers from a run folder, a checkpoint folder or an rsl_rl/st_rl "
        "model_N.pt; fresh optimiser and counters",
    )


def add_distributed_arguments(parser: argparse.ArgumentParser) -> None:
    """Multi-host runs: how the processes find each other (`jax.distributed.initialize`)."""
    parser.add_argument(
        "--distributed",
        action="store_true",
        help="multi-host run: call jax.distributed.initialize (auto-detected on TPU pods "
        "and SLURM, or from the flags below / JAX_COORDINATOR_ADDRESS etc.)",
    )
    parser.add_argument(
        "--coordinator_address",
        metavar="HOST:PORT",
        help="with --distributed: process 0's address, the same on every process",
    )
    parser.add_argument("--num_processes", type=int, help="with --distributed: number of processes")
    parser.add_argument("--process_id", type=int, help="with --distributed: this process's index")


def overrides_from_flags(args: argparse.Namespace) -> list[str]:
    """Translate the convenience flags into dotted overrides (they win over YAML files)."""
    flags = {
        "env.num_envs": args.num_envs,
        "seed": args.seed,
        "runner.num_seeds": args.num_seeds,
        "runner.max_iterations": args.max_iterations,
        "runner.log_dir": args.log_dir,
        "runner.init_at_random_ep_len": args.init_at_random_ep_len,
    }
    return [f"{k}={v}" for k, v in flags.items() if v is not None]


def resolve_run_config(args: argparse.Namespace):
    """The config of a new run, or of the run being resumed (its config.yaml plus overrides)."""
    overrides = list(args.overrides) + overrides_from_flags(args)
    if args.resume is None:
        if args.checkpoint is not None:
            raise ConfigError("--checkpoint selects the checkpoint to continue from; use it with --resume")
        return resolve_config(args.task or DEFAULT_TASK, args.config, overrides)
    clashes = [
        flag
        for flag, value in (
            ("--task", args.task),
            ("--config", args.config),
            ("--log_dir", args.log_dir),
            ("--load", args.load),
        )
        if value
    ]
    if clashes:
        raise ConfigError(f"--resume takes the run's own config.yaml and folder; drop {', '.join(clashes)}")
    run = Path(args.resume)
    if not run.is_dir():
        raise ConfigError(f"run folder {str(run)!r} does not exist")
    if not (run / "config.yaml").is_file():
        raise ConfigError(f"{str(run)!r} has no config.yaml; is it a strl_jax run folder?")
    return resolve_config(None, [str(run / "config.yaml")], overrides)


def check_more_iterations(args: argparse.Namespace) -> None:
    """`--more_iterations` replaces the run's length: it cannot be combined with setting it."""
    if args.more_iterations is None:
        return
    if args.more_iterations < 1:
        raise ConfigError(f"--more_iterations must be at least 1, got {args.more_iterations}")
    sets_max = args.max_iterations is not None or any(
        o.split("=", 1)[0].strip() == "runner.max_iterations" for o in args.overrides
    )
    if sets_max:
        raise ConfigError(
            "--more_iterations N runs N iterations from the start point; --max_iterations (or "
            "runner.max_iterations) sets the whole run's length: give one of them"
        )


def start_distributed(args: argparse.Namespace, cfg) -> None:
    """Join the other processes of a multi-host run before anything touches a device."""
    explicit = [args.coordinator_address, args.num_processes, args.process_id]
    if not args.distributed:
        if any(v is not None for v in explicit):
            raise ConfigError("--coordinator_address/--num_processes/--process_id need --distributed")
        return
    if not (args.resume or cfg.runner.log_dir):
        raise ConfigError("a --distributed run needs --log_dir: one folder that every process shares")
    initialize_distributed(args.coordinator_address, args.num_processes, args.process_id)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_intermixed_args(argv)
    try:
        check_more_iterations(args)
        cfg = resolve_run_config(args)
        start_distributed(args, cfg)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        result = train(
            cfg,
            log_dir=args.resume,
            verbose=not args.quiet,
            resume=args.resume is not None,
            checkpoint=args.checkpoint,
            load=args.load,
            more_iterations=args.more_iterations,
        )
    except (CheckpointError, ConfigError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    except (NonFiniteError, DivergenceError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_NON_FINITE
    if result.interrupted:
        print(
            f"stopped by {result.interrupted} after checkpoint {result.checkpoint}; continue with "
            f"python -m strl_jax.train --resume {result.log_dir}",
            file=sys.stderr,
        )
        number = getattr(signal, result.interrupted, None)  # or a stop requested on another process
        return 128 + int(number) if number is not None else 1
    print(f"outputs written to {result.log_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
