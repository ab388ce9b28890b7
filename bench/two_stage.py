"""Two-stage training (st_rl's TwoStageRunner) against RL alone, at equal env steps, several seeds.

An expert (the test suite's full-state PPO pendulum expert, `tests/learning_runs.py`) records
`--dataset-steps` steps with its sampled actions (`python -m strl_jax.collect --sample_actions`).
Each seed then trains twice from scratch:

- two-stage  `--pretrain` iterations on the dataset (`runner.pretrain_iterations`; no env step),
             then `--iterations` RL iterations;
- RL alone   `--iterations` RL iterations.

The deterministic evaluation return (16 envs, 200-step episodes) is printed against the env steps
each arm has taken, so pretraining's iterations count for nothing; also the time each arm took.

    python bench/two_stage.py --seeds 1 2 3 4 5 --out /tmp/two_stage
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from common import REPO_DIR, format_table, machine_info, write_json

sys.path.insert(0, str(REPO_DIR / "tests"))
from learning_runs import PENDULUM_COMMON, train_expert  # noqa: E402

from strl_jax.collect import main as collect_main  # noqa: E402
from strl_jax.configs.loader import resolve_config  # noqa: E402
from strl_jax.train_loops.runner import train  # noqa: E402


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    p.add_argument("--pretrain", type=int, default=5, help="pretraining iterations on the dataset")
    p.add_argument("--iterations", type=int, default=20, help="RL iterations of each arm")
    p.add_argument("--dataset-steps", type=int, default=3200)
    p.add_argument("--eval-every", type=int, default=5, help="RL iterations between evaluations")
    p.add_argument("--out", type=Path, default=Path("/tmp/two_stage"))
    return p.parse_args()


def curve(rows: list[dict]) -> dict[int, float]:
    """Evaluation return by env steps taken."""
    return {r["env_steps"]: r["eval_reward"] for r in rows if "eval_reward" in r}


def main() -> int:
    args = parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    start = time.time()
    expert, expert_return = train_expert(args.out / "expert")
    data = args.out / "dataset"
    if not data.exists():
        collect = [str(expert), "--out", str(data), "--num_envs", "16",
                   "--min_timesteps", str(args.dataset_steps),
                   "--amp_obs_components", "joint_pos,joint_vel", "--sample_actions"]  # fmt: skip
        assert collect_main(collect) == 0
    print(f"expert return {expert_return:.1f}; dataset {data} ({time.time() - start:.0f} s)", flush=True)
    common = [*PENDULUM_COMMON, "runner.num_steps_per_env=16"]
    pretrain = [
        f"runner.pretrain_iterations={args.pretrain}",
        f"runner.pretrain_dataset={{data_dir: {data}, dataset_loops: -1}}",
        f"runner.eval_interval={args.eval_every}",
        f"runner.max_iterations={args.pretrain + args.iterations}",
    ]
    alone = [f"runner.eval_interval={args.eval_every}", f"runner.max_iterations={args.iterations}"]
    results: dict[str, dict[int, dict[int, float]]] = {"two-stage": {}, "RL alone": {}}
    times: dict[str, list[float]] = {"two-stage": [], "RL alone": []}
    for seed in args.seeds:
        for arm, overrides in (("two-stage", pretrain), ("RL alone", alone)):
            cfg = resolve_config("inverted_pendulum_teacher", overrides=[*common, *overrides, f"seed={seed}"])
            t0 = time.time()
            result = train(cfg, args.out / "runs" / f"{arm.replace(' ', '_')}_s{seed}", verbose=False)
            times[arm].append(time.time() - t0)
            results[arm][seed] = curve(result.rows)
            print(f"{arm} seed {seed}: {results[arm][seed]}", flush=True)
    steps = sorted(set().union(*(c.keys() for arm in results.values() for c in arm.values())))
    header = ["arm", "seconds", *[f"{s:,} env steps" for s in steps]]
    table = []
    for arm, by_seed in results.items():
        cells = []
        for s in steps:
            values = [c[s] for c in by_seed.values() if s in c]
            cells.append(
                f"{statistics.mean(values):.1f} +- {statistics.pstdev(values):.1f}" if values else "-"
            )
        table.append([arm, f"{statistics.mean(times[arm]):.0f}", *cells])
    print(format_table(header, table))
    summary = {"machine": machine_info(), "args": vars(args) | {"out": str(args.out)}}
    write_json(args.out / "results.json", summary | {"results": results, "times": times})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
