"""Learning curves: evaluation return against env steps and wall time, strl_jax against its peer.

For every task and seed, in one invocation and each in its own subprocess:
  - the peer: brax PPO 0.14.2 with brax's published settings for a Brax task (bench/vs_brax.py's
    worker; brax's venv, or `--brax-python`), or brax PPO as MuJoCo Playground trains a Playground
    task (bench/vs_playground.py's worker);
  - strl_jax: its preset for the task (default `<task>_gpu` for Brax tasks, configs/<Task>.yaml
    for Playground tasks; `--strl-config`, `--set`).
Both get the same env (task, physics backend, Playground config), env-step budget (default: the
peer's published one), evaluation after the same env-step counts on the same envs (the mean
action) and the same seed. Times are seconds since the worker process started (imports,
env construction and compilation included).

Written to `--out`: runs.json (rewritten after every run, so a killed invocation keeps every
finished run; a run killed at its hard time limit keeps the evaluations its log holds), summary.md
(the table) and <task>.png (return against env steps and against wall time, strl_jax.plot).

    # a GPU (brax with a CUDA interpreter that has brax 0.14.2):
    python bench/learning_curves.py --tasks ant,halfcheetah,humanoid --seeds 1 --time-limit 60 --evals 20 \\
        --brax-python python --out /tmp/learning_curves
    # this CPU, a smoke run (brax at 128 envs too: its batch_size shrinks with num_envs):
    python bench/learning_curves.py --tasks hopper --seeds 1 --num-timesteps 400000 --evals 4 \\
        --set env.num_envs=128 --brax-set num_envs=128 --brax-set batch_size=64 \\
        --num-eval-envs 16 --time-limit 600 --out /tmp/learning_curves_cpu
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

from brax_mapping import override, protocol_overrides, steps_per_training_step
from brax_presets import TASKS as BRAX_TASKS
from brax_presets import peer_settings, preset_name
from common import (
    child_environment,
    fmt,
    format_table,
    machine_info,
    run_worker,
    strl_worker,
    write_json,
    xla_cpu_defaults,
)
from playground_settings import bench_settings, published_settings
from vs_brax import DEFAULT_BRAX_VENV, brax_settings, brax_worker, ensure_brax_venv, parse_sets
from vs_playground import playground_worker

IMPORTED = time.time()

NUM_EVAL_ENVS = 128  # brax's and Playground's default
WORKERS = {"brax": brax_worker, "playground": playground_worker, "strl_jax": strl_worker}


# ---- workers -------------------------------------------------------------------------------
def process_start() -> float:
    """When this process started (Linux's /proc; elsewhere when this module was imported)."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])  # since boot
        return time.time() - time.clock_gettime(time.CLOCK_BOOTTIME) + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return IMPORTED


def worker_main(kind: str, spec_path: str, out_path: str) -> int:
    """Run one library's worker and record when its train call started after process start."""
    if kind != "strl_jax":
        xla_cpu_defaults().apply_cpu_defaults()  # as importing strl_jax does, before jax is imported
    result = WORKERS[kind](json.loads(Path(spec_path).read_text()))
    result["start_offset_s"] = time.time() - process_start() - result["total_s"]
    write_json(out_path, result)
    return 0


def recovered_evals(kind: str, result: dict, log_dir: str | None) -> list[dict]:
    """The evaluations of a run killed before it wrote its result: brax's progress lines in its
    log, strl_jax's metrics.jsonl (times: the runner's clock, which starts after env creation)."""
    if kind == "strl_jax":
        from strl_jax.plot import read_metrics  # the brax venv has no strl_jax

        rows = read_metrics(log_dir) if (Path(log_dir or "") / "metrics.jsonl").is_file() else []
        return [
            {"env_steps": r["env_steps"], "time_s": r["wall_time"], "reward": r["eval_reward"]}
            for r in rows
            if r.get("eval_reward") is not None
        ]
    evals = []
    for line in Path(result["log"]).read_text(errors="replace").splitlines():
        if line.startswith("{"):
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            if event.get("reward") is not None and event.get("env_steps", 0) > 0:
                evals.append({k: event[k] for k in ("env_steps", "time_s", "reward")})
    return evals


def curve(result: dict) -> list[dict]:
    """Evaluations after training started: env steps, seconds since process start, return."""
    offset = result.get("start_offset_s") or 0.0
    return [
        {"env_steps": e["env_steps"], "wall_s": e["time_s"] + offset, "reward": e["reward"]}
        for e in result.get("evals", [])
        if e["env_steps"] > 0 and e["reward"] is not None
    ]


# ---- plans ---------------------------------------------------------------------------------
def strl_source(task: str, config: str | None) -> dict:
    """The strl_jax worker's `task` (a preset name) and config files for `--strl-config`."""
    from strl_jax.configs.loader import available_presets

    if config is None:
        config = preset_name(task) if task in BRAX_TASKS else task
    if config in available_presets():
        return {"task": config}
    if Path(config).is_file():
        return {"task": task, "config_files": [str(Path(config).resolve())]}
    raise SystemExit(
        f"error: --strl-config {config!r} is neither a preset nor a file; presets: {available_presets()}"
    )


def plan_task(task: str, seed: int, args: argparse.Namespace) -> dict:
    """The peer's and strl_jax's specs for one task and seed: same env, budget, eval steps, seed."""
    from strl_jax.configs.loader import resolve_config

    source = strl_source(task, args.strl_config)
    sets = [override(k, v) for k, v in parse_sets(args.set).items()]
    cfg = resolve_config(source["task"], config_files=source.get("config_files"), overrides=sets)
    if cfg.env.task != task:
        raise SystemExit(f"error: --strl-config trains {cfg.env.task!r}, not {task!r}")
    extra = parse_sets(args.brax_set)
    peer_common = {"task": task, "target": None, "time_limit_s": args.time_limit, "stop_at_target": False}
    if task in BRAX_TASKS:
        pub = peer_settings(task)
        budget = args.num_timesteps or pub["num_timesteps"]
        evals = args.evals or pub["num_evals"] - 1
        kw = {**pub, **extra}
        eval_every = max(1, math.ceil(budget / (evals * steps_per_training_step(kw))))
        kw = brax_settings(task, budget, eval_every, True, args.num_eval_envs, {**extra, "seed": seed})
        peer = {"kind": "brax", "spec": {**peer_common, "backend": cfg.env.backend, "kwargs": kw}}
        env = [override("env.backend", cfg.env.backend)]
    else:
        pub = published_settings(task)
        evals = args.evals + 1 if args.evals else None
        kw, schedule = bench_settings(pub, None, args.num_timesteps, evals, args.num_eval_envs, True, extra)
        kw["seed"] = seed
        eval_every = schedule["eval_every"]
        spec = {
            **peer_common,
            "kwargs": kw,
            "playground": cfg.env.playground,
            "domain_randomization": cfg.env.domain_randomization,
        }
        peer = {"kind": "playground", "spec": spec}
        env = []
    eval_steps = eval_every * steps_per_training_step(kw)
    per_iteration = cfg.env.num_envs * cfg.runner.num_steps_per_env * cfg.env.action_repeat
    iterations = max(1, math.ceil(kw["num_timesteps"] / per_iteration))
    interval = max(1, round(eval_steps / per_iteration))
    protocol = protocol_overrides(seed, iterations, interval, args.num_eval_envs)
    strl = {"kind": "strl_jax", "spec": {**peer_common, **source, "overrides": env + protocol + sets}}
    return {
        "task": task,
        "seed": seed,
        "budget": kw["num_timesteps"],
        "eval_steps": eval_steps,
        "runs": [peer, strl],
    }


# ---- the table -----------------------------------------------------------------------------
TABLE_HEADERS = [
    "task",
    "library",
    "runs",
    "return at peer budget",
    "steps to peer final",
    "wall s to peer final",
    "train steps/s",
    "compile s",
    "env steps",
    "run s",
]


def mean_std(values: list[float]) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return fmt(values[0])
    return f"{fmt(statistics.mean(values))} +- {fmt(statistics.stdev(values))}"


def mean_or_none(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.mean(present) if present else None


def first_reaching(points: list[dict], target: float | None) -> dict | None:
    if target is None:
        return None
    return next((p for p in points if p["reward"] >= target), None)


def task_rows(task: str, records: list[dict]) -> list[list]:
    """Per library: return at the peer's budget (mean +- std over seeds that reached it), env steps
    and wall time to the peer's final mean return (mean over seeds that reached it, n/N), speed."""
    peer_kind = next((r["kind"] for r in records if r["kind"] != "strl_jax"), None)
    budget = max((r["budget"] for r in records), default=0)
    peer_finals = [r["curve"][-1]["reward"] for r in records if r["kind"] == peer_kind and r["curve"]]
    target = statistics.mean(peer_finals) if peer_finals else None
    rows = []
    for kind in (peer_kind, "strl_jax"):
        runs = [r for r in records if r["kind"] == kind]
        if not runs:
            continue
        at_budget = [
            r["curve"][-1]["reward"] for r in runs if r["curve"] and r["curve"][-1]["env_steps"] >= budget
        ]
        reached = [p for p in (first_reaching(r["curve"], target) for r in runs) if p is not None]
        n = f"{len(reached)}/{len(runs)}"
        rows.append(
            [
                task,
                kind,
                len(runs),
                mean_std(at_budget)
                + (f" ({len(at_budget)}/{len(runs)})" if len(at_budget) < len(runs) else ""),
                f"{fmt(mean_or_none([p['env_steps'] for p in reached]))} ({n})",
                f"{fmt(mean_or_none([p['wall_s'] for p in reached]))} ({n})",
                mean_or_none([r["result"].get("sps") for r in runs]),
                mean_or_none([r["result"].get("compile_s") for r in runs]),
                mean_or_none([r["curve"][-1]["env_steps"] if r["curve"] else None for r in runs]),
                mean_or_none([r["result"].get("wall_s") for r in runs]),
            ]
        )
    return rows


def write_outputs(out: Path, info: dict, records: list[dict], tasks: list[str]) -> str:
    """runs.json, summary.md and the PNGs from every finished run; returns the table."""
    write_json(out / "runs.json.tmp", {**info, "runs": records})
    (out / "runs.json.tmp").replace(out / "runs.json")
    rows = [row for task in tasks for row in task_rows(task, [r for r in records if r["task"] == task])]
    table = format_table(TABLE_HEADERS, rows)
    (out / "summary.md").write_text(
        "Evaluation return (mean over the eval envs) of each run; mean +- std over seeds; 'to peer "
        "final': the first evaluation at or above the peer's final return (mean over its seeds), "
        "wall time since process start; (n/N): runs that got there.\n\n" + table + "\n"
    )
    try:
        from strl_jax.plot import plot_eval_curves

        for task in tasks:
            done = [r for r in records if r["task"] == task]
            curves: dict[str, list] = {}
            for r in done:
                curves.setdefault(r["kind"], []).append(r["curve"])
            if curves:
                plot_eval_curves(curves, out / f"{task}.png", title=task)
    except ImportError:
        print("no PNGs: matplotlib is missing", flush=True)
    return table


# ---- the command ---------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--tasks", default="ant,halfcheetah,humanoid", help="comma-separated Brax / Playground tasks"
    )
    p.add_argument("--seeds", default="1", help="comma-separated seeds, one run of each library per seed")
    p.add_argument("--num-timesteps", type=int, default=None, help="env-step budget (default: the peer's)")
    p.add_argument(
        "--evals", type=int, default=None, help="evaluations after training starts (default: the peer's)"
    )
    p.add_argument("--num-eval-envs", type=int, default=NUM_EVAL_ENVS, help="eval envs of both libraries")
    p.add_argument(
        "--strl-config", default=None, help="strl_jax preset or YAML (default: <task>_gpu / <Task>)"
    )
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="strl_jax override")
    p.add_argument(
        "--brax-set", action="append", default=[], metavar="KEY=VALUE", help="peer ppo.train setting"
    )
    p.add_argument(
        "--time-limit",
        type=float,
        default=None,
        help="seconds per run: it stops at its first evaluation after this (curve kept); killed at "
        "1.5x + 60 s, keeping the evaluations its log holds",
    )
    p.add_argument("--out", default=None, help="output folder (default: a new /tmp folder)")
    p.add_argument("--brax-venv", default=DEFAULT_BRAX_VENV, help="venv for brax (created if missing)")
    p.add_argument("--brax-cuda", action="store_true", help="install jax[cuda12]==0.7.2 in the brax venv")
    p.add_argument("--brax-python", default=None, help="interpreter with brax 0.14.2 instead of the venv")
    p.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    p.add_argument("worker_args", nargs="*", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def run_one(run: dict, plan: dict, brax_python: str, out: Path, hard_limit: float | None) -> dict:
    """One library's run of one plan, as a record with its curve."""
    kind, spec = run["kind"], dict(run["spec"])
    label = f"{plan['task']}-{kind}-seed{plan['seed']}"
    if kind == "strl_jax":
        spec["log_dir"] = str(out / "runs" / label)
    python = brax_python if kind == "brax" else sys.executable
    argv = [python, str(Path(__file__).resolve()), "--worker", kind]
    print(f"[{time.strftime('%H:%M:%S')}] {label} ...", flush=True)
    result = run_worker(argv, spec, out / "logs", label, hard_limit, env=child_environment())
    if "error" in result:
        print(result["error"], flush=True)
        result["evals"] = recovered_evals(kind, result, spec.get("log_dir"))
    result.pop("events", None)
    record = {"task": plan["task"], "seed": plan["seed"], "kind": kind, "budget": plan["budget"]}
    record.update(curve=curve(result), result=result)
    last = record["curve"][-1] if record["curve"] else {}
    print(
        f"  {len(record['curve'])} evaluations, last {fmt(last.get('reward'))} at "
        f"{fmt(last.get('env_steps'))} steps, {fmt(last.get('wall_s'))} s; steps/s "
        f"{fmt(result.get('sps'))}, compile {fmt(result.get('compile_s'))} s, "
        f"stopped by {result.get('stop_reason', 'error')}",
        flush=True,
    )
    return record


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        return worker_main(args.worker, *args.worker_args)
    tasks = [t for t in args.tasks.split(",") if t]
    seeds = [int(s) for s in args.seeds.split(",") if s]
    plans = [plan_task(task, seed, args) for task in tasks for seed in seeds]
    needs_brax = any(run["kind"] == "brax" for plan in plans for run in plan["runs"])
    brax_python = args.brax_python or (
        str(ensure_brax_venv(Path(args.brax_venv), args.brax_cuda)) if needs_brax else sys.executable
    )
    out = Path(args.out or f"/tmp/strl_bench_runs/learning_curves-{time.strftime('%Y%m%d-%H%M%S')}")
    out.mkdir(parents=True, exist_ok=True)
    info = {"machine": machine_info(), "args": vars(args), "plans": plans}
    print(f"brax with {brax_python}; output in {out}")
    for plan in plans:
        print(
            f"{plan['task']} seed {plan['seed']}: budget {plan['budget']:,} env steps, evaluation every "
            f"{plan['eval_steps']:,}; strl_jax " + " ".join(plan["runs"][1]["spec"]["overrides"]),
            flush=True,
        )
    hard_limit = None if args.time_limit is None else 1.5 * args.time_limit + 60
    records: list[dict] = []
    for plan in plans:
        for run in plan["runs"]:
            records.append(run_one(run, plan, brax_python, out, hard_limit))
            write_outputs(out, info, records, tasks)
    table = write_outputs(out, info, records, tasks)
    print("\n" + table + f"\n\nwritten to {out} (runs.json, summary.md, <task>.png)")
    return 0 if all("error" not in r["result"] for r in records) else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
