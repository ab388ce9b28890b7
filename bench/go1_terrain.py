"""st_rl's rough-terrain pipeline on Go1JoystickRoughTerrain: a teacher that sees the ground, a
blind policy beside it, and students that act on what a Go1 measures, distilled from the teacher.

Every stage is a bench/go1_walk.py invocation in its own folder of `--out` (its runs, checkpoints
by wall time, the evaluation of every checkpoint on the unmodified rough task afterwards, its
summary and PNG), run one after another, each training alone:
  teacher        configs/Go1JoystickRoughTerrain_teacher_cpu.yaml (legged_gym's height scan through
                 an MLP encoder, the task's noise on the actor's copy) for `--teacher-minutes`.
  blind          configs/Go1JoystickRoughTerrain_cpu.yaml (proprioception only) for
                 `--teacher-minutes` + `--student-minutes`: its checkpoints up to the teacher's
                 minutes are the blind side at equal wall time, its last one the blind policy
                 trained for the pipeline's whole time from the same start.
  student_KIND   the student presets (`--stages`; tppo: EstimatorTPPO, dagger: TPPO without
                 PPO's terms, distillation: rsl_rl's Distillation of an LSTM student with the
                 estimator's loss), each from the newest checkpoint of the same seed's teacher
                 (`--teacher-checkpoint N`: its checkpoint of iteration N), for
                 `--student-minutes`. Every student estimates the base velocity (StateAc,
                 StateAcRecurrent) from the 45 values a Go1 measures.
The teacher and blind presets start from the shipped flat-terrain Go1 (their `runner.load`,
configs/recipes/finetune_go1_walk.yaml: examples/go1_walk, 60 minutes of this CPU), as MuJoCo
Playground fine-tunes its flat-terrain Go1 on rough terrain; the teacher's scan latent enters its
actor and critic through rows that start at zero, so it begins as the flat policy.
`--start-minutes` (default 60) counts the loaded run's training on the pipeline's clock: the
teacher's and the blind policy's curves and times to the target start there (`--set
runner.load=` trains both from scratch, and the clock from 0).
Then the summary (`summary` alone rewrites it): per stage and seed, the time to the teacher's
target (velrmsd <= `--target`, falls <= `--max-falls`), the last checkpoint's velrmsd and falls,
the student's ratios to the teacher checkpoint it learned from (the goal: velrmsd <= 1.15x,
falls <= 1.5x), the estimator's RMS error of the base velocity over the run's last 10 iterations (on its
own training data) and env steps/s; terrain.md and terrain.png (velrmsd and falls against the
pipeline's wall time: a student's minutes count from its teacher checkpoint's).

    python bench/go1_terrain.py --out /tmp/go1_terrain                      # 2 seeds, 1 h + 1 h
    python bench/go1_terrain.py --out /tmp/go1_terrain --stages teacher --seeds 1
    python bench/go1_terrain.py --out /tmp/go1_terrain --resume             # after a stop
    python bench/go1_terrain.py --out /tmp/go1_terrain --stages teacher --seeds 1 \
        --teacher-minutes 120 --resume                                      # the teacher trained on
    python bench/go1_terrain.py summary --out /tmp/go1_terrain
    python bench/go1_terrain.py --smoke --out /tmp/go1_terrain_smoke        # minutes, tiny sizes
    python bench/go1_terrain.py ship --out /tmp/go1_terrain --seeds 1 --teacher-checkpoint 943 \
        --teacher examples/go1_rough_teacher                                # the teacher shipped
    python bench/go1_terrain.py --out /tmp/students --stages student_tppo --seeds 1 \
        --teacher examples/go1_rough_teacher                                # students of it

`ship` writes one seed's teacher checkpoint (the newest, or `--teacher-checkpoint`) as a
repository folder (`bench/ship_run.py`: the checkpoint cut to 16 envs, config, log, exported
policy) with its evaluation and place on the pipeline's clock in `teacher.json`. Under
`--teacher PATH` the students of every seed distil from that shipped teacher instead of the
`--out` folder's teacher stage, and the summary compares them with its evaluation: students are
measured against one teacher without training it again.

`--resume` is go1_walk's in every stage (finished runs kept, cut ones continued from their newest
checkpoint; with longer minutes, finished runs trained on from their last). The GPU counterpart
is bench/gpu_go1_terrain.sh.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from common import REPO_DIR, fmt, format_table

TEACHER = "Go1JoystickRoughTerrain_teacher_cpu"
BLIND = "Go1JoystickRoughTerrain_cpu"
STUDENTS = {
    "tppo": "Go1JoystickRoughTerrain_student_tppo_cpu",
    "dagger": "Go1JoystickRoughTerrain_student_dagger_cpu",
    "distillation": "Go1JoystickRoughTerrain_student_distillation_cpu",
}
STAGES = ("teacher", "blind", *(f"student_{k}" for k in STUDENTS))
TARGET = 0.40  # the teacher's goal on rough terrain: velrmsd <= 0.40 with <= 5% falls
STUDENT_VELRMSD, STUDENT_FALLS = 1.15, 1.5  # a student's goal, as multiples of its teacher's
TEACHER_KEY = "algorithm.teacher_policy.checkpoint="
ESTIMATOR_METRIC = "estimator_rmse_base_lin_vel"
START_FILE = "start.json"  # the run the teacher and blind presets loaded, and its minutes
SHIPPED_TEACHER = "teacher.json"  # a shipped teacher's evaluation and pipeline minutes (`ship`)
# --smoke: seconds-long stages at tiny sizes (sets applied to every stage), from scratch
SMOKE_SETS = [
    "policy.actor_hidden_dims=[32]",
    "policy.critic_hidden_dims=[32]",
    "runner.num_steps_per_env=8",
    "algorithm.num_mini_batches=2",
    "runner.load=",
]


def stage_preset(stage: str) -> str:
    if stage == "teacher":
        return TEACHER
    if stage == "blind":
        return BLIND
    return STUDENTS[stage.removeprefix("student_")]


def teacher_run(out: Path, seed: int) -> Path:
    return out / "teacher" / f"seed{seed}" / "runs" / f"strl_jax-seed{seed}"


def teacher_source(args: argparse.Namespace, seed: int) -> Path:
    """What a student of `seed` distils from: its teacher's run folder (the newest checkpoint) or,
    under `--teacher-checkpoint`, that iteration's checkpoint folder; under `--teacher`, that
    shipped teacher (for every seed)."""
    if args.teacher is not None:
        return args.teacher.resolve()
    run = teacher_run(args.out, seed)
    return run if args.teacher_checkpoint is None else run / "checkpoints" / str(args.teacher_checkpoint)


def shipped_teacher(folder: Path) -> dict | None:
    """The `ship` record of a shipped teacher folder: `{"evaluation", "pipeline_minutes", ...}`."""
    path = folder / SHIPPED_TEACHER
    return json.loads(path.read_text()) if path.is_file() else None


def ship_teacher(args: argparse.Namespace) -> Path:
    """Write `--seeds`' (one) teacher checkpoint to `--teacher` with its `teacher.json`."""
    import ship_run

    if args.teacher is None or len(args.seeds) != 1:
        raise SystemExit("error: ship needs --teacher (the folder to write) and one --seeds")
    (seed,) = args.seeds
    record = next((r for r in stage_runs(args.out, "teacher") if r["seed"] == seed), None)
    evals = [e for e in (record or {}).get("evals") or [] if e.get("velrmsd") is not None]
    if not evals:
        raise SystemExit(f"error: no evaluated teacher of seed {seed} in {args.out / 'teacher'}")
    chosen = args.teacher_checkpoint or evals[-1]["iteration"]
    evaluation = next((e for e in evals if e["iteration"] == chosen), None)
    if evaluation is None:
        there = [e["iteration"] for e in evals]
        raise SystemExit(f"error: checkpoint {chosen} of seed {seed} is not evaluated; there are {there}")
    ship_run.ship(teacher_run(args.out, seed), chosen, args.teacher, envs=16)
    start = start_of(args.out) or {}
    stage_record = json.loads((args.out / "teacher" / f"seed{seed}" / "runs.json").read_text())
    shipped = {
        "seed": seed,
        "checkpoint": chosen,
        "evaluation": evaluation,
        "pipeline_minutes": start.get("minutes", 0.0) + evaluation["wall_s"] / 60,
        "start": start or None,
        "overrides": record["spec"]["overrides"],
        "machine": record.get("machine"),
        "standing": stage_record.get("standing"),
    }
    (args.teacher / SHIPPED_TEACHER).write_text(json.dumps(shipped, indent=1) + "\n")
    return args.teacher


