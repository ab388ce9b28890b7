"""Go1JoystickRoughTerrain with and without terrain perception, at equal env steps, same seed and
settings.

Runs (each in its own subprocess, `python bench/common.py strl-worker`, in this order):

- blind  PPO on `state` (configs/Go1JoystickRoughTerrain).
- mlp    EncoderActorCritic: the height scan (17 x 11 points) through an MLP encoder
         (configs/Go1JoystickRoughTerrain_height_mlp).
- conv   EncoderActorCritic: the height scan as a [1, 17, 11] image through a Conv2d encoder
         (configs/Go1JoystickRoughTerrain_height_conv).
- depth  EncoderActorCritic: a forward depth image (`env.forward_depth`) through a Conv2d encoder
         (configs/Go1JoystickRoughTerrain_depth), where that preset exists.

`--scale cpu` (default) scales the presets down as bench/go1_estimator.py does (256 envs x 24
steps, 4 minibatches, [128, 128] networks, initial noise std 0.2, no entropy bonus; the encoders
keep the presets' sizes); `--scale preset` keeps the presets' (GPU) settings.

    python bench/go1_perception.py --iterations 150 --out /tmp/go1_perception          # 2-core CPU
    python bench/go1_perception.py --scale preset --iterations 300 --out /tmp/go1_gpu  # a GPU

Printed per run: evaluation return and velocity-tracking RMSD at the last evaluation and the best
one, the training return over the last tenth of the iterations, env steps, setup + first iteration
(compilation) and whole run time, and training steps/s after the first iteration (the speed cost
of each encoder and of the depth rendering against the blind run). Rows go to
`<out>/results.json`, the table to `<out>/table.md`, each run's folder to `<out>/runs/`.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from common import REPO_DIR, format_table, machine_info, run_worker, write_json
from go1_estimator import fmt_number, parse_args, read_rows, scale_overrides, summarize

TASK = "Go1JoystickRoughTerrain"
RUNS = {
    "blind": ("PPO, blind (state only)", TASK),
    "mlp": ("height scan, MLP encoder", f"{TASK}_height_mlp"),
    "conv": ("height scan, Conv2d encoder", f"{TASK}_height_conv"),
    "depth": ("forward depth, Conv2d encoder", f"{TASK}_depth"),
}


def steps_per_second(result: dict) -> float | None:
    """Training throughput after the first iteration (which holds the compilation)."""
    s = result.get("summary") or {}
    total, first, iterations = result.get("total_s"), result.get("first_iteration_s"), s.get("iterations")
    if not (total and first and iterations and iterations > 1 and s.get("env_steps")):
        return None
    per_iteration = s["env_steps"] / iterations
    return per_iteration * (iterations - 1) / max(total - first, 1e-9)


def table(results: list[dict]) -> str:
    headers = [
        "run",
        "seed",
        "eval return last / best",
        "eval velrmsd last / best",
        "train return (last 10%)",
        "env steps",
        "setup+1st it s",
        "run s",
        "steps/s after 1st it",
    ]
    lines = []
    for r in results:
        s = r.get("summary") or {}
        name = f"{r['run']}: {RUNS[r['run']][0]}"
        if r.get("error"):
            name += " (failed: see " + r.get("log", "the log") + ")"
        rate = steps_per_second(r)
        lines.append(
            [
                name,
                str(r["seed"]),
                f"{fmt_number(s.get('eval_reward_last'))} / {fmt_number(s.get('eval_reward_best'))}",
                f"{fmt_number(s.get('eval_velrmsd_last'), 3)} / {fmt_number(s.get('eval_velrmsd_best'), 3)}",
                fmt_number(s.get("mean_reward_tail")),
                s.get("env_steps"),
                r.get("first_iteration_s"),
                r.get("total_s", r.get("wall_s")),
                "-" if rate is None else f"{rate:,.0f}",
            ]
        )
    return format_table(headers, lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(["--runs", "blind,mlp,conv", "--out", "/tmp/go1_perception", *(argv or sys.argv[1:])])
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
        for run in runs:
            log_dir = out / "runs" / f"{run}_s{seed}"
            overrides = [*common, f"seed={seed}"]
            spec = {"task": RUNS[run][1], "overrides": overrides, "log_dir": str(log_dir)}
            start = time.time()
            print(f"[{time.strftime('%H:%M:%S')}] {run} seed {seed}: {RUNS[run][1]}", flush=True)
            result = run_worker(worker, spec, out / "logs", f"{run}_s{seed}", args.timeout)
            rows = read_rows(log_dir)
            result.update(run=run, seed=seed, task=RUNS[run][1], overrides=overrides)
            result["summary"] = summarize(rows) if rows else None
            results.append(result)
            s = result["summary"] or {}
            status = result.get("error", "").splitlines()[0] if result.get("error") else "ok"
            print(f"    {status}: {time.time() - start:.0f} s, eval {s.get('evals')}", flush=True)
    text = table(results)
    info = machine_info()
    header = f"{TASK}, {info['cpu_model']} ({info['cpu_count']} CPUs)"
    print("\n" + header + "\n" + text)
    out.mkdir(parents=True, exist_ok=True)
    (out / "table.md").write_text(header + "\n\n" + text + "\n")
    write_json(out / "results.json", {"machine": info, "args": vars(args), "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
