"""Steps/s of K runs in one program (`--num_seeds K`) against K separate runs of the same config.

For each K, the population's `init` + first iteration (compile included, from an empty
compilation cache) and then `--iterations` timed iterations; the single run is measured the same
way. K separate runs take K times the single run's iteration time (run one after another on the
same cores; run side by side they share them). Host-side logging and evaluation are left out:
this measures the compiled iteration, which is what the population shares.

    python bench/population_throughput.py --task inverted_pendulum --num-envs 128 --ks 1 2 4 8
    python bench/population_throughput.py --task hopper --num-envs 256 --ks 1 4 16   # a GPU

Printed: K, compile seconds, seconds per iteration, env steps/s of all members together, and the
speed-up over K separate runs (K x single iteration time / population iteration time).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import jax

from strl_jax.configs.loader import resolve_config
from strl_jax.runners.runner import build_programs, release_programs, steps_per_iteration


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", default="inverted_pendulum")
    p.add_argument("--num-envs", type=int, default=128, help="envs per member")
    p.add_argument("--ks", type=int, nargs="+", default=[1, 2, 4, 8], help="population sizes")
    p.add_argument("--iterations", type=int, default=10, help="timed iterations after the first")
    p.add_argument("--json", type=Path, help="write the rows here too")
    p.add_argument("overrides", nargs="*", help="config overrides (key.sub=value)")
    return p.parse_args()


def measure(task: str, overrides: list[str], iterations: int) -> dict[str, float]:
    """Compile (first iteration included) and steady iteration time of one config's programs."""
    cfg = resolve_config(task, overrides=overrides)
    start = time.perf_counter()
    programs = build_programs(cfg)
    keys = jax.random.split(jax.random.PRNGKey(0), cfg.runner.num_seeds)
    state = programs.init(keys if cfg.runner.num_seeds > 1 else keys[0])
    state = programs.env_iteration(*state)
    jax.block_until_ready(state)
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(iterations):
        state = programs.env_iteration(*state[:2])
    jax.block_until_ready(state)
    per_iteration = (time.perf_counter() - start) / iterations
    steps = steps_per_iteration(cfg) * cfg.runner.num_seeds
    release_programs()
    return {"compile_s": compile_s, "iteration_s": per_iteration, "steps_per_s": steps / per_iteration}


def main() -> int:
    args = parse_args()
    jax.config.update("jax_compilation_cache_dir", tempfile.mkdtemp(prefix="population_bench_"))
    base = [f"env.num_envs={args.num_envs}", "runner.compile_cache=false", *args.overrides]
    single = measure(args.task, base, args.iterations)
    rows = []
    print(f"{args.task}, {args.num_envs} envs per member, {jax.devices()[0].device_kind}")
    print("| K | compile s | s / iteration | env steps/s (all members) | vs K separate runs |")
    print("|---|---|---|---|---|")
    for k in args.ks:
        result = single if k == 1 else measure(args.task, [*base, f"runner.num_seeds={k}"], args.iterations)
        speedup = k * single["iteration_s"] / result["iteration_s"]
        rows.append({"k": k, **result, "speedup_vs_separate": speedup})
        print(
            f"| {k} | {result['compile_s']:.1f} | {result['iteration_s']:.3f} | "
            f"{result['steps_per_s']:,.0f} | {speedup:.2f}x |",
            flush=True,
        )
    if args.json:
        args.json.write_text(json.dumps({"single": single, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
