"""Which of brax's implementation choices cost or save strl_jax env steps at brax's settings.

strl_jax `matched` (brax's published hyperparameters and implementation, bench/brax_mapping.py)
trains with each of brax's switchable choices (`brax_mapping.BRAX_CHOICE_NAMES`) added alone,
with all of them, and with all but one; every variant runs `--seeds` seeds as one population
program (`runner.num_seeds`), evaluates after every iteration and reports the env steps and wall
time to the first evaluation >= the target (inverted_pendulum: 950, brax needs ~0.66M steps).

    python bench/sample_efficiency.py --seeds 3 --iterations 12 --json /tmp/se.json

Wall times are those of the population program (all seeds at once, from the train call), so
they compare variants with each other, not with single runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from brax_mapping import BRAX_CHOICE_NAMES, brax_choices, dotted_overrides, matched, override
from common import format_table, machine_info, write_json
from vs_brax import NUM_EVAL_ENVS, brax_settings, brax_steps_per_training_step

SHORT = {
    "gae_horizon": "horizon",
    "trajectory_minibatches": "traj",
    "normalizer_before": "norm",
    "timeout_mask": "timeout",
    "tanh_distribution": "tanh",
    "brax_advantage": "badv",
    "recomputed_advantages": "recomp",
}
HEADERS = [
    "variant",
    "brax choices",
    "seeds at target",
    "median steps to target",
    "steps to target per seed",
    "median wall s to target",
    "median final eval",
    "s / iteration",
]


def variants(names: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """matched, each choice alone, all of them, and all but one (by a short label)."""
    out: dict[str, tuple[str, ...]] = {"matched": ()}
    out |= {f"+{SHORT[n]}": (n,) for n in names}
    out["all"] = names
    if len(names) > 2:
        out |= {f"all-{SHORT[n]}": tuple(m for m in names if m != n) for n in names}
    return out


def variant_overrides(
    kw: dict, task: str, choices: tuple[str, ...], iterations: int, seed: int, seeds: int
) -> list[str]:
    """`matched` without its default choices, plus `choices`, with the study's protocol."""
    settings = matched(kw, choices=())
    extra = brax_choices(kw, choices)
    return [
        *dotted_overrides(settings),
        *dotted_overrides(extra),
        override("env.task", task),
        override("seed", seed),
        override("runner.num_seeds", seeds),
        override("runner.max_iterations", iterations),
        override("runner.eval_interval", 1),
        override("runner.num_eval_envs", kw["num_eval_envs"]),
        override("runner.log_interval", 1),
        override("runner.print_interval", 1000),
        override("runner.compile_cache", False),
        override("runner.save_interval", 0),
    ]


def run_variant(task: str, overrides: list[str], log_dir: Path, steps: int, target: float) -> dict[str, Any]:
    """Train the population; per seed: env steps and wall seconds to the first eval >= target."""
    from strl_jax.configs.loader import resolve_config
    from strl_jax.runners.runner import train

    cfg = resolve_config(task, overrides=overrides)
    start = time.time()
    result = train(cfg, log_dir=log_dir, verbose=False)
    total = time.time() - start
    members = result.members or [result]
    seeds = []
    for m in members:
        evals = [r for r in m.rows if r.get("eval_reward") is not None]
        hit = next((r for r in evals if r["eval_reward"] >= target), None)
        seeds.append(
            {
                "evals": [[r["iteration"] * steps, r["wall_time"], r["eval_reward"]] for r in evals],
                "steps_to_target": hit["iteration"] * steps if hit else None,
                "wall_to_target_s": hit["wall_time"] if hit else None,
                "final_eval": evals[-1]["eval_reward"] if evals else None,
            }
        )
    times = [r["iteration_time"] for r in members[0].rows[1:]]
    return {
        "seeds": seeds,
        "total_s": total,
        "iteration_s": statistics.median(times) if times else None,
        "interrupted": result.interrupted,  # a signal stopped the run: the study stops too
    }


