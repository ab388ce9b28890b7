"""Compile time against step time under `STRL_JAX_XLA_CPU_FAST_COMPILE` (strl_jax/xla_cpu.py).

For each case (a `python -m strl_jax.train` run of a few iterations, no persistent compilation
cache, no evaluation) and each setting of the variable, one process in turn (the settings
alternate within a case, so a machine's load drifts over both alike): the seconds XLA took to
compile the training iteration (jax's own log, `JAX_LOG_COMPILES`), and the median time of the
iterations after the first (metrics.jsonl). `quick` cases compile without XLA's optimisations
(`JAX_DISABLE_MOST_OPTIMIZATIONS=1`, as most test modules do).

    python bench/fast_compile.py --json bench/results/fast_compile.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from common import REPO_DIR, format_table, machine_info, write_json, xla_cpu_defaults

# (name, train arguments, quick): the test suite's tiny pendulum, a small Go1 (the Playground
# training test's size) both ways, and two training sizes
PENDULUM_TINY = ["--task", "inverted_pendulum", "env.num_envs=16", "runner.num_steps_per_env=8"]
GO1_SMALL = ["--task", "Go1JoystickFlatTerrain", "env.num_envs=64", "runner.num_steps_per_env=24"]
GO1_SMALL += ["policy.actor_hidden_dims=[128,128]", "policy.critic_hidden_dims=[128,128]"]
GO1_SMALL += ["algorithm.num_mini_batches=4"]
CASES = [
    ("pendulum 16 envs", PENDULUM_TINY, True),
    ("Go1 64 envs", GO1_SMALL, True),
    ("Go1 64 envs", GO1_SMALL, False),
    ("Go1 CPU preset (512 envs)", ["--task", "Go1JoystickFlatTerrain_cpu"], False),
    ("hopper (2048 envs)", ["--task", "hopper"], False),
]
COMPILED = re.compile(r"Finished XLA compilation of jit\(iteration\) in ([0-9.]+)")


def run_case(args: list[str], quick: bool, fast: bool, iterations: int) -> dict:
    env = dict(os.environ)
    env["XLA_FLAGS"] = " ".join(
        f for f in env.get("XLA_FLAGS", "").split() if f not in xla_cpu_defaults().added_flags()
    )
    env[xla_cpu_defaults().FAST_COMPILE_VARIABLE] = "1" if fast else "0"
    env["JAX_DISABLE_MOST_OPTIMIZATIONS"] = "1" if quick else "0"
    env["JAX_LOG_COMPILES"] = "1"
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "strl_jax.train", *args, f"runner.max_iterations={iterations}"]
        cmd += ["runner.eval_interval=0", "runner.compile_cache=false", "--log_dir", tmp, "--quiet"]
        done = subprocess.run(cmd, env=env, cwd=REPO_DIR, capture_output=True, text=True, timeout=1800)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stderr[-3000:]}")
        compiles = [float(s) for s in COMPILED.findall(done.stdout + done.stderr)]
        rows = [json.loads(line) for line in (Path(tmp) / "metrics.jsonl").read_text().splitlines()]
    return {
        "compile_s": sum(compiles),
        "iteration_s": statistics.median(r["iteration_time"] for r in rows[1:]),
        "env_steps_per_iteration": rows[0]["env_steps"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=5, help="training iterations per run")
    parser.add_argument("--only", nargs="*", help="case names to run (default: all)")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    results, rows = [], []
    for name, train_args, quick in CASES:
        if args.only and name not in args.only:
            continue
        runs = {fast: run_case(train_args, quick, fast, args.iterations) for fast in (False, True)}
        results.append({"case": name, "quick": quick, "default": runs[False], "fast_compile": runs[True]})
        d, f = runs[False], runs[True]
        rows.append(
            [
                name,
                "off" if quick else "on",
                f"{d['compile_s']:.1f} / {f['compile_s']:.1f}",
                f"{f['compile_s'] / d['compile_s']:.2f}",
                f"{d['iteration_s']:.2f} / {f['iteration_s']:.2f}",
                f"{f['iteration_s'] / d['iteration_s']:.2f}",
            ]
        )
        print(rows[-1], flush=True)
    headers = ["case", "XLA optimisations", "compile s (XLA / fast)", "ratio", "iteration s", "ratio"]
    print(format_table(headers, rows))
    if args.json:
        write_json(args.json, {"machine": machine_info(), "iterations": args.iterations, "cases": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
