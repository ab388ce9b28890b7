"""Every legged robot walks: Playground's locomotion joystick tasks, each trained by the legged
recipe on this machine, in one table.

Three commands, each writing into the same `--out` folder:

  throughput   per robot, a short training of the recipe in its own process (a few iterations,
               after the first, which compiles): env steps/s and compile seconds; with the
               quadrupeds' measured env steps to the target, the projected time to it.
  train        per robot with a CPU preset (`ROBOTS`' preset), bench/go1_walk.py's protocol in
               `<out>/<robot>/`: the standing robot's velrmsd on the task's commands (zero action
               about the default pose; the target is a third of it), the preset's seeds trained for
               `--minutes` with checkpoints by wall time, every checkpoint evaluated afterwards on
               the unmodified task (32 envs, deterministic, one 1000-step episode each), and, with
               `--peer`, Playground's own path at equal wall time. One PNG per robot.
  summary      the table across robots (summary.md): standing velrmsd, target, seeds at the target,
               time and env steps to it, final velrmsd and falls, env steps/s; robots not trained
               get their throughput and projected time. A folder `<out>/<robot>_<variant>/` (a
               go1_walk invocation with other settings) gets a row of its own under its robot,
               trained as its runs.json records.

    python bench/legged_zoo.py throughput --out /tmp/legged_zoo
    python bench/legged_zoo.py train --robots Spot Barkour --seeds 1 2 3 --minutes 45 --out /tmp/legged_zoo
    python bench/legged_zoo.py train --robots Go1 --seeds 1 --peer --out /tmp/legged_zoo
    python bench/legged_zoo.py summary --out /tmp/legged_zoo

`train` forwards `--resume` and `--only` to bench/go1_walk.py (a stopped invocation keeps its
finished runs). The GPU counterpart is bench/gpu_legged_zoo.sh.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
import time
from pathlib import Path

from common import REPO_DIR, child_environment, fmt, format_table, machine_info, run_worker, write_json


@dataclasses.dataclass(frozen=True)
class Robot:
    task: str  # Playground's joystick task
    body: str  # quadruped | humanoid: which recipe it takes
    preset: str | None = None  # its CPU preset, where one has been trained


ROBOTS = {
    "Go1": Robot("Go1JoystickFlatTerrain", "quadruped", "Go1JoystickFlatTerrain_cpu"),
    "Spot": Robot("SpotFlatTerrainJoystick", "quadruped", "SpotFlatTerrainJoystick_cpu"),
    "Barkour": Robot("BarkourJoystick", "quadruped", "BarkourJoystick_cpu"),
    "Op3": Robot("Op3Joystick", "humanoid"),
    "BerkeleyHumanoid": Robot("BerkeleyHumanoidJoystickFlatTerrain", "humanoid"),
    "T1": Robot("T1JoystickFlatTerrain", "humanoid"),
    "G1": Robot("G1JoystickFlatTerrain", "humanoid"),
    "Apollo": Robot("ApolloJoystickFlatTerrain", "humanoid"),
    "H1": Robot("H1JoystickGaitTracking", "humanoid"),
}
# The recipe of each body plan (configs/recipes/): the learner, and for quadrupeds the tracking
# weights that make them walk.
RECIPES = {"quadruped": "recipes/quadruped_cpu", "humanoid": "recipes/legged_cpu"}
THROUGHPUT_ITERATIONS = 6  # the first compiles; the other five give the steady env steps/s


def robot_config(name: str) -> tuple[str, list[str]]:
    """(preset, config files) of a robot: its CPU preset, else its task's preset under the recipe."""
    robot = ROBOTS[name]
    if robot.preset:
        return robot.preset, []
    return robot.task, [str(REPO_DIR / "configs" / f"{RECIPES[robot.body]}.yaml")]


# ---- throughput ----------------------------------------------------------------------------
def throughput_worker(spec: dict) -> dict:
    """A few iterations of the robot's recipe through `common.strl_worker` (runner.train)."""
    from common import strl_worker

    result = strl_worker(spec)
    return {k: result.get(k) for k in ("sps", "compile_s", "first_iteration_s", "setup_s", "peak_rss_mib")}


