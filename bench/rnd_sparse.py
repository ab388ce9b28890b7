"""RND (`algorithm.rnd_cfg`) against PPO alone on a sparse-reward task, several seeds, equal env steps.

Runs (each in its own subprocess, `python bench/common.py strl-worker`, seed by seed, PPO first):

- ppo  the task's preset, scaled down as below.
- rnd  the same plus rsl_rl's RND: `--rnd-weight` (times env.dt, as rsl_rl does), state and reward
       normalisation, `--rnd-outputs` embedding values, predictor and target `--rnd-hidden`, ELU,
       its own Adam at 1e-3, reading the `policy` observation group.

`--scale cpu` (default) shrinks the GPU preset to `--num-envs` envs x `--steps-per-env` steps,
`--mini-batches` minibatches and `--epochs` epochs (networks, gamma, entropy, reward scale and
learning rate stay the preset's); `--scale preset` keeps the preset's sizes. Both arms run
`--iterations` iterations, so they see the same env steps; evaluations (deterministic policy,
`--num-eval-envs` envs, one full episode each) fall at `--evals` equal fractions of the budget.
Compiled programs are shared by the seeds of an arm through the persistent compilation cache
(`STRL_JAX_CACHE_DIR`, default /tmp/strl_jax_cache).

    python bench/rnd_sparse.py --iterations 96 --seeds 1 2 3 --out /tmp/rnd_sparse   # 2-core CPU
    python bench/rnd_sparse.py --scale preset --iterations 62 --out /tmp/rnd_sparse_gpu

Printed per arm and seed, and as mean +- std over seeds: evaluation return at each evaluation,
the environment's sparse reward per training step (raw, before reward scale and RND bonus) over
the last tenth of the iterations, the env step at which the training rollouts first earned any
sparse reward, the training episode return of the last iteration that finished episodes, and the
run's time. The table goes to `<out>/table.md` (rewritten after every run), rows and configs to
`<out>/results.json`, each run's folder to `<out>/runs/`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from common import REPO_DIR, child_environment, format_table, machine_info, run_worker, write_json

ARMS = {"ppo": "PPO", "rnd": "PPO + RND"}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", default="CartpoleSwingupSparse", help="preset task with a sparse reward")
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3], help="seeds (each runs both arms)")
    p.add_argument("--arms", default="ppo,rnd", help="which arms, comma-separated")
    p.add_argument("--iterations", type=int, default=96, help="training iterations of every run")
    p.add_argument("--scale", choices=["cpu", "preset"], default="cpu", help="cpu: the sizes below")
    p.add_argument("--num-envs", type=int, default=256, help="cpu scale: envs")
    p.add_argument("--steps-per-env", type=int, default=32, help="cpu scale: steps per env and iteration")
    p.add_argument("--mini-batches", type=int, default=4, help="cpu scale: minibatches per epoch")
    p.add_argument("--epochs", type=int, default=4, help="cpu scale: learning epochs per iteration")
    p.add_argument("--evals", type=int, default=4, help="evaluations per run, at equal fractions")
    p.add_argument("--num-eval-envs", type=int, default=32, help="evaluation envs (one episode each)")
    p.add_argument("--rnd-weight", type=float, default=0.5, help="rnd_cfg.weight (times env.dt)")
    p.add_argument("--rnd-outputs", type=int, default=32, help="rnd_cfg.num_outputs")
    p.add_argument(
        "--rnd-hidden",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[128, 128],
        help="predictor and target hidden sizes, comma-separated",
    )
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override for every run")
    p.add_argument("--timeout", type=float, default=None, help="seconds per run (default: none)")
    p.add_argument("--out", default="/tmp/rnd_sparse", help="output folder")
    return p.parse_args(argv)


def common_overrides(args: argparse.Namespace) -> list[str]:
    """Overrides both arms get: sizes, evaluation cadence, logging."""
    out = [
        f"runner.max_iterations={args.iterations}",
        f"runner.eval_interval={max(1, math.ceil(args.iterations / args.evals))}",
        f"runner.num_eval_envs={args.num_eval_envs}",
        "runner.save_interval=0",
        "runner.print_interval=1000000",
    ]
    if args.scale == "cpu":
        out += [
            f"env.num_envs={args.num_envs}",
            f"runner.num_steps_per_env={args.steps_per_env}",
            f"algorithm.num_mini_batches={args.mini_batches}",
            f"algorithm.num_learning_epochs={args.epochs}",
        ]
    return out + list(args.set)


def rnd_override(args: argparse.Namespace) -> str:
    """The `algorithm.rnd_cfg` of the rnd arm."""
    hidden = "[" + ",".join(str(h) for h in args.rnd_hidden) + "]"
    return (
        f"algorithm.rnd_cfg={{weight: {args.rnd_weight}, reward_normalization: true, "
        f"state_normalization: true, learning_rate: 0.001, num_outputs: {args.rnd_outputs}, "
        f"predictor_hidden_dims: {hidden}, target_hidden_dims: {hidden}, activation: elu, "
        "obs_group: policy}"
    )


def read_rows(log_dir: Path) -> list[dict]:
    """One run's metrics.jsonl rows (one per iteration)."""
    path = log_dir / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def first_sparse_step(rows: list[dict]) -> int | None:
    """Env steps at the end of the first iteration whose rollouts earned any sparse reward."""
    return next((r["env_steps"] for r in rows if (r.get("mean_step_reward") or 0.0) > 0.0), None)


