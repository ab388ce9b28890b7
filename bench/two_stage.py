"""Two-stage training (st_rl's TwoStageRunner) against RL alone, at equal env steps, several seeds.

Per task, an expert records `--dataset-steps` steps with its sampled actions (`python -m
strl_jax.collect --sample_actions`): for Brax's hopper, walker2d and halfcheetah the task's preset
trained at 256 envs for `--expert-iterations` iterations (default 60, walker2d 200); for
inverted_pendulum the test suite's full-state PPO expert (`tests/learning_runs.py`). The expert is
the first checkpoint with the run's best deterministic evaluation. Each seed then trains from scratch:

- two-stage   (`--plain-arm`) `--pretrain` iterations on the dataset (`runner.pretrain_iterations`;
              no env step) with the pretraining settings `--imitation` (`imitation_loss_coef`),
              `--pretrain-rate` (`learning_rate`; 0 leaves the algorithm's adaptive rate, as in
              st_rl) and `--imitation-labels` (`imitation_labels`, default `mean_actions`: the
              expert's mean action at each recorded step, rather than its noisy sample), then
              `--iterations` RL iterations;
- two-stage + RL imitation  (`--rl-imitation COEF ITERATIONS`, 0 0 leaves it out) the same, with
              the imitation term carried into the RL iterations (`rl_imitation_coef`, falling
              linearly to 0 over `rl_imitation_iterations`, `agents.demonstrations`), on the
              dataset steps `--rl-imitation-filter` keeps (default `reward`: all of them in the
              iterations whose rollout earns less or falls more per step than the dataset;
              `advantage`: those whose return beats the critic's value);
- st_rl rate  (`--st-rl-arm`) the same pretraining with st_rl's rate handling (the adaptive rule
              runs), st_rl's imitation weight 1 and the executed actions as labels (the
              values of `defaults: st_rl`), evaluated before any env step only;
- RL alone    `--iterations` RL iterations.

For Go1JoystickFlatTerrain (MuJoCo Playground) the expert is the shipped walking policy
(`examples/go1_walk_gpu`, 100,000 sampled steps) and each seed only pretrains, 50 iterations (a fresh
Gaussian policy of the example's network; an hour of Go1 RL per arm does not fit this CPU): the
expert and each pretrained policy are evaluated by `bench/go1_walk.py`'s evaluation
(`--go1-eval-envs` envs, one 1000-step episode each, domain randomisation on, Playground's command
ranges), velocity-tracking RMSD and falls.

For the Brax tasks, the deterministic evaluation return (16 envs) is printed against the env steps
each arm has taken, so pretraining's iterations count for nothing; also the fraction of the
expert's return before any env step, the lowest learning rate of the pretraining iterations,
whether each two-stage arm stays ahead of RL alone at every evaluation until both have reached the
expert's return, the share of dataset steps the filter kept while the pull lasted, and the time
each arm took. An expert already trained in `--out` is reused.

    python bench/two_stage.py --out /tmp/two_stage          # hopper, walker2d, halfcheetah; seeds 2-4
    python bench/two_stage.py --tasks Go1JoystickFlatTerrain --out /tmp/two_stage_go1
    python bench/two_stage.py --tasks inverted_pendulum --seeds 1 2 3 4 5 --imitation 1 --pretrain-rate 0
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from common import REPO_DIR, format_table, machine_info, write_json

sys.path.insert(0, str(REPO_DIR / "tests"))
from go1_walk import strl_evaluations  # noqa: E402
from learning_runs import PENDULUM_COMMON, train_expert  # noqa: E402

from strl_jax.checkpoints.orbax_checkpoints import CHECKPOINT_DIR, read_checkpoint_meta  # noqa: E402
from strl_jax.collect import main as collect_main  # noqa: E402
from strl_jax.configs.loader import resolve_config  # noqa: E402
from strl_jax.runners.runner import train  # noqa: E402

QUIET = ["runner.save_interval=0", "runner.print_interval=1000"]
BRAX = {"common": ["env.num_envs=256", *QUIET], "pretrain": 10, "iterations": 80, "eval_every": 10}
# Brax experts' training iterations: walker2d's preset at 60 iterations (return 278, a policy that
# falls within 300 steps) is no better than RL alone reaches in the arms' own 80 iterations
# per task: its config, the overrides every run shares, and the defaults of the run lengths
TASKS = {
    "inverted_pendulum": {
        "config": "inverted_pendulum_teacher",
        "common": [*PENDULUM_COMMON, "runner.num_steps_per_env=16"],
        "pretrain": 5,
        "iterations": 20,
        "eval_every": 5,
        "dataset_steps": 3200,
        # a fixed-base task has no default AMP frame, and collect records one for every Brax task
        "collect": ["--amp_obs_components", "joint_pos,joint_vel"],
    },
    **{
        task: {"config": task, **BRAX, "dataset_steps": 20000, "expert_iterations": iterations}
        for task, iterations in (("hopper", 60), ("walker2d", 200), ("halfcheetah", 60))
    },
    # 20,000 steps (20 episodes, a few dozen commands) left the pretrained policies falling in 63-91%
    # of the evaluation episodes at velrmsd 0.66-0.81, after 10 or 50 iterations alike
    "Go1JoystickFlatTerrain": {"pretrain": 50, "dataset_steps": 100000},
}
GO1_TASK = ("Go1JoystickFlatTerrain",)
GO1_EXPERT = REPO_DIR / "examples" / "go1_walk_gpu"
# a fresh Gaussian policy with the shipped policy's network, on the preset's PPO settings
GO1_STUDENT = [
    "env.num_envs=256",
    "policy.activation=swish",
    "policy.distribution=gaussian",
    "runner.eval_interval=0",
    "runner.save_interval=10",
    *QUIET[1:],
]


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", nargs="+", choices=sorted(TASKS), default=["hopper", "walker2d", "halfcheetah"])
    # the Brax experts train with seed 1: an RL-alone arm with that seed would repeat the expert's run
    p.add_argument("--seeds", type=int, nargs="+", default=[2, 3, 4])
    p.add_argument("--pretrain", type=int, help="pretraining iterations on the dataset (default: per task)")
    p.add_argument("--iterations", type=int, help="RL iterations of each arm (default: per task)")
    p.add_argument("--eval-every", type=int, help="iterations between evaluations (default: per task)")
    p.add_argument("--dataset-steps", type=int, help="steps the expert records (default: per task)")
    p.add_argument(
        "--expert-iterations", type=int, help="Brax experts' training iterations (default: per task)"
    )
    p.add_argument("--imitation", type=float, default=100.0, help="pretraining's imitation_loss_coef")
    p.add_argument(
        "--pretrain-rate", type=float, default=3e-4, help="pretraining's learning_rate (0: adaptive)"
    )
    p.add_argument(
        "--rl-imitation",
        type=float,
        nargs=2,
        default=[30.0, 80],
        metavar=("COEF", "ITERATIONS"),
        help="rl_imitation_coef and rl_imitation_iterations of the '+ RL imitation' arm (0 0: no such arm)",
    )
    p.add_argument(
        "--rl-imitation-filter",
        choices=["none", "advantage", "reward"],
        default="reward",
        help="rl_imitation_filter of the '+ RL imitation' arm",
    )
    p.add_argument(
        "--imitation-labels",
        choices=["actions", "mean_actions"],
        default="mean_actions",
        help="imitation_labels of the two-stage arms (the st_rl arm imitates the executed actions)",
    )
    p.add_argument("--st-rl-arm", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument(
        "--plain-arm",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the two-stage arm without the pull in the RL iterations",
    )
    p.add_argument("--go1-eval-envs", type=int, default=32, help="Go1 evaluation envs")
    p.add_argument("--out", type=Path, default=Path("/tmp/two_stage"))
    return p.parse_args()


def brax_expert(task: str, root: Path, iterations: int) -> tuple[Path, float]:
    """`(checkpoint folder, its deterministic eval return)`: the task's preset at 256 envs, saved
    and evaluated every 10 iterations; the first checkpoint with the run's best evaluation."""
    overrides = ["env.num_envs=256", f"runner.max_iterations={iterations}", "runner.eval_interval=10",
                 "runner.save_interval=10", "runner.max_checkpoints_to_keep=0", "runner.print_interval=1000",
                 "seed=1"]  # fmt: skip
    if (root / "metrics.jsonl").is_file() and (root / CHECKPOINT_DIR).is_dir():
        rows = [json.loads(line) for line in (root / "metrics.jsonl").read_text().splitlines()]
    else:
        rows = train(resolve_config(task, overrides=overrides), root, verbose=False).rows
    best, iteration = max((r["eval_reward"], -r["iteration"]) for r in rows if "eval_reward" in r)
    return root / CHECKPOINT_DIR / str(-iteration), float(best)