def preset_start(args: argparse.Namespace) -> dict | None:
    """`{"run", "minutes"}` the teacher and blind presets start from (their `runner.load` under
    `--set`), None from scratch."""
    from strl_jax.configs.loader import resolve_config

    sets = (SMOKE_SETS if args.smoke else []) + list(args.set)
    starts = {resolve_config(stage_preset(s), overrides=sets).runner.load for s in ("teacher", "blind")}
    if len(starts) > 1:
        raise SystemExit(f"error: the teacher and blind presets start from different runs: {sorted(starts)}")
    (load,) = starts
    if not load:
        return None
    found = next((p for p in (Path(load).expanduser(), REPO_DIR / load) if p.exists()), None)
    if found is None:
        raise SystemExit(f"error: runner.load {load!r} is neither in {Path.cwd()} nor in {REPO_DIR}")
    return {"run": str(found.resolve()), "minutes": args.start_minutes}


def stage_argv(stage: str, seed: int, args: argparse.Namespace) -> list[str]:
    """bench/go1_walk.py's arguments for one stage and seed."""
    minutes = args.teacher_minutes
    if stage == "blind":
        minutes = args.teacher_minutes + args.student_minutes
    elif stage.startswith("student_"):
        minutes = args.student_minutes
    argv = ["--preset", stage_preset(stage), "--seeds", str(seed), "--minutes", f"{minutes:g}"]
    argv += ["--checkpoint-minutes", f"{args.checkpoint_minutes:g}", "--no-peer"]
    argv += ["--target", f"{args.target:g}", "--max-falls", f"{args.max_falls:g}"]
    argv += ["--eval-envs", str(args.eval_envs), "--episode-length", str(args.episode_length)]
    sets = list(args.set)
    if stage.startswith("student_"):
        sets.append(f"algorithm.teacher_policy.checkpoint={teacher_source(args, seed)}")
        sets.append("runner.load=")  # a student starts fresh, whatever --set loads for the others
    elif start := preset_start(args):
        sets.append(f"runner.load={start['run']}")  # found wherever the workers run
    if args.smoke:
        sets = SMOKE_SETS + sets
        argv.append("--smoke")
    for s in sets:
        argv += ["--set", s]
    # one invocation per seed, so that a student's teacher is its own seed's
    out = args.out / stage / f"seed{seed}"
    argv += ["--out", str(out)]
    if args.resume and (out / "runs.json").is_file():
        argv.append("--resume")
    return argv