def summarize(rows: list[dict]) -> dict[str, Any]:
    """The table's numbers from one run's metrics rows."""
    evals = [r for r in rows if r.get("eval_reward") is not None]
    tail = rows[-max(1, len(rows) // 10) :]
    finished = [r for r in rows if r.get("mean_reward") is not None]
    return {
        "iterations": len(rows),
        "env_steps": rows[-1]["env_steps"] if rows else None,
        "evals": [{"env_steps": r["env_steps"], "eval_reward": r["eval_reward"]} for r in evals],
        "final_eval": evals[-1]["eval_reward"] if evals else None,
        "step_reward_tail": statistics.fmean(r["mean_step_reward"] for r in tail) if tail else None,
        "first_sparse_step": first_sparse_step(rows),
        "train_return_last": finished[-1]["mean_reward"] if finished else None,
        "intrinsic_tail": statistics.fmean(r["mean_step_intrinsic_reward"] for r in tail)
        if tail and "mean_step_intrinsic_reward" in tail[0]
        else None,
    }


def mean_std(values: list[float | None]) -> tuple[float | None, float | None]:
    """Mean and sample std of the present values (std None with fewer than two)."""
    present = [v for v in values if v is not None]
    if not present:
        return None, None
    std = statistics.stdev(present) if len(present) > 1 else None
    return statistics.fmean(present), std


def cell(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def pm(values: list[float | None], digits: int = 1) -> str:
    """`mean +- std` of the present values, with the count when some are missing."""
    mean, std = mean_std(values)
    text = cell(mean, digits) + ("" if std is None else f" ± {std:.{digits}f}")
    missing = sum(v is None for v in values)
    return text + (f" ({len(values) - missing}/{len(values)})" if missing and mean is not None else "")


def eval_columns(results: list[dict]) -> list[int]:
    """The env steps of the evaluations (the same for every run of the benchmark)."""
    steps = {e["env_steps"] for r in results for e in (r.get("summary") or {}).get("evals", [])}
    return sorted(steps)


def eval_at(summary: dict, step: int) -> float | None:
    return next((e["eval_reward"] for e in summary.get("evals", []) if e["env_steps"] == step), None)


def row_values(result: dict, steps: list[int]) -> list[Any]:
    """One run's numbers, in the table's column order (after arm and seed)."""
    s = result.get("summary") or {}
    first = s.get("first_sparse_step")
    return [
        *(eval_at(s, step) for step in steps),
        s.get("step_reward_tail"),
        None if first is None else float(first),
        s.get("train_return_last"),
        result.get("total_s", result.get("wall_s")),
    ]


def table(results: list[dict]) -> str:
    """Per run and per arm (mean +- std over seeds) rows of the markdown table."""
    steps = eval_columns(results)
    headers = [
        "arm",
        "seed",
        *(f"eval @ {s / 1e3:,.0f}k" for s in steps),
        "sparse reward/step (last 10%)",
        "first sparse reward at step",
        "train return (last)",
        "run s",
    ]
    digits = [1] * len(steps) + [4, 0, 1, 0]
    lines = []
    for arm in dict.fromkeys(r["arm"] for r in results):
        runs = [r for r in results if r["arm"] == arm]
        for r in runs:
            values = row_values(r, steps)
            seed = f"{r['seed']}" + (" (failed)" if r.get("error") else "")
            lines.append([ARMS[arm], seed, *(cell(v, d) for v, d in zip(values, digits, strict=True))])
        columns = list(zip(*(row_values(r, steps) for r in runs), strict=True))
        stats = (pm(list(c), d) for c, d in zip(columns, digits, strict=True))
        lines.append([ARMS[arm], "mean ± std", *stats])
    return format_table(headers, lines)


def header(args: argparse.Namespace, common: list[str], results: list[dict]) -> str:
    """Machine, configuration and command lines printed above the table."""
    info = machine_info()
    devices = {r["device"]["device_kind"] for r in results if r.get("device")}
    steps = {r["summary"]["env_steps"] for r in results if r.get("summary")}
    return "\n".join(
        [
            f"{args.task}: PPO alone vs PPO + RND, {args.iterations} iterations "
            f"({', '.join(f'{s:,}' for s in sorted(steps))} env steps), seeds {args.seeds}",
            f"machine: {info['cpu_model']} ({info['cpu_count']} CPUs), device {', '.join(sorted(devices))}",
            "overrides of both arms: " + " ".join(common),
            "rnd arm: " + rnd_override(args),
            "command: python bench/rnd_sparse.py " + shlex.join(sys.argv[1:]),
        ]
    )


def run_one(args: argparse.Namespace, arm: str, seed: int, common: list[str], out: Path) -> dict:
    """Train one arm and seed in a worker subprocess; its result with the metrics summary."""
    name = f"{arm}_s{seed}"
    log_dir = out / "runs" / name
    overrides = [*common, f"seed={seed}"] + ([rnd_override(args)] if arm == "rnd" else [])
    spec = {"task": args.task, "overrides": overrides, "log_dir": str(log_dir)}
    env = child_environment()
    env["STRL_JAX_CACHE_DIR"] = os.environ.get("STRL_JAX_CACHE_DIR", "/tmp/strl_jax_cache")
    worker = [sys.executable, str(REPO_DIR / "bench" / "common.py"), "strl-worker"]
    result = run_worker(worker, spec, out / "logs", name, args.timeout, env=env)
    rows = read_rows(log_dir)
    result.update(arm=arm, seed=seed, overrides=overrides, summary=summarize(rows) if rows else None)
    return result


def report(args: argparse.Namespace, common: list[str], results: list[dict], out: Path) -> str:
    """Write table.md and results.json; return the printed text."""
    text = header(args, common, results) + "\n\n" + table(results)
    out.mkdir(parents=True, exist_ok=True)
    (out / "table.md").write_text(text + "\n")
    slim = [{k: v for k, v in r.items() if k != "evals"} for r in results]
    write_json(out / "results.json", {"machine": machine_info(), "args": vars(args), "results": slim})
    return text


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    if any(a not in ARMS for a in arms):
        print(f"unknown arms in {arms}; choose from {list(ARMS)}", file=sys.stderr)
        return 2
    out = Path(args.out)
    common = common_overrides(args)
    print("overrides of both arms: " + " ".join(common) + "\nrnd arm: " + rnd_override(args), flush=True)
    results = []
    start = time.time()
    for seed in args.seeds:
        for arm in arms:
            print(f"[{time.strftime('%H:%M:%S')}] {arm} seed {seed}", flush=True)
            result = run_one(args, arm, seed, common, out)
            results.append(result)
            s = result["summary"] or {}
            status = result["error"].splitlines()[0] if result.get("error") else "ok"
            print(f"    {status}: {result['wall_s']:.0f} s, evals {s.get('evals')}", flush=True)
            report(args, common, results, out)
    print("\n" + report(args, common, results, out) + f"\n\nwall time: {time.time() - start:.0f} s")
    return 1 if any(r.get("error") for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