def measure_throughput(names: list[str], out: Path) -> dict:
    results = read_json(out / "throughput.json").get("robots", {})
    for name in names:
        preset, files = robot_config(name)
        spec = {
            "task": preset,
            "config_files": files,
            "overrides": [f"runner.max_iterations={THROUGHPUT_ITERATIONS}", "runner.eval_interval=0"]
            + ["runner.save_interval=0", "runner.log_interval=1", "runner.compile_cache=false"],
            "log_dir": str(out / "throughput" / name),
        }
        argv = [sys.executable, str(Path(__file__).resolve()), "--worker", "throughput"]  # + SPEC OUT
        print(f"[{time.strftime('%H:%M:%S')}] {name}: {preset} {files} ...", flush=True)
        result = run_worker(
            argv, spec, out / "logs", f"throughput-{name}", 3600, child_environment(str(REPO_DIR))
        )
        results[name] = {**result, "preset": preset, "config_files": files, "machine": machine_info()}
        if "error" in result:
            print(f"  failed: {result['error']}", flush=True)
        else:
            sps, compile_s = fmt(result.get("sps")), fmt(result.get("compile_s"))
            print(f"  env steps/s {sps}, compile {compile_s} s", flush=True)
        write_json(out / "throughput.json", {"robots": results})
    return results


# ---- summary -------------------------------------------------------------------------------
def read_json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


SUMMARY_HEADERS = [
    "robot",
    "run folder",
    "task",
    "trained as",
    "standing velrmsd",
    "target",
    "seeds at target",
    "minutes to target (min / median / max)",
    "M env steps to target (min / median / max)",
    "final velrmsd (min / median / max)",
    "final falls (min / median / max)",
    "env steps/s",
    "projected minutes to target",
]


def num(value: float | None, digits: int) -> str:
    """`digits` decimals (common.fmt adds one below 10), '-' for None."""
    return "-" if value is None else f"{value:.{digits}f}"


def spread(values: list[float], scale: float = 1.0, digits: int = 2) -> str:
    """min / median / max; math.inf (a seed that never reached the target) shows as `never`."""
    if not values:
        return "-"
    picks = (min(values), statistics.median(values), max(values))
    return " / ".join("never" if math.isinf(v) else num(v / scale, digits) for v in picks)


def run_sps(run: dict) -> float:
    """A run's env steps/s: its training's own figure, or for a run cut before it reported one (a
    stopped invocation) its newest evaluated checkpoint's env steps over wall time."""
    import go1_walk

    reported = run.get("train", {}).get("sps")
    if reported:
        return reported
    newest = go1_walk.evaluated(run)[-1]
    return newest["env_steps"] / newest["wall_s"]


def settings_of(args: dict) -> str:
    """What a variant folder's runs trained: go1_walk's --preset, --config files and --set values."""
    parts = [args.get("preset") or "?"]
    parts += [
        Path(path).with_suffix("").as_posix().split("configs/")[-1] for path in args.get("config") or []
    ]
    return " + ".join(parts) + "".join(f", {value}" for value in args.get("set") or [])


def robot_row(
    name: str, runs: dict, throughput: dict, steps_to_target: float | None, folder: str | None = None
) -> list:
    """One robot's line: its trained seeds where `runs` (go1_walk's runs.json) has them, else its
    throughput and the time the quadrupeds' median env steps to target would take at it. `folder`
    names a variant's runs (`<robot>_<variant>`), trained as its runs.json records."""
    import go1_walk

    robot = ROBOTS[name]
    if folder is None:
        preset, files = robot_config(name)
        trained_as, folder = preset + (f" + {RECIPES[robot.body]}" if files else ""), name
    else:
        trained_as = settings_of(runs.get("args", {}))
    seeds = [r for r in runs.get("runs", []) if r.get("library") == "strl_jax" and go1_walk.evaluated(r)]
    standing = (runs.get("standing") or {}).get("velrmsd")
    target = runs.get("args", {}).get("target")
    sps = (throughput.get(name) or {}).get("sps")
    if seeds and target is not None:
        hits = [go1_walk.reached(r, target, runs["args"].get("max_falls", 0.05)) for r in seeds]
        last = [go1_walk.evaluated(r)[-1] for r in seeds]
        sps = statistics.median(run_sps(r) for r in seeds)
        minutes = [math.inf if h is None else h["wall_s"] for h in hits]
        steps = [math.inf if h is None else h["env_steps"] for h in hits]
        return [
            name,
            folder,
            robot.task,
            trained_as,
            num(standing, 3),
            num(target, 3),
            f"{sum(h is not None for h in hits)} of {len(hits)}",
            spread(minutes, 60.0, 1),
            spread(steps, 1e6, 1),
            spread([e["velrmsd"] for e in last], 1.0, 3),
            spread([e["falls"] for e in last], 1.0, 3),
            fmt(sps, 0),
            "-",
        ]
    projected = steps_to_target / sps / 60 if sps and steps_to_target else None
    head = [name, "-", robot.task, trained_as, num(standing, 3), num(target, 3), "not trained"]
    return head + ["-"] * 4 + [fmt(sps, 0), fmt(projected, 0)]