def run_stages(args: argparse.Namespace) -> int:
    import go1_walk

    if {"teacher", "blind"} & set(args.stages):  # the stages that load a start
        start = preset_start(args)
        saved = start_of(args.out)
        if saved != start and any(stage_runs(args.out, s) for s in ("teacher", "blind")):
            raise SystemExit(
                f"error: {args.out} holds runs that started from {saved or 'scratch'}, not "
                f"{start or 'scratch'}; give the same runner.load and --start-minutes, or another --out"
            )
        (args.out / START_FILE).write_text(json.dumps(start) + "\n")
    status = 0
    for stage in args.stages:
        for seed in args.seeds:
            if stage.startswith("student_") and not teacher_source(args, seed).is_dir():
                print(f"{stage} seed {seed}: no teacher checkpoint in {teacher_source(args, seed)}; skipped")
                status = 1
                continue
            argv = stage_argv(stage, seed, args)
            print(f"[{time.strftime('%H:%M:%S')}] {stage}: bench/go1_walk.py {' '.join(argv)}", flush=True)
            status = max(status, go1_walk.main(argv))
    return status


# ---- summary -------------------------------------------------------------------------------
def stage_runs(out: Path, stage: str) -> list[dict]:
    """The stage's go1_walk records, one per seed folder, in seed order."""
    records = []
    for path in sorted((out / stage).glob("seed*/runs.json")):
        records += json.loads(path.read_text())["runs"]
    return sorted(records, key=lambda r: r["seed"])


def start_of(out: Path) -> dict | None:
    """`{"run", "minutes"}` of the flat-terrain run the pipeline started from, None from scratch."""
    path = out / START_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def teacher_path(record: dict) -> Path:
    """The `algorithm.teacher_policy.checkpoint` a student's run was given."""
    overrides = record.get("spec", {}).get("overrides", [])
    return Path(next((o.split("=", 1)[1].strip('"') for o in overrides if o.startswith(TEACHER_KEY)), ""))