def median_present(values: list) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def table_row(label: str, choices: tuple[str, ...], r: dict, budget: int) -> list[Any]:
    """One variant's line; a seed that missed the target counts as '>budget' (the median too)."""
    if "error" in r:
        return [label, ",".join(SHORT[c] for c in choices) or "-", r["error"][:60], "", "", "", "", ""]
    seeds = r["seeds"]
    hits = [s["steps_to_target"] for s in seeds]
    reached = sum(h is not None for h in hits)
    ranked = sorted(h if h is not None else float("inf") for h in hits)
    mid = statistics.median(ranked)
    median_steps = f">{budget / 1e6:.2f}M" if mid == float("inf") else f"{mid / 1e6:.2f}M"
    per_seed = " ".join("-" if h is None else f"{h / 1e6:.2f}" for h in hits)
    return [
        label,
        ",".join(SHORT[c] for c in choices) or "-",
        f"{reached}/{len(seeds)}",
        median_steps,
        per_seed,
        median_present([s["wall_to_target_s"] for s in seeds]),
        median_present([s["final_eval"] for s in seeds]),
        r["iteration_s"],
    ]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="inverted_pendulum")
    p.add_argument("--backend", default="positional")
    p.add_argument("--seeds", type=int, default=3, help="seeds per variant, one population program")
    p.add_argument("--seed", type=int, default=1, help="first seed")
    p.add_argument("--iterations", type=int, default=12, help="iterations (brax training steps) per run")
    p.add_argument("--target", type=float, default=950.0)
    p.add_argument("--num-eval-envs", type=int, default=NUM_EVAL_ENVS)
    p.add_argument(
        "--choices",
        default=",".join(BRAX_CHOICE_NAMES),
        help=f"brax choices the variants combine (default: all of {', '.join(BRAX_CHOICE_NAMES)})",
    )
    p.add_argument("--variants", default="", help="comma-separated labels to run (default: all; see --list)")
    p.add_argument("--list", action="store_true", help="print the variants and their overrides")
    p.add_argument("--work-dir", default="/tmp/strl_bench_runs/sample_efficiency")
    p.add_argument("--json", default="", help="results file, rewritten after every variant")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    kw = brax_settings(args.task, 1, 1, True, args.num_eval_envs, {"seed": args.seed})
    steps = brax_steps_per_training_step(kw)
    names = tuple(c for c in args.choices.split(",") if c)
    unknown = [c for c in names if c not in BRAX_CHOICE_NAMES]
    if unknown:
        raise SystemExit(f"error: unknown --choices {unknown}; valid choices: {list(BRAX_CHOICE_NAMES)}")
    table = variants(names)
    wanted = [v for v in args.variants.split(",") if v] or list(table)
    unknown = [v for v in wanted if v not in table]
    if unknown:
        raise SystemExit(f"error: unknown variants {unknown}; valid choices: {list(table)}")
    plans = {
        label: variant_overrides(kw, args.task, table[label], args.iterations, args.seed, args.seeds)
        for label in wanted
    }
    budget = args.iterations * steps
    print(
        f"{args.task}: {steps:,} env steps per iteration, budget {budget:,}, "
        f"{args.seeds} seeds, target {args.target}"
    )
    for label, overrides in plans.items():
        print(f"{label}: " + " ".join(overrides))
    if args.list:
        return 0
    info = {"machine": machine_info(), "args": vars(args), "steps_per_iteration": steps}
    results: dict[str, Any] = {}
    for label, overrides in plans.items():
        print(f"\n[{time.strftime('%H:%M:%S')}] {label} (load {os.getloadavg()[0]:.2f}) ...", flush=True)
        try:
            r = run_variant(args.task, overrides, Path(args.work_dir) / label, steps, args.target)
        except Exception as e:  # noqa: BLE001 - one failed variant must not lose the others
            r = {"error": f"{type(e).__name__}: {e}"}
        r.update(choices=list(table[label]), overrides=overrides, load_after=os.getloadavg()[0])
        results[label] = r
        print(format_table(HEADERS, [table_row(label, table[label], r, budget)]), flush=True)
        if args.json:
            write_json(args.json, {**info, "results": results})
        if r.get("interrupted"):
            print(f"stopped by {r['interrupted']}", flush=True)
            return 1
    rows = [table_row(label, table[label], results[label], budget) for label in results]
    print(f"\nSteps to the first evaluation >= {args.target} (iteration = {steps:,} steps)")
    print(format_table(HEADERS, rows))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
