"""Sim-to-sim: a run's exported policy in native MuJoCo (C physics, onnxruntime) beside the JAX
evaluation of the same policy, same initial states, same commands, same episode count.

    python bench/sim_to_sim.py RUN [--checkpoint N] [--episodes 16] [--episode_length T] [--seed 0]
        [--native generic|hand] [--hfield-contacts mjx|mujoco] [--out FILE.json]

Both sides run the task's nominal model (no domain randomisation) with noise-free observations
(`strl_jax.deploy`). Prints a markdown table (mean +- std over episodes; the paired difference
native - JAX per episode) and whether the mean returns agree within `RETURN_TOLERANCE` of the JAX
mean: the two engines (MJX in float32, C MuJoCo in float64) start from the same state but drift
apart over an episode, so single episodes may differ while the means should not.
`--hfield-contacts` runs the JAX side under another heightfield contact rule than the run's
(`env.hfield_contacts`): a policy trained on MJX's contacts, run on C MuJoCo's in the JAX env.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

from common import format_table, machine_info

from strl_jax.inference import load_policy
from strl_jax.native_episodes import METRICS, NATIVE_PATHS, compare, exported_onnx, load_onnx_policy

RETURN_TOLERANCE = 0.05  # relative to the JAX mean return


def mean_std(values: list[float]) -> str:
    spread = statistics.pstdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):.3f} +- {spread:.3f}"


def table(native: list[dict], jax_side: list[dict]) -> str:
    rows = []
    for key in METRICS:
        a, b = [e[key] for e in native], [e[key] for e in jax_side]
        diff = [x - y for x, y in zip(a, b, strict=True)]
        rows.append(
            [key, mean_std(a), mean_std(b), f"{statistics.fmean(diff):+.4f}", f"{max(map(abs, diff)):.4f}"]
        )
    headers = ["metric", "native MuJoCo", "JAX (MJX) eval", "mean diff", "max abs diff"]
    return format_table(headers, rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", help="run folder")
    parser.add_argument("--checkpoint", type=int, default=None, help="checkpoint step (default: newest)")
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--episode_length", type=int, default=None, help="steps (default: the run's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--native", choices=NATIVE_PATHS, default="generic", help="native path (deploy's --native)"
    )
    parser.add_argument(
        "--hfield-contacts", choices=("mjx", "mujoco"), default=None, help="the JAX side's rule"
    )
    parser.add_argument("--out", help="write the per-episode metrics and the machine as JSON")
    args = parser.parse_args(argv)

    begin = time.perf_counter()
    loaded = load_policy(args.run, args.checkpoint)
    policy = load_onnx_policy(exported_onnx(Path(args.run), loaded, args.checkpoint))
    if args.hfield_contacts:
        env = dataclasses.replace(loaded.cfg.env, hfield_contacts=args.hfield_contacts)
        loaded = dataclasses.replace(loaded, cfg=dataclasses.replace(loaded.cfg, env=env))
    result = compare(loaded, policy, args.episodes, args.seed, args.episode_length, native=args.native)
    wall = time.perf_counter() - begin

    native_return = statistics.fmean(e["return"] for e in result.native)
    jax_return = statistics.fmean(e["return"] for e in result.jax)
    gap = abs(native_return - jax_return) / max(abs(jax_return), 1e-9)
    machine = machine_info()
    length = args.episode_length or loaded.cfg.env.episode_length
    print(
        f"{loaded.cfg.env.task}, checkpoint {loaded.step}, {args.episodes} episodes x up to {length} steps, "
        f"nominal physics, noise-free observations, same starts and commands, {args.native} native path, "
        f"the JAX side on {loaded.cfg.env.hfield_contacts}'s heightfield contacts\n"
    )
    print(table(result.native, result.jax))
    print(
        f"\nmean return gap {100 * gap:.2f}% of the JAX mean (tolerance {100 * RETURN_TOLERANCE:.0f}%): "
        f"{'within' if gap <= RETURN_TOLERANCE else 'OUTSIDE'}"
    )
    print(
        f"native {result.native_seconds:.1f} s, JAX {result.jax_seconds:.1f} s (incl. compile), "
        f"total {wall:.1f} s; {machine['cpu_model']}, {machine['cpu_count']} CPUs"
    )
    if args.out:
        data = {"native": result.native, "jax": result.jax, "machine": machine, "wall_s": wall, "gap": gap}
        data |= {"checkpoint": loaded.step, "jax_hfield_contacts": loaded.cfg.env.hfield_contacts}
        Path(args.out).write_text(json.dumps(data, indent=1))
    return 0 if gap <= RETURN_TOLERANCE else 1


if __name__ == "__main__":
    sys.exit(main())