def variant_runs(out: Path, name: str) -> list[tuple[str, dict]]:
    """`(folder, runs.json)` of each `<out>/<name>_<variant>/` that holds a go1_walk invocation."""
    folders = sorted(p for p in out.glob(f"{name}_*") if (p / "runs.json").is_file())
    return [(p.name, read_json(p / "runs.json")) for p in folders]


def summary(out: Path) -> str:
    import go1_walk

    throughput = read_json(out / "throughput.json").get("robots", {})
    runs = {name: read_json(out / name / "runs.json") for name in ROBOTS}
    steps = [
        h["env_steps"]
        for name, saved in runs.items()
        if ROBOTS[name].body == "quadruped" and saved.get("args", {}).get("target") is not None
        for r in saved.get("runs", [])
        if r.get("library") == "strl_jax"
        and (h := go1_walk.reached(r, saved["args"]["target"], saved["args"].get("max_falls", 0.05)))
    ]
    median_steps = statistics.median(steps) if steps else None
    rows, recorded = [], list(runs.values())
    for name in ROBOTS:
        rows.append(robot_row(name, runs[name], throughput, median_steps))
        for folder, saved in variant_runs(out, name):
            rows.append(robot_row(name, saved, throughput, median_steps, folder))
            recorded.append(saved)
    machines = sorted(
        {s["machine"]["cpu_model"] for s in recorded if s.get("machine")}
        | {t["machine"]["cpu_model"] for t in throughput.values() if t.get("machine")}
    )
    notes = (
        "Each trained robot: bench/go1_walk.py in <out>/<robot>/ under its CPU preset or its body "
        "plan's recipe, and in <out>/<robot>_<variant>/ under the settings its row names (each "
        "folder's summary.md and PNG hold every checkpoint). Target: velrmsd at most a third of the "
        "standing robot's, falls <= 5%, on the unmodified task. Projected minutes: the trained "
        f"quadrupeds' median env steps to the target ({fmt(median_steps, 0)}) at the robot's env "
        f"steps/s. Machines: {'; '.join(machines) or '-'}."
    )
    text = notes + "\n\n" + format_table(SUMMARY_HEADERS, rows)
    (out / "summary.md").write_text(text + "\n")
    return text


# ---- the command ---------------------------------------------------------------------------
def train(args: argparse.Namespace) -> int:
    import go1_walk

    status = 0
    for name in args.robots:
        preset, files = robot_config(name)
        argv = ["--preset", preset, "--seeds", *map(str, args.seeds), "--minutes", str(args.minutes)]
        for path in files:
            argv += ["--config", path]
        argv += ["--out", str(Path(args.out) / name)] + ([] if args.peer else ["--no-peer"])
        argv += ["--resume"] if args.resume else []
        argv += ["--only", *args.only] if args.only else []
        print(f"[{time.strftime('%H:%M:%S')}] {name}: bench/go1_walk.py {' '.join(argv)}", flush=True)
        status = max(status, go1_walk.main(argv))
    return status


def trainable() -> list[str]:
    """The robots with a CPU preset: `train`'s default (any robot can be named)."""
    return [name for name, robot in ROBOTS.items() if robot.preset]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("command", choices=["throughput", "train", "summary"], nargs="?")
    p.add_argument("--robots", nargs="+", default=None, help=f"of {', '.join(ROBOTS)} (default: all)")
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--minutes", type=float, default=45.0, help="wall minutes per training run")
    p.add_argument("--peer", action="store_true", help="train Playground's own path too (twice as long)")
    p.add_argument("--resume", action="store_true", help="bench/go1_walk.py --resume")
    p.add_argument("--only", nargs="+", metavar="LABEL", help="bench/go1_walk.py --only")
    p.add_argument("--out", default="/tmp/legged_zoo")
    # the throughput worker: --worker throughput SPEC OUT (a flag, so `command` keeps its choices)
    p.add_argument("--worker", nargs=3, metavar=("KIND", "SPEC", "OUT"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    unknown = [r for r in args.robots or [] if r not in ROBOTS]
    if unknown:
        p.error(f"--robots {' '.join(unknown)}: unknown; the robots: {', '.join(ROBOTS)}")
    if args.command == "train":
        args.robots = args.robots or trainable()
    args.robots = args.robots or list(ROBOTS)
    if not args.worker and args.command is None:
        p.error("a command: throughput, train or summary")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        kind, spec_path, out_path = args.worker
        if kind != "throughput":
            raise SystemExit(f"--worker {kind}: unknown; the workers: throughput")
        write_json(out_path, throughput_worker(json.loads(Path(spec_path).read_text())))
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    status = 0
    if args.command == "throughput":
        results = measure_throughput(args.robots, out)
        status = int(any("error" in results[name] for name in args.robots))
    elif args.command == "train":
        status = train(args)
    print(summary(out))
    return status


if __name__ == "__main__":
    sys.exit(main())