def curve(rows: list[dict]) -> dict[int, float]:
    """Evaluation return by env steps taken."""
    return {r["env_steps"]: r["eval_reward"] for r in rows if "eval_reward" in r}


def pretrain_overrides(
    data: Path,
    pretrain: int,
    imitation: float,
    rate: float,
    rl_imitation: tuple = (0, 0),
    filter_: str = "none",
    labels: str = "actions",
) -> list[str]:
    settings = f"data_dir: {data}, dataset_loops: -1, imitation_loss_coef: {imitation}"
    settings += f", imitation_labels: {labels}"
    settings += f", learning_rate: {rate}" if rate > 0 else ", learning_rate: null"  # null: adaptive
    coef, iterations = rl_imitation
    if coef > 0:
        settings += f", rl_imitation_coef: {coef}, rl_imitation_iterations: {int(iterations)}"
        settings += f", rl_imitation_filter: {filter_}"
    return [f"runner.pretrain_iterations={pretrain}", f"runner.pretrain_dataset={{{settings}}}"]


def stays_ahead(two: dict[int, float], alone: dict[int, float], expert: float) -> bool:
    """Two-stage >= RL alone at every common evaluation until both have reached `expert`."""
    reached = {"two": False, "alone": False}
    for steps in sorted(set(two) & set(alone) - {0}):
        if reached["two"] and reached["alone"]:
            break
        if two[steps] < alone[steps]:
            return False
        reached["two"] |= two[steps] >= expert
        reached["alone"] |= alone[steps] >= expert
    return True


