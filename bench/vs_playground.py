"""strl_jax against MuJoCo Playground's own training path on Playground tasks.

For every task the script runs, alternating and each in its own subprocess:
  - playground: brax PPO 0.14.2 as Playground's `learning/train_jax_ppo.py` runs it: the settings
    Playground publishes for the task (`mujoco_playground/config/locomotion_params.py`,
    `dm_control_suite_params.py`, `manipulation_params.py`; Playground 0.2.0), MJX with
    `impl: jax`, `wrapper.wrap_for_brax_training`, the task's domain randomiser, its own eval env;
  - strl_jax `matched`: the same settings mapped onto strl_jax's config, brax's implementation
    choices included (bench/brax_mapping.py);
  - strl_jax `own`: strl_jax's preset for the task (configs/<Task>.yaml, written by
    bench/playground_settings.py), at the same size.
All runs get the same Playground env and config overrides, the same env-step budget, evaluations
after the same env-step counts on the same number of envs (the mean action; `--brax-stochastic-eval`
evaluates brax with sampled actions as Playground does) and the same seed.

Sizes: by default CPU sizes (`--num-envs 256`, `--steps`): brax's batch_size shrinks with num_envs
so that a training step keeps Playground's unrolls per env, minibatch count and update count
(an iteration of `num_envs x num_steps_per_env` steps, like the preset with `--num_envs N`).
`--full`: Playground's published sizes, budget and evaluation count (a GPU job).

Printed per run: compile time, time to the first iteration, training steps/s after the first
iteration and over the second half of the run (evaluations excluded), the one-time costs that
the steady rate leaves (compilations), eval return at every evaluation against env steps and
seconds since the train call, peak RSS; then the ratios strl_jax / playground. `--json` keeps
everything; a PNG of the eval curves per task goes to `--png-dir`.

    python bench/vs_playground.py --tasks Go1JoystickFlatTerrain --json /tmp/vs_playground.json
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

from brax_mapping import (
    dotted_overrides,
    mapping_lines,
    matched,
    override,
    protocol_overrides,
    steps_per_training_step,
)
from common import (
    BENCH_DIR,
    child_environment,
    device_info,
    fmt,
    format_table,
    machine_info,
    median_or_none,
    ratio,
    run_worker,
    write_json,
    xla_cpu_defaults,
)
from playground_settings import (
    NUM_EVAL_ENVS,
    bench_settings,
    brax_schedule,
    has_randomizer,
    obs_groups,
    published_settings,
)
from vs_brax import aggregate, parse_sets, run_brax_ppo

CPU_NUM_ENVS = 256
CPU_STEPS = 1_310_720  # 256 iterations of 256 envs x 20 steps (Go1)
CPU_NUM_EVAL_ENVS = 16


# ---- workers -------------------------------------------------------------------------------
def playground_worker(spec: dict, train_kwargs: dict | None = None) -> dict:
    """brax PPO on the Playground task as train_jax_ppo.py sets it up (this interpreter's jax,
    with brax's one removed jax call substituted by vs_brax.install_jax_compat). `train_kwargs`
    go to ppo.train besides the env's (e.g. a `policy_params_fn` that saves the policy)."""
    task = spec["task"]

    def make_env() -> tuple[Any, dict]:
        from mujoco_playground import registry, wrapper

        from strl_jax.envs.menagerie import use_offline_menagerie

        use_offline_menagerie(task)
        env = registry.load(task, config_overrides=spec["playground"])
        eval_env = registry.load(task, config_overrides=spec["playground"])
        extra = {"wrap_env_fn": wrapper.wrap_for_brax_training, "eval_env": eval_env}
        if spec["domain_randomization"]:
            with contextlib.redirect_stdout(io.StringIO()):
                randomizer = registry.get_domain_randomizer(task)
            if randomizer is not None:
                extra["randomization_fn"] = randomizer
        return env, {**extra, **(train_kwargs or {})}

    summary = run_brax_ppo(spec, make_env)
    summary["library"] = "playground"
    return summary


# ---- the comparison ------------------------------------------------------------------------
RESULT_HEADERS = [
    "task",
    "run",
    "num_envs",
    "steps/iter",
    "compile s",
    "first iter s",
    "train steps/s",
    "steady steps/s",
    "one-time s",
    "env steps",
    "run s",
    "final eval",
    "best eval",
    "peak RSS MiB",
    "device peak MiB",
]
RATIO_HEADERS = [
    "task",
    "strl_jax settings",
    "steps/s ratio",
    "steady steps/s ratio",
    "compile ratio",
    "one-time ratio",
    "first iter ratio",
    "RSS ratio",
]
EVAL_HEADERS = ["task", "run", "env steps", "s since start", "eval return"]


def result_row(task: str, name: str, r: dict) -> list:
    if "error" in r:
        return [task, name, "failed", *[None] * (len(RESULT_HEADERS) - 3)]
    num_envs = r.get("kwargs", {}).get("num_envs") or r.get("config", {}).get("env", {}).get("num_envs")
    rewards = [e["reward"] for e in r.get("evals", []) if e["env_steps"] > 0]
    return [
        task,
        name,
        num_envs,
        r.get("steps_per_iteration"),
        r.get("compile_s"),
        r.get("first_iteration_s"),
        r.get("sps"),
        r.get("steady_sps"),
        r.get("one_time_s"),
        r.get("env_steps"),
        r.get("total_s"),
        r.get("final_eval"),
        max(rewards) if rewards else None,
        r.get("peak_rss_mib"),
        r.get("device", {}).get("device_peak_mib"),
    ]


def training_clock(r: dict) -> list[tuple[int, float]]:
    """(env steps, seconds of training) after each brax epoch group / strl_jax iteration;
    evaluations excluded on both sides."""
    if r.get("library") == "strl_jax" and r.get("log_dir"):
        from strl_jax.plot import read_metrics

        points, clock = [], 0.0
        for row in read_metrics(r["log_dir"]):
            clock += row["iteration_time"]
            points.append((row["env_steps"], clock))
        return points
    return [(e["env_steps"], e["walltime"]) for e in r.get("events", []) if e.get("walltime") is not None]


def steady_state(points: list[tuple[int, float]]) -> dict[str, float | None]:
    """Training steps/s over the second half of the run, and the one-time cost that the rest of
    the training time holds at that rate (compilation, recompilation, warm-up).

    The libraries' own first-iteration estimate (`compile s`) misses a second compilation; brax
    on Playground recompiles its training epoch once after the first forced reset.
    """
    if len(points) < 3:
        return {"steady_sps": None, "one_time_s": None}
    (s_mid, t_mid), (s_end, t_end) = points[len(points) // 2], points[-1]
    if t_end <= t_mid:
        return {"steady_sps": None, "one_time_s": None}
    rate = (s_end - s_mid) / (t_end - t_mid)
    return {"steady_sps": rate, "one_time_s": t_end - s_end / rate}


def eval_rows(task: str, name: str, r: dict) -> list[list]:
    return [[task, name, e["env_steps"], e["time_s"], e["reward"]] for e in r.get("evals", [])]


def plot_task(task: str, runs: dict[str, dict], folder: Path) -> Path | None:
    """Eval return against env steps and against seconds since the train call, one line per run
    (None without matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for name, r in runs.items():
        evals = [] if "error" in r else r.get("evals", [])
        for ax, key in zip(axes, ("env_steps", "time_s"), strict=True):
            ax.plot([e[key] for e in evals], [e["reward"] for e in evals], marker=".", label=name)
    for ax, label in zip(axes, ("environment steps", "seconds since the train call"), strict=True):
        ax.set_xlabel(label)
        ax.set_ylabel("eval episode return")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize="small")
    fig.suptitle(task)
    fig.tight_layout()
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / f"{task}.png"
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", default="Go1JoystickFlatTerrain", help="comma-separated Playground tasks")
    p.add_argument("--modes", default="matched,own", help="strl_jax settings to run: matched, own or both")
    p.add_argument(
        "--full",
        action="store_true",
        help="Playground's published num_envs, budget and evaluation count (a GPU job); "
        "--steps/--evals/--num-envs still override",
    )
    p.add_argument(
        "--num-envs", type=int, default=None, help=f"envs per run (default {CPU_NUM_ENVS}; --full: published)"
    )
    p.add_argument(
        "--steps",
        type=int,
        default=None,
        help=f"env-step budget per run, rounded up to whole eval periods (default {CPU_STEPS:,}; "
        "--full: published)",
    )
    p.add_argument(
        "--evals",
        type=int,
        default=None,
        help="brax num_evals, the one before training included (default: published)",
    )
    p.add_argument(
        "--num-eval-envs",
        type=int,
        default=None,
        help=f"eval envs (default {CPU_NUM_EVAL_ENVS}; --full: {NUM_EVAL_ENVS})",
    )
    p.add_argument(
        "--no-domain-randomization", action="store_true", help="train without the task's randomiser"
    )
    p.add_argument("--target", type=float, default=None, help="eval return that counts as reached")
    p.add_argument("--stop-at-target", action="store_true", help="end each run at its first eval >= target")
    p.add_argument(
        "--time-limit", type=float, default=None, help="seconds per run; stops at the first eval after it"
    )
    p.add_argument("--repeats", type=int, default=1, help="runs of each (order alternates)")
    p.add_argument("--seed", type=int, default=1, help="seed of every run (train_jax_ppo.py's default 1)")
    p.add_argument(
        "--brax-stochastic-eval",
        action="store_true",
        help="evaluate brax with sampled actions (Playground's default)",
    )
    p.add_argument(
        "--brax-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="change a brax ppo.train setting (matched strl_jax follows), e.g. batch_size=256",
    )
    p.add_argument(
        "--playground-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override of the task's Playground config for every run, e.g. impl=warp",
    )
    p.add_argument(
        "--strl-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra strl_jax override for both strl_jax runs",
    )
    p.add_argument("--brax-python", default=sys.executable, help="interpreter for brax (default: this one)")
    p.add_argument("--work-dir", default=None, help="logs and run folders (default: a new /tmp folder)")
    p.add_argument("--json", default=None, help="also write all results to this JSON file")
    p.add_argument("--png-dir", default=None, help="learning-curve PNGs per task (default: the work dir)")
    p.add_argument("--setup-only", action="store_true", help="print the plan, stop")
    p.add_argument("--worker", choices=["playground"], help=argparse.SUPPRESS)
    p.add_argument("worker_args", nargs="*", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def plan_task(task: str, args: argparse.Namespace) -> dict:
    """Settings of every run of `task`, and the lines that describe them."""
    pub = published_settings(task)
    num_envs = args.num_envs or (None if args.full else CPU_NUM_ENVS)
    budget = args.steps or (None if args.full else CPU_STEPS)
    num_eval_envs = args.num_eval_envs or (NUM_EVAL_ENVS if args.full else CPU_NUM_EVAL_ENVS)
    extra = parse_sets(args.brax_set)
    kw, schedule = bench_settings(
        pub, num_envs, budget, args.evals, num_eval_envs, not args.brax_stochastic_eval, extra
    )
    kw["seed"] = args.seed
    overrides = {"impl": "jax", **parse_sets(args.playground_set)}
    randomized = not args.no_domain_randomization and has_randomizer(task)
    steps = steps_per_training_step(kw)
    eval_every = schedule["eval_every"]
    env_tree = {
        "env": {
            "task": task,
            "playground": overrides,
            "domain_randomization": randomized,
            "obs_groups": obs_groups(task, kw, overrides) or None,
        }
    }
    env_overrides = [o for o in dotted_overrides(env_tree) if o != "env.obs_groups=null"]
    strl_extra = [override(k, v) for k, v in parse_sets(args.strl_set).items()]
    protocol = protocol_overrides(args.seed, schedule["training_steps"], eval_every, num_eval_envs)
    runs: dict[str, dict] = {"playground": {"kwargs": kw}}
    if "matched" in args.modes:
        runs["matched"] = {"overrides": env_overrides + dotted_overrides(matched(kw)) + protocol + strl_extra}
    if "own" in args.modes:
        from strl_jax.configs.loader import available_presets, load_preset

        preset = load_preset(task) if task in available_presets() else {}
        own_envs = num_envs or preset.get("env", {}).get("num_envs", kw["num_envs"])
        per_env = preset.get("runner", {}).get("num_steps_per_env", 24)
        ar = preset.get("env", {}).get("action_repeat", 1)
        own_steps = own_envs * per_env * ar
        own_protocol = protocol_overrides(
            args.seed,
            max(1, math.ceil(kw["num_timesteps"] / own_steps)),
            max(1, round(eval_every * steps / own_steps)),
            num_eval_envs,
        )
        runs["own"] = {
            "overrides": env_overrides + [override("env.num_envs", own_envs)] + own_protocol + strl_extra
        }
    lines = [
        f"== {task}: budget {kw['num_timesteps']:,} env steps ({schedule['training_steps']} iterations of "
        f"{steps:,}), evaluation every {eval_every} iterations ({eval_every * steps:,} steps) on "
        f"{num_eval_envs} envs ({'sampled' if args.brax_stochastic_eval else 'mean'} actions for brax, "
        "mean for strl_jax); "
        f"Playground config overrides {overrides}; domain randomisation {'on' if randomized else 'off'}",
        f"brax resets every env every {schedule['reset_every_env_steps']} steps per env "
        f"(num_resets_per_eval={kw['num_resets_per_eval']}; at Playground's sizes: "
        f"{brax_schedule(pub)['reset_every_env_steps']}; 0 = never); strl_jax at episode ends only",
        "playground ppo.train: " + ", ".join(f"{k}={v}" for k, v in kw.items()),
        *mapping_lines(kw, eval_every),
    ]
    for mode in ("matched", "own"):
        if mode in runs:
            lines.append(f"strl_jax {mode}: preset {task} + " + " ".join(runs[mode]["overrides"]))
    return {
        "task": task,
        "budget": kw["num_timesteps"],
        "schedule": schedule,
        "playground": overrides,
        "domain_randomization": randomized,
        "runs": runs,
        "lines": lines,
    }


def run_plan(plan: dict, args: argparse.Namespace, work_dir: Path, timeout: float | None) -> list[dict]:
    """Every run of one task, alternating the order over repeats."""
    task = plan["task"]
    order = list(plan["runs"])
    results = []
    common_spec = {
        "task": task,
        "target": args.target,
        "time_limit_s": args.time_limit,
        "stop_at_target": args.stop_at_target,
    }
    for rep in range(args.repeats):
        for name in order if rep % 2 == 0 else list(reversed(order)):
            label = f"{task}-{rep}-{name}"
            print(f"\n[{time.strftime('%H:%M:%S')}] {label} ...", flush=True)
            if name == "playground":
                spec = {
                    **common_spec,
                    "kwargs": plan["runs"]["playground"]["kwargs"],
                    "playground": plan["playground"],
                    "domain_randomization": plan["domain_randomization"],
                }
                argv = [args.brax_python, str(Path(__file__).resolve()), "--worker", "playground"]
            else:
                spec = {
                    **common_spec,
                    "overrides": plan["runs"][name]["overrides"],
                    "log_dir": str(work_dir / label),
                }
                argv = [sys.executable, str(BENCH_DIR / "common.py"), "strl-worker"]
            r = run_worker(argv, spec, work_dir, label, timeout, env=child_environment())
            r.update(task=task, name=name, repeat=rep)
            if name != "playground":
                r["log_dir"] = spec["log_dir"]
            if "error" not in r:
                r.update(steady_state(training_clock(r)))
            results.append(r)
            if "error" in r:
                print(r["error"], flush=True)
            else:
                print(
                    f"  steps/s {fmt(r.get('sps'))} (steady {fmt(r.get('steady_sps'))}), compile "
                    f"{fmt(r.get('compile_s'))} s (one-time costs {fmt(r.get('one_time_s'))} s), "
                    f"final eval {fmt(r.get('final_eval'))} at {fmt(r.get('env_steps'))} steps, "
                    f"peak RSS {fmt(r['peak_rss_mib'])} MiB, stopped by {r.get('stop_reason')}, "
                    f"{r['wall_s']:.0f} s",
                    flush=True,
                )
    return results


def merge_repeats(runs: list[dict]) -> dict:
    """vs_brax's medians over repeats, the steady-state numbers included."""
    merged = aggregate(runs)
    ok = [r for r in runs if "error" not in r]
    if len(ok) > 1:
        for key in ("steady_sps", "one_time_s"):
            merged[key] = median_or_none([r.get(key) for r in ok])
    return merged


def summarize(plans: list[dict], results: list[dict], png_dir: Path) -> tuple[list, list, list]:
    """The results table, the ratio table and every evaluation; one PNG per task."""
    table, ratios, evals = [], [], []
    for plan in plans:
        task = plan["task"]
        by_name = {
            n: merge_repeats([r for r in results if r["task"] == task and r["name"] == n])
            for n in plan["runs"]
        }
        base = by_name["playground"]
        for name, r in by_name.items():
            table.append(result_row(task, name, r))
            evals += eval_rows(task, name, r)
            if name == "playground" or "error" in r or "error" in base:
                continue
            ratios.append(
                [
                    task,
                    name,
                    ratio(r.get("sps"), base.get("sps")),
                    ratio(r.get("steady_sps"), base.get("steady_sps")),
                    ratio(r.get("compile_s"), base.get("compile_s")),
                    ratio(r.get("one_time_s"), base.get("one_time_s")),
                    ratio(r.get("first_iteration_s"), base.get("first_iteration_s")),
                    ratio(r.get("peak_rss_mib"), base.get("peak_rss_mib")),
                ]
            )
        png = plot_task(task, {n: r for n, r in by_name.items()}, png_dir)
        if png:
            print(f"curves of {task}: {png}")
    return table, ratios, evals


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker == "playground":
        xla_cpu_defaults().apply_cpu_defaults()  # as importing strl_jax does, before jax is imported
        spec = json.loads(Path(args.worker_args[0]).read_text())
        write_json(args.worker_args[1], playground_worker(spec))
        return 0
    tasks = [t for t in args.tasks.split(",") if t]
    args.modes = [m for m in args.modes.split(",") if m]
    if not set(args.modes) <= {"matched", "own"}:
        raise SystemExit("error: --modes takes matched, own or both")

    work_dir = Path(args.work_dir or f"/tmp/strl_bench_runs/vs_playground-{time.strftime('%Y%m%d-%H%M%S')}")
    info = {"machine": machine_info(), "device": device_info(), "work_dir": str(work_dir)}
    print(
        f"machine: {info['machine']['cpu_model']}, {info['machine']['cpu_count']} CPUs, "
        f"{info['machine']['memory_gib']} GiB; jax {info['device']['jax']} ({info['device']['backend']}); "
        f"brax with {args.brax_python}; logs in {work_dir}"
    )
    plans = [plan_task(task, args) for task in tasks]
    for plan in plans:
        print("\n" + "\n".join(plan["lines"]))
    if args.setup_only:
        return 0

    timeout = None if args.time_limit is None else args.time_limit + 1800
    results = [r for plan in plans for r in run_plan(plan, args, work_dir, timeout)]
    table, ratios, evals = summarize(plans, results, Path(args.png_dir or work_dir))
    medians = ", medians" if args.repeats > 1 else ""
    print(
        f"\nResults ({args.repeats} repeat(s){medians}; seconds from the library's train call, env "
        "construction included; train steps/s after the first iteration, steady steps/s over the "
        "second half, both without evaluations; one-time s = training time beyond env steps / "
        "steady rate; '-' = not measured)"
    )
    print(format_table(RESULT_HEADERS, table))
    print("\nRatios strl_jax / playground (steps/s: higher is better; the others: lower is better)")
    print(format_table(RATIO_HEADERS, ratios))
    print("\nEvaluations (mean return over the eval envs; time in seconds since the train call)")
    print(format_table(EVAL_HEADERS, evals))
    if args.json:
        plans_out = [{k: v for k, v in p.items() if k != "lines"} for p in plans]
        write_json(args.json, {**info, "args": vars(args), "plans": plans_out, "results": results})
        print(f"\nwritten to {args.json}")
    return 0 if all("error" not in r for r in results) else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
