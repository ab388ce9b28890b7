"""Go1JoystickFlatTerrain without a measured base linear velocity: PPO, EstimatorPPO and an
EstimatorTPPO student at equal env steps, same seed and settings.

Runs (each in its own subprocess, `python bench/common.py strl-worker`, in this order):

- t  teacher: PPO whose actor reads `privileged_state` (configs/Go1JoystickFlatTerrain_teacher).
- a  PPO whose actor reads `state` with its (noisy) base_lin_vel (configs/Go1JoystickFlatTerrain).
- b  PPO whose actor reads `state` without base_lin_vel (`env.obs_components`: 45 values).
- c  EstimatorPPO (StateAc, configs/Go1JoystickFlatTerrain_estimator): an MLP estimates
     base_lin_vel from the other 45 values and always replaces the actor's.
- d  EstimatorTPPO student (configs/Go1JoystickFlatTerrain_student) of the teacher t.

`--scale cpu` (default) scales the presets down as tests/test_playground_training.py does
(`--num-envs` envs x `--steps-per-env` steps, 4 minibatches, [128, 128] networks, initial noise
std 0.2, no entropy bonus); `--scale preset` keeps the presets' settings (Playground's published
PPO settings: 8192 envs x 20 steps, 32 minibatches, [512, 256, 128], noise std 1, entropy 0.01),
with `--num-envs` / `--steps-per-env` overriding only when given. The student's teacher schedule
(`algorithm.update_times_scale`) is `--update-times-scale`, by default a sixth of the iterations.

    python bench/go1_estimator.py --iterations 150 --out /tmp/go1_estimator          # 2-core CPU
    python bench/go1_estimator.py --scale preset --iterations 300 --out /tmp/go1_gpu  # a GPU

Printed per run: evaluation return (deterministic, `--num-eval-envs` envs, one episode each) and
velocity-tracking RMSD (`eval_velrmsd`, m/s and rad/s) at the last evaluation and the best of all
evaluations, the training return (`mean_reward`, episodes finished in the last tenth of the
iterations) and reward per env step, env steps, setup + first iteration (compilation) and whole run
time, and for c/d the RMSE of the estimated base_lin_vel (m/s, over the estimates made while acting)
at the first, middle and last iteration. Rows and configs go to `<out>/results.json`, the table to
`<out>/table.md`, each run's folder to `<out>/runs/`.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

from common import REPO_DIR, format_table, machine_info, run_worker, write_json

TASK = "Go1JoystickFlatTerrain"
RUNS = {
    "t": ("teacher: PPO, actor reads privileged_state", f"{TASK}_teacher"),
    "a": ("PPO, state with base_lin_vel", TASK),
    "b": ("PPO, state without base_lin_vel", TASK),
    "c": ("EstimatorPPO (StateAc)", f"{TASK}_estimator"),
    "d": ("EstimatorTPPO student of t", f"{TASK}_student"),
}
WITHOUT_LIN_VEL = "[base_ang_vel, projected_gravity, dof_pos, dof_vel, last_action, command]"
RMSE = "estimator_rmse_base_lin_vel"
# Playground's Go1 joystick adds uniform(-0.1, 0.1) m/s noise to the base_lin_vel of `state`
NOISE_RMSE = 0.1 / math.sqrt(3.0)


def scale_overrides(args: argparse.Namespace) -> list[str]:
    """Overrides every run gets: sizes, evaluation cadence, logging."""
    out = [
        f"runner.max_iterations={args.iterations}",
        f"runner.eval_interval={max(1, math.ceil(args.iterations / args.evals))}",
        f"runner.num_eval_envs={args.num_eval_envs}",
        "runner.save_interval=0",  # a run still saves its last iteration (the teacher's checkpoint)
        "runner.print_interval=1000000",
    ]
    if args.scale == "cpu":
        hidden = "[" + ",".join(str(h) for h in args.hidden) + "]"
        out += [
            f"env.num_envs={args.num_envs or 256}",
            f"runner.num_steps_per_env={args.steps_per_env or 24}",
            f"algorithm.num_mini_batches={args.mini_batches or 4}",
            f"policy.actor_hidden_dims={hidden}",
            f"policy.critic_hidden_dims={hidden}",
            "policy.init_noise_std=0.2",
            "algorithm.entropy_coef=0.0",
        ]
    else:
        out += [f"env.num_envs={args.num_envs}"] if args.num_envs else []
        out += [f"runner.num_steps_per_env={args.steps_per_env}"] if args.steps_per_env else []
        out += [f"algorithm.num_mini_batches={args.mini_batches}"] if args.mini_batches else []
    return out + list(args.set)


def run_overrides(run: str, args: argparse.Namespace, teacher_dir: Path | None) -> list[str]:
    if run == "b":
        return [f"env.obs_components={{policy: {WITHOUT_LIN_VEL}}}"]
    if run == "d":
        scale = args.update_times_scale or max(1.0, round(args.iterations / 6))
        student = [
            f"algorithm.teacher_policy.checkpoint={teacher_dir}",
            f"algorithm.update_times_scale={scale}",
        ]
        return student + list(args.student_set)
    return []


def read_rows(log_dir: Path) -> list[dict]:
    path = log_dir / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def summarize(rows: list[dict]) -> dict:
    """The table's numbers from one run's metrics rows."""
    evals = [r for r in rows if r.get("eval_reward") is not None]
    tail = rows[-max(1, len(rows) // 10) :]
    episodes = sum(r["episodes"] for r in tail if r.get("mean_reward") is not None)
    returns = sum(r["mean_reward"] * r["episodes"] for r in tail if r.get("mean_reward") is not None)
    out = {
        "iterations": len(rows),
        "env_steps": rows[-1]["env_steps"] if rows else None,
        "eval_reward_last": evals[-1]["eval_reward"] if evals else None,
        "eval_reward_best": max(r["eval_reward"] for r in evals) if evals else None,
        "eval_velrmsd_last": evals[-1].get("eval_velrmsd") if evals else None,
        "eval_velrmsd_best": min(r["eval_velrmsd"] for r in evals if "eval_velrmsd" in r) if evals else None,
        "evals": [
            {k: r.get(k) for k in ("iteration", "env_steps", "eval_reward", "eval_velrmsd", "eval_CoT")}
            for r in evals
        ],
        "mean_reward_tail": returns / episodes if episodes else None,
        "episodes_tail": episodes,
        "step_reward_tail": statistics.fmean(r["mean_step_reward"] for r in tail) if tail else None,
        "tail_iterations": len(tail),
    }
    with_rmse = [r for r in rows if RMSE in r]
    if with_rmse:
        picks = sorted({0, (len(with_rmse) - 1) // 2, len(with_rmse) - 1})
        out["rmse"] = [(with_rmse[i]["iteration"], with_rmse[i][RMSE]) for i in picks]
    return out


def fmt_number(value, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def table(results: list[dict]) -> str:
    headers = [
        "run",
        "seed",
        "eval return last / best",
        "eval velrmsd last / best",
        "train return (last 10%)",
        "reward/step (last 10%)",
        "env steps",
        "setup+1st it s",
        "run s",
        "base_lin_vel RMSE m/s (iteration)",
    ]
    lines = []
    for r in results:
        s = r.get("summary") or {}
        rmse = " / ".join(f"{v:.3f} ({i})" for i, v in s.get("rmse", [])) or "-"
        if r.get("error"):
            rmse = "failed: see " + r.get("log", "the log")
        lines.append(
            [
                f"{r['run']}: {RUNS[r['run']][0]}",
                str(r["seed"]),
                f"{fmt_number(s.get('eval_reward_last'))} / {fmt_number(s.get('eval_reward_best'))}",
                f"{fmt_number(s.get('eval_velrmsd_last'), 3)} / {fmt_number(s.get('eval_velrmsd_best'), 3)}",
                fmt_number(s.get("mean_reward_tail")),
                fmt_number(s.get("step_reward_tail"), 4),
                s.get("env_steps"),
                r.get("first_iteration_s"),
                r.get("total_s", r.get("wall_s")),
                rmse,
            ]
        )
    return format_table(headers, lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--iterations", type=int, default=150, help="training iterations of every run")
    p.add_argument("--num-envs", type=int, default=None, help="envs (cpu scale: default 256)")
    p.add_argument("--steps-per-env", type=int, default=None, help="steps per env and iteration (cpu: 24)")
    p.add_argument("--mini-batches", type=int, default=None, help="minibatches per epoch (cpu: 4)")
    p.add_argument(
        "--hidden",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[128, 128],
        help="cpu scale: actor and critic hidden sizes, comma-separated (default 128,128)",
    )
    p.add_argument(
        "--scale",
        choices=["cpu", "preset"],
        default="cpu",
        help="cpu: the test suite's small Go1 settings; preset: the presets' (GPU) settings",
    )
    p.add_argument("--evals", type=int, default=4, help="evaluations per run (the last at the end)")
    p.add_argument("--num-eval-envs", type=int, default=16, help="evaluation envs (one episode each)")
    p.add_argument(
        "--update-times-scale",
        type=float,
        default=None,
        help="the student's teacher_act_prob scale (default: a sixth of the iterations)",
    )
    p.add_argument("--seeds", type=int, nargs="+", default=[1], help="seeds (each runs every run)")
    p.add_argument("--runs", default="t,a,b,c,d", help="which runs, comma-separated (d needs t or --teacher)")
    p.add_argument("--teacher", default=None, help="use this teacher run folder for d instead of running t")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override for every run")
    p.add_argument(
        "--student-set", action="append", default=[], metavar="KEY=VALUE", help="override for run d only"
    )
    p.add_argument("--timeout", type=float, default=None, help="seconds per run (default: none)")
    p.add_argument("--out", default="/tmp/go1_estimator", help="output folder")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    runs = [r.strip() for r in args.runs.split(",") if r.strip()]
    unknown = [r for r in runs if r not in RUNS]
    if unknown:
        print(f"unknown runs {unknown}; choose from {list(RUNS)}", file=sys.stderr)
        return 2
    out = Path(args.out)
    common = scale_overrides(args)
    print(f"{TASK}: runs {runs}, seeds {args.seeds}, scale {args.scale}")
    print("overrides of every run: " + " ".join(common))
    worker = [sys.executable, str(REPO_DIR / "bench" / "common.py"), "strl-worker"]
    results = []
    for seed in args.seeds:
        teacher_dir = Path(args.teacher) if args.teacher else out / "runs" / f"t_s{seed}"
        for run in runs:
            log_dir = out / "runs" / f"{run}_s{seed}"
            overrides = [*common, f"seed={seed}", *run_overrides(run, args, teacher_dir)]
            spec = {"task": RUNS[run][1], "overrides": overrides, "log_dir": str(log_dir)}
            start = time.time()
            print(
                f"[{time.strftime('%H:%M:%S')}] {run} seed {seed}: {RUNS[run][1]} {' '.join(overrides)}",
                flush=True,
            )
            result = run_worker(worker, spec, out / "logs", f"{run}_s{seed}", args.timeout)
            rows = read_rows(log_dir)
            result.update(
                run=run,
                seed=seed,
                task=RUNS[run][1],
                overrides=overrides,
                summary=summarize(rows) if rows else None,
            )
            results.append(result)
            s = result["summary"] or {}
            status = result.get("error", "").splitlines()[0] if result.get("error") else "ok"
            print(
                f"    {status}: {time.time() - start:.0f} s, eval {s.get('evals')}, rmse {s.get('rmse')}",
                flush=True,
            )
    text = table(results)
    info = machine_info()
    header = (
        f"{TASK}, {info['cpu_model']} ({info['cpu_count']} CPUs); "
        f"reference: the measured base_lin_vel of run a has noise RMSE {NOISE_RMSE:.3f} m/s"
    )
    print("\n" + header + "\n" + text)
    out.mkdir(parents=True, exist_ok=True)
    (out / "table.md").write_text(header + "\n\n" + text + "\n")
    slim = [{k: v for k, v in r.items() if k not in ("evals",)} for r in results]
    write_json(out / "results.json", {"machine": info, "args": vars(args), "results": slim})
    return 1 if any(r.get("error") for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