def mean_curve(by_seed: dict) -> dict[int, float]:
    """The seeds' mean return at each evaluation all of them have."""
    steps = set.intersection(*(set(c) for c in by_seed.values()))
    return {k: statistics.mean(c[k] for c in by_seed.values()) for k in steps}


def mean_std(values: list[float]) -> str:
    return f"{statistics.mean(values):.1f} +- {statistics.pstdev(values):.1f}" if values else "-"


def run_task(task: str, args: argparse.Namespace) -> dict:
    spec = TASKS[task]
    pretrain = args.pretrain or spec["pretrain"]
    iterations = args.iterations or spec["iterations"]
    every = args.eval_every or spec["eval_every"]
    out = args.out / task
    start = time.time()
    if task == "inverted_pendulum":
        expert, expert_return = train_expert(out / "expert")
    else:
        expert_iterations = args.expert_iterations or spec["expert_iterations"]
        expert, expert_return = brax_expert(task, out / "expert", expert_iterations)
    data = out / "dataset"
    if not data.exists():
        steps = args.dataset_steps or spec["dataset_steps"]
        collect = [str(expert), "--out", str(data), "--num_envs", "16", "--min_timesteps", str(steps),
                   "--sample_actions", *spec.get("collect", [])]  # fmt: skip
        assert collect_main(collect) == 0
    print(f"{task}: expert {expert} return {expert_return:.1f}; dataset {data} ({time.time() - start:.0f} s)")
    evals = [f"runner.eval_interval={every}"]
    arms = {}
    if args.plain_arm:
        arms["two-stage"] = [
            *pretrain_overrides(
                data, pretrain, args.imitation, args.pretrain_rate, labels=args.imitation_labels
            ),
            *evals,
            f"runner.max_iterations={pretrain + iterations}",
        ]
    arms["RL alone"] = [*evals, f"runner.max_iterations={iterations}"]
    if args.rl_imitation[0] > 0:
        rl_imitation = pretrain_overrides(
            data,
            pretrain,
            args.imitation,
            args.pretrain_rate,
            args.rl_imitation,
            args.rl_imitation_filter,
            args.imitation_labels,
        )
        arms["two-stage + RL imitation"] = [
            *rl_imitation,
            *evals,
            f"runner.max_iterations={pretrain + iterations}",
        ]
    if args.st_rl_arm:
        once = [f"runner.eval_interval={pretrain}", f"runner.max_iterations={pretrain}"]
        arms["st_rl rate"] = [*pretrain_overrides(data, pretrain, 1.0, 0.0), *once]
    curves: dict[str, dict[int, dict[int, float]]] = {arm: {} for arm in arms}
    times: dict[str, list[float]] = {arm: [] for arm in arms}
    lowest_rate: dict[str, dict[int, float]] = {arm: {} for arm in arms}
    pull_kept: dict[str, dict[int, float]] = {arm: {} for arm in arms}
    for seed in args.seeds:
        for arm, overrides in arms.items():
            cfg = resolve_config(spec["config"], overrides=[*spec["common"], *overrides, f"seed={seed}"])
            t0 = time.time()
            result = train(cfg, out / "runs" / f"{arm.replace(' ', '_')}_s{seed}", verbose=False)
            if result.interrupted:  # the run stopped on a signal: so does the benchmark
                raise SystemExit(f"{task} {arm} seed {seed}: stopped by {result.interrupted}")
            times[arm].append(time.time() - t0)
            curves[arm][seed] = curve(result.rows)
            rates = [r["learning_rate"] for r in result.rows if r.get("pretraining")]
            if rates:
                lowest_rate[arm][seed] = min(rates)
            kept = [r["rl_imitation_kept"] for r in result.rows if r.get("rl_imitation_weight", 0) > 0]
            if kept:
                pull_kept[arm][seed] = statistics.mean(kept)
            print(f"{task} {arm} seed {seed}: {curves[arm][seed]}", flush=True)
    return {
        "expert": str(expert),
        "expert_return": expert_return,
        "curves": curves,
        "times": times,
        "lowest_pretraining_rate": lowest_rate,
        # the mean share of drawn dataset steps the filter kept while the pull's weight was > 0
        "pull_kept": {arm: by_seed for arm, by_seed in pull_kept.items() if by_seed},
        "ahead_until_expert": {
            arm: {
                seed: stays_ahead(curves[arm][seed], curves["RL alone"][seed], expert_return)
                for seed in args.seeds
            }
            for arm in arms
            if arm.startswith("two-stage")
        },
    }