def teacher_of(out: Path, record: dict) -> dict | None:
    """The evaluation of the teacher checkpoint a student learned from: a shipped teacher's, else
    the one its `algorithm.teacher_policy.checkpoint` names (a checkpoint folder), else its
    teacher's last."""
    if shipped := shipped_teacher(teacher_path(record)):
        return shipped["evaluation"]
    teacher = next((r for r in stage_runs(out, "teacher") if r["seed"] == record["seed"]), None)
    evals = [e for e in (teacher or {}).get("evals") or [] if "wall_s" in e]
    if not evals:
        return None
    source = teacher_path(record)
    if source.parent.name == "checkpoints" and source.name.isdigit():
        iteration = int(Path(source).name)
        return next((e for e in evals if e.get("iteration") == iteration), None)
    return evals[-1]


def offset_minutes(stage: str, out: Path, record: dict) -> float:
    """Where a stage's clock starts on the pipeline's: the teacher's and the blind policy's after
    the flat run they started from, a student's after the teacher checkpoint it learned from."""
    start = (start_of(out) or {}).get("minutes", 0.0)
    if not stage.startswith("student_"):
        return start
    if shipped := shipped_teacher(teacher_path(record)):
        return shipped["pipeline_minutes"]
    teacher = teacher_of(out, record)
    return start + (teacher["wall_s"] / 60 if teacher else 0.0)


def estimator_error(record: dict) -> float | None:
    """The mean of the run's last 10 logged estimator errors (m/s), None without an estimator."""
    path = Path(record.get("run_dir", "")) / "metrics.jsonl"
    if not path.is_file():
        return None
    values = []
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if row.get(ESTIMATOR_METRIC) is not None:
            values.append(row[ESTIMATOR_METRIC])
    return statistics.fmean(values[-10:]) if values else None


def first_at(evals: list[dict], velrmsd: float, falls: float) -> dict | None:
    return next((e for e in evals if e.get("velrmsd", 9.0) <= velrmsd and e.get("falls", 1.0) <= falls), None)


HEADERS = [
    "stage",
    "seed",
    "trained minutes",
    "M env steps",
    "pipeline minutes to the target",
    "last velrmsd",
    "last falls",
    "best velrmsd (falls)",
    "x teacher's velrmsd / falls",
    "estimator RMSE m/s",
    "env steps/s",
]


def summary_rows(out: Path, target: float, max_falls: float) -> list[list]:
    rows = []
    for stage in STAGES:
        for record in stage_runs(out, stage):
            evals = [e for e in record.get("evals", []) if e.get("velrmsd") is not None]
            last = evals[-1] if evals else {}
            best = min(evals, key=lambda e: e["velrmsd"]) if evals else {}
            reached = first_at(evals, target, max_falls)
            ratio = "-"
            t = teacher_of(out, record) if stage.startswith("student_") else None
            if t and t.get("velrmsd") is not None and last:
                if t["falls"]:
                    falls_text = f"{last['falls'] / t['falls']:.2f}"
                else:  # '-': the teacher did not fall and the student did
                    falls_text = "0.00" if not last["falls"] else "-"
                ratio = f"{last['velrmsd'] / t['velrmsd']:.2f} / {falls_text}"
            sps = record.get("train", {}).get("sps")
            offset = offset_minutes(stage, out, record)
            rows.append(
                [
                    stage,
                    record["seed"],
                    fmt(last.get("wall_s", 0) / 60, 1) if last else "-",
                    fmt(last.get("env_steps", 0) / 1e6, 2) if last else "-",
                    fmt(offset + reached["wall_s"] / 60, 1) if reached else "never",
                    fmt(last.get("velrmsd"), 2),
                    fmt(last.get("falls"), 2),
                    f"{best['velrmsd']:.3f} ({best['falls']:.3f})" if best else "-",
                    ratio,
                    fmt(estimator_error(record), 2),
                    fmt(sps),
                ]
            )
    return rows