def go1_evaluation(run: Path, iteration: int, args: argparse.Namespace) -> dict:
    """`bench/go1_walk.py`'s evaluation of one checkpoint: velrmsd, falls, return, ..."""
    spec = {"run_dir": str(run), "checkpoints": [{"iteration": iteration}], "task": "Go1JoystickFlatTerrain",
            "eval_envs": args.go1_eval_envs, "episode_length": 1000, "eval_seed": 0}  # fmt: skip
    (entry,) = strl_evaluations(spec, lambda _: None)
    if "error" in entry:
        raise RuntimeError(f"evaluating {run} checkpoint {iteration}: {entry['error']}")
    return entry


def run_go1(args: argparse.Namespace) -> dict:
    """The shipped walking policy's sampled steps; per seed, pretraining only, then the evaluation."""
    pretrain = args.pretrain or TASKS["Go1JoystickFlatTerrain"]["pretrain"]
    out = args.out / "Go1JoystickFlatTerrain"
    expert_step = read_checkpoint_meta(GO1_EXPERT)[1]
    start = time.time()
    expert = go1_evaluation(GO1_EXPERT, expert_step, args)
    print(f"Go1 expert {GO1_EXPERT} checkpoint {expert_step}: {expert} ({time.time() - start:.0f} s)")
    data = out / "dataset"
    if not data.exists():
        steps = args.dataset_steps or TASKS["Go1JoystickFlatTerrain"]["dataset_steps"]
        collect = [str(GO1_EXPERT), "--out", str(data), "--num_envs", "32", "--min_timesteps", str(steps),
                   "--sample_actions"]  # fmt: skip
        assert collect_main(collect) == 0
    students, times = {}, {}
    pretraining = pretrain_overrides(
        data, pretrain, args.imitation, args.pretrain_rate, labels=args.imitation_labels
    )
    overrides = [*GO1_STUDENT, *pretraining]
    for seed in args.seeds:
        more = [f"runner.max_iterations={pretrain}", f"seed={seed}"]
        cfg = resolve_config("Go1JoystickFlatTerrain", overrides=[*overrides, *more])
        t0 = time.time()
        result = train(cfg, out / "runs" / f"pretrained_s{seed}", verbose=False)
        times[seed] = time.time() - t0
        students[seed] = go1_evaluation(result.log_dir, pretrain, args)
        students[seed]["lowest_pretraining_rate"] = min(r["learning_rate"] for r in result.rows)
        print(f"Go1 pretrained seed {seed}: {students[seed]} ({times[seed]:.0f} s)", flush=True)
    return {"expert": expert, "pretrained": students, "times": times}


def report_go1(r: dict) -> str:
    keys = ["velrmsd", "falls", "episode_reward", "episode_length"]
    header = ["policy", *keys, "lowest pretraining rate"]
    rows = [["expert (examples/go1_walk_gpu)", *[f"{r['expert'][k]:.3f}" for k in keys], "-"]]
    for seed, e in r["pretrained"].items():
        rows.append(
            [
                f"pretrained, seed {seed}",
                *[f"{e[k]:.3f}" for k in keys],
                f"{e['lowest_pretraining_rate']:.2g}",
            ]
        )
    return "## Go1JoystickFlatTerrain: no env step\n" + format_table(header, rows)


def report(task: str, r: dict) -> str:
    steps = sorted(set().union(*(c.keys() for arm in r["curves"].values() for c in arm.values())))
    header = ["arm", "seconds", *[f"{s:,} env steps" for s in steps]]
    table = []
    for arm, by_seed in r["curves"].items():
        cells = [mean_std([c[s] for c in by_seed.values() if s in c]) for s in steps]
        table.append([arm, f"{statistics.mean(r['times'][arm]):.0f}", *cells])
    lines = [f"## {task}: expert return {r['expert_return']:.1f}", format_table(header, table)]
    for arm, by_seed in r["curves"].items():
        if 0 in next(iter(by_seed.values())):
            share = [c[0] / r["expert_return"] for c in by_seed.values()]
            rates = ", ".join(f"{v:.2g}" for v in r["lowest_pretraining_rate"][arm].values())
            shares = ", ".join(f"{s:.0%}" for s in share)
            seeds = ", ".join(map(str, by_seed))
            lines.append(f"{arm}: before any env step {shares} of the expert's return (seeds {seeds}); "
                         f"lowest pretraining rate {rates}")  # fmt: skip
    for arm, by_seed in r.get("pull_kept", {}).items():
        kept = ", ".join(f"{v:.0%}" for v in by_seed.values())
        lines.append(f"{arm}: dataset steps kept while the pull's weight was > 0: {kept}")
    alone = mean_curve(r["curves"]["RL alone"])
    for arm, ahead in r["ahead_until_expert"].items():
        on_means = stays_ahead(mean_curve(r["curves"][arm]), alone, r["expert_return"])
        lines.append(f"{arm} ahead of RL alone until both reach the expert's return: "
                     f"{sum(ahead.values())} of {len(ahead)} seeds; mean over seeds: "
                     f"{'ahead' if on_means else 'not ahead'}")  # fmt: skip
    return "\n".join(lines)


def main() -> int:
    args = parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results = {task: run_go1(args) if task in GO1_TASK else run_task(task, args) for task in args.tasks}
    reports = [report_go1(r) if task in GO1_TASK else report(task, r) for task, r in results.items()]
    print("\n\n".join(reports))
    summary = {"machine": machine_info(), "args": vars(args) | {"out": str(args.out)}}
    write_json(args.out / "results.json", summary | {"results": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