def plot(out: Path, target: float) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, (ax_v, ax_f) = plt.subplots(1, 2, figsize=(12, 4.5))
    colours = dict(
        zip(STAGES, ["tab:blue", "tab:gray", "tab:green", "tab:orange", "tab:purple"], strict=True)
    )
    for stage in STAGES:
        for record in stage_runs(out, stage):
            evals = [e for e in record.get("evals", []) if e.get("velrmsd") is not None]
            if not evals:
                continue
            start = offset_minutes(stage, out, record)
            minutes = [start + e["wall_s"] / 60 for e in evals]
            style = "-" if record["seed"] == min(r["seed"] for r in stage_runs(out, stage)) else "--"
            label = f"{stage} seed {record['seed']}"
            ax_v.plot(minutes, [e["velrmsd"] for e in evals], style, color=colours[stage], label=label)
            ax_f.plot(minutes, [e["falls"] for e in evals], style, color=colours[stage], label=label)
    ax_v.axhline(target, color="k", lw=0.8, ls=":")
    ax_v.set(xlabel="pipeline wall minutes", ylabel="velrmsd (unmodified rough task)", title="tracking")
    ax_f.set(xlabel="pipeline wall minutes", ylabel="fraction of episodes that fall", title="falls")
    ax_v.legend(fontsize=7)
    fig.tight_layout()
    path = out / "terrain.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_summary(out: Path, target: float, max_falls: float) -> str:
    table = format_table(HEADERS, summary_rows(out, target, max_falls))
    start = start_of(out)
    started = (
        f"teacher and blind policy from {start['run']}, whose {start['minutes']:g} minutes count"
        if start
        else "the teacher and blind policy from scratch"
    )
    text = (
        f"Go1JoystickRoughTerrain: teacher {TEACHER}, blind {BLIND}, students "
        f"{', '.join(STUDENTS.values())}. Target: velrmsd <= {target:g} with falls <= {max_falls:g} "
        f"on the unmodified task; a student's goal: velrmsd <= {STUDENT_VELRMSD}x and falls <= "
        f"{STUDENT_FALLS}x the teacher checkpoint it learned from (a falls ratio of '-': the teacher "
        f"did not fall, the student did). Trained minutes: a stage's own training clock; pipeline "
        f"minutes: from the start of the pipeline ({started}).\n\n{table}\n"
    )
    (out / "terrain.md").write_text(text)
    plot(out, target)
    return text


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("command", nargs="?", choices=["run", "summary", "ship"], default="run")
    p.add_argument("--stages", nargs="+", choices=STAGES, default=list(STAGES))
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    p.add_argument("--teacher-minutes", type=float, default=None, help="default 60 (smoke: 3)")
    p.add_argument("--student-minutes", type=float, default=None, help="default 60 (smoke: 2)")
    p.add_argument("--checkpoint-minutes", type=float, default=None, help="default 10 (smoke: 1)")
    p.add_argument("--target", type=float, default=TARGET)
    p.add_argument("--max-falls", type=float, default=0.05)
    p.add_argument("--eval-envs", type=int, default=None, help="default 32 (smoke: 4)")
    p.add_argument("--episode-length", type=int, default=None, help="default 1000 (smoke: 50)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override for every stage")
    p.add_argument(
        "--start-minutes",
        type=float,
        default=60.0,
        help="training minutes of the run the teacher and blind presets load (default 60: examples/go1_walk)",
    )
    p.add_argument(
        "--teacher-checkpoint",
        type=int,
        default=None,
        metavar="ITERATION",
        help="the students learn from this checkpoint of their teacher (default: its newest)",
    )
    p.add_argument(
        "--teacher",
        type=Path,
        default=None,
        metavar="FOLDER",
        help="a shipped teacher (`ship` writes it) that every seed's students distil from",
    )
    p.add_argument("--resume", action="store_true", help="go1_walk's --resume in each stage")
    p.add_argument("--smoke", action="store_true", help="tiny end-to-end check of every stage")
    p.add_argument("--out", type=Path, default=Path("/tmp/go1_terrain"))
    args = p.parse_args(argv)
    defaults = {"teacher_minutes": 60.0, "student_minutes": 60.0, "checkpoint_minutes": 10.0}
    defaults |= {"eval_envs": 32, "episode_length": 1000}
    smoke = {"teacher_minutes": 3.0, "student_minutes": 2.0, "checkpoint_minutes": 1.0}
    smoke |= {"eval_envs": 4, "episode_length": 50}
    for key, value in (smoke if args.smoke else defaults).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.stages = [s for s in STAGES if s in args.stages]  # students after their teacher
    if args.command == "run" and args.teacher is not None and args.teacher_checkpoint is not None:
        p.error("--teacher-checkpoint picks a checkpoint of the --out teacher; a shipped --teacher has one")
    if args.command == "run" and args.teacher is not None and "teacher" in args.stages:
        p.error("--teacher gives the students a shipped teacher; leave the teacher stage out of --stages")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.command == "ship":
        print(f"{ship_teacher(args)}: {args.teacher / SHIPPED_TEACHER}")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    status = run_stages(args) if args.command == "run" else 0
    print(write_summary(args.out, args.target, args.max_falls))
    return status


if __name__ == "__main__":
    sys.exit(main())
