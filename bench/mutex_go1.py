"""Two Go1 skills trained separately, switched by a mutex policy on a schedule.

Why: st_rl's mutex policies run finished skills side by side and let the observation choose one
per env and step. This script shows it on MuJoCo Playground's Go1JoystickFlatTerrain:

1. trains (each in its own subprocess, `python bench/common.py strl-worker`) two PPO skills near
   the CPU size of `bench/go1_estimator.py` (256 envs x 24 steps, 4 minibatches, [128, 128], no
   entropy bonus), with a larger initial noise std (0.5), learning rate 1e-3 and the tracking
   rewards' weights raised (Playground's `reward_config.scales`; at 0.2 / 3e-4 / Playground's
   weights neither skill moved within 150 iterations), differing in the commands Playground draws
   (`env.playground.command_config`, uniform in [-a, a], never zeroed):
   - walk: vx in [-1, 1] m/s, vy = yaw rate = 0 (`--walk-iterations`, tracking_lin_vel 3);
   - turn: yaw rate in [-1, 1] rad/s, vx = vy = 0 (`--turn-iterations`, tracking_lin_vel 2);
   both with tracking_ang_vel 2; or reuses given run folders (`--walk-run`, `--turn-run`);
2. builds the mutex config (`ActorCriticFieldMutex`, the two runs as sub-policies) with a
   `skill_selection` section: `strl_jax.envs.skill_selection` appends a one-hot `engaging_block`
   to the policy group and holds each skill's command while it is selected, skill k for the steps
   [k T, (k + 1) T) of each period 2 T of an episode (T = `--segment-steps`);
3. runs the switch deterministically in that env (`--envs` envs, one `--steps`-step episode each,
   nominal physics, noise-free observations) and reports per skill segment: the mean forward
   velocity and yaw rate reached (base frame), against the commanded ones; falls; the return;
   and, as references, each skill alone at its command for the whole episode (no switching).

    python bench/mutex_go1.py --out /tmp/mutex_go1                     # trains, then evaluates
    python bench/mutex_go1.py --walk-run RUN_A --turn-run RUN_B --out /tmp/mutex_go1

Prints the table and writes `<out>/results.json`, `<out>/mutex.yaml` (usable with
`python -m strl_jax.play`, `collect` and `export`) and the runs to `<out>/runs/`.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

from common import REPO_DIR, format_table, machine_info, run_worker, write_json

TASK = "Go1JoystickFlatTerrain"
# command_config: uniform in [-a, a] per axis (vx, vy, yaw rate), kept with probability b
SKILLS = {
    "walk": {"a": [1.0, 0.0, 0.0], "b": [1.0, 0.0, 0.0], "command": [0.75, 0.0, 0.0], "lin": 3.0},
    "turn": {"a": [0.0, 0.0, 1.0], "b": [0.0, 0.0, 1.0], "command": [0.0, 0.0, 1.0], "lin": 2.0},
}


def train_overrides(skill: str, args: argparse.Namespace) -> list[str]:
    """The CPU-size PPO settings of bench/go1_estimator.py and the skill's command ranges."""
    cmd = SKILLS[skill]
    iterations = getattr(args, f"{skill}_iterations")
    return [
        f"runner.max_iterations={iterations}",
        f"runner.eval_interval={max(1, math.ceil(iterations / 3))}",
        "runner.num_eval_envs=16",
        "runner.save_interval=0",
        "runner.print_interval=1000000",
        f"env.num_envs={args.num_envs}",
        "runner.num_steps_per_env=24",
        "algorithm.num_mini_batches=4",
        "policy.actor_hidden_dims=[128,128]",
        "policy.critic_hidden_dims=[128,128]",
        "policy.init_noise_std=0.5",
        "algorithm.learning_rate=0.001",
        "algorithm.entropy_coef=0.0",
        f"env.playground.reward_config.scales.tracking_lin_vel={cmd['lin']}",
        "env.playground.reward_config.scales.tracking_ang_vel=2.0",
        f"env.playground.command_config.a={cmd['a']}",
        f"env.playground.command_config.b={cmd['b']}",
        f"seed={args.seed}",
        *args.set,
    ]


def train(skill: str, args: argparse.Namespace, out: Path) -> tuple[Path, dict]:
    log_dir = out / "runs" / skill
    overrides = train_overrides(skill, args)
    print(f"[{time.strftime('%H:%M:%S')}] training {skill}: {' '.join(overrides)}", flush=True)
    worker = [sys.executable, str(REPO_DIR / "bench" / "common.py"), "strl-worker"]
    spec = {"task": TASK, "overrides": overrides, "log_dir": str(log_dir)}
    result = run_worker(worker, spec, out / "logs", skill, args.timeout)
    if result.get("error"):
        raise SystemExit(result["error"])
    print(f"    {skill}: {result.get('total_s', 0):.0f} s, evals {result.get('evals')}", flush=True)
    return log_dir, {k: result.get(k) for k in ("total_s", "wall_s", "evals", "env_steps", "sps")}


def mutex_config(runs: dict[str, str], args: argparse.Namespace) -> dict:
    """The mutex config: the two skills, the schedule, nominal physics, noise-free observations."""
    from strl_jax.envs.playground_components import playground_default_config

    return {
        "policy": {
            "class_name": "ActorCriticFieldMutex",
            "sub_policy_paths": [runs[k] for k in SKILLS],
            "env_action_scale": float(playground_default_config(TASK)["action_scale"]),
            "action_smoothing_buffer_len": args.smoothing,
            "reset_non_selected": "none",
        },
        "env": {
            "episode_length": args.steps,
            "domain_randomization": False,
            "playground": {"noise_config": {"level": 0.0}},
        },
        "skill_selection": {
            "segment_steps": args.segment_steps,
            "commands": [SKILLS[k]["command"] for k in SKILLS],
        },
    }


def evaluate(config_path: Path, args: argparse.Namespace, names: list[str] | None = None) -> dict:
    """One deterministic episode per env of the switch; per-segment velocities, falls, return.
    `names`: the skills of the config in order (default: all of `SKILLS`)."""
    import jax
    import numpy as np

    from strl_jax.mutex_from_runs import load_mutex_run
    from strl_jax.train_loops.evaluation import episode_rollout

    run = load_mutex_run(config_path)
    env, policy = run.env.replace(num_envs=args.envs), run.policy

    def rollout(key):
        returns, lengths, _, probe = episode_rollout(
            env,
            lambda obs, state: policy.step(obs["policy"], state),
            policy.initial_hidden(env.num_envs),
            key,
            reset_hidden=policy.reset,
        )
        return returns, lengths, probe

    start = time.time()
    returns, lengths, probe = jax.device_get(jax.jit(rollout)(jax.random.PRNGKey(args.seed)))
    seconds = time.time() - start
    velocity, alive = (np.asarray(probe[k]) for k in ("velocity", "alive"))
    names = list(SKILLS) if names is None else names
    segments = []
    for first in range(0, args.steps, args.segment_steps):
        rows = slice(first + args.settle, first + args.segment_steps)
        live = alive[rows] > 0
        if not live.any():
            continue
        vel = velocity[rows][live]
        segments.append(
            {
                "steps": f"{first}-{first + args.segment_steps - 1}",
                "skill": names[(first // args.segment_steps) % len(names)],
                "command": SKILLS[names[(first // args.segment_steps) % len(names)]]["command"],
                "vx": float(vel[:, 0].mean()),
                "vy": float(vel[:, 1].mean()),
                "wz": float(vel[:, 2].mean()),
                "alive": float(live.mean()),
                "fell": int(
                    np.sum((lengths >= first) & (lengths < min(first + args.segment_steps, args.steps)))
                ),
            }
        )
    return {
        "segments": segments,
        "return_mean": float(np.mean(returns)),
        "return_std": float(np.std(returns)),
        "length_mean": float(np.mean(lengths)),
        "falls": int(np.sum(lengths < args.steps)),
        "envs": args.envs,
        "rollout_s": seconds,
    }


def reference_config(skill: str, run: str, args: argparse.Namespace) -> dict:
    """One skill alone for the whole episode at its command: what it does without switching."""
    config = mutex_config({k: run for k in SKILLS}, args)
    config["policy"]["sub_policy_paths"] = [run]
    config["skill_selection"] = {"segment_steps": args.steps, "commands": [SKILLS[skill]["command"]]}
    return config


def segment_table(result: dict) -> str:
    headers = [
        "steps",
        "skill",
        "command (vx, vy, wz)",
        "vx m/s",
        "vy m/s",
        "yaw rate rad/s",
        "alive",
        "fell",
    ]
    rows = [
        [
            s["steps"],
            s["skill"],
            str(s["command"]),
            f"{s['vx']:+.3f}",
            f"{s['vy']:+.3f}",
            f"{s['wz']:+.3f}",
            f"{s['alive']:.2f}",
            s["fell"],
        ]
        for s in result["segments"]
    ]
    return format_table(headers, rows)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--walk-iterations", type=int, default=300, help="training iterations of walk")
    p.add_argument("--turn-iterations", type=int, default=200, help="training iterations of turn")
    p.add_argument("--num-envs", type=int, default=256, help="training envs")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--walk-run", default=None, help="use this run folder as the walking skill")
    p.add_argument("--turn-run", default=None, help="use this run folder as the turning skill")
    p.add_argument("--train-only", action="store_true", help="train the skills and stop")
    p.add_argument("--skills", default="walk,turn", help="which skills to train (the others need --*-run)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="training override")
    p.add_argument("--segment-steps", type=int, default=100, help="steps per skill segment (T)")
    p.add_argument("--steps", type=int, default=800, help="evaluation steps per env")
    p.add_argument("--envs", type=int, default=16, help="evaluation envs")
    p.add_argument("--smoothing", type=int, default=1, help="action_smoothing_buffer_len")
    p.add_argument(
        "--no-references", dest="references", action="store_false", help="skip the single-skill runs"
    )
    p.add_argument("--settle", type=int, default=20, help="steps after each switch left out of the means")
    p.add_argument("--timeout", type=float, default=None, help="seconds per training run")
    p.add_argument("--out", default="/tmp/mutex_go1", help="output folder")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    start = time.time()
    training = {}
    runs = {"walk": args.walk_run, "turn": args.turn_run}
    chosen = [k.strip() for k in args.skills.split(",") if k.strip()]
    for skill in SKILLS:
        if runs[skill] is None and skill in chosen:
            path, training[skill] = train(skill, args, out)
            runs[skill] = str(path)
    if args.train_only:
        write_json(out / f"training_{'_'.join(chosen)}.json", {"runs": runs, "training": training})
        return 0
    missing = [k for k, v in runs.items() if v is None]
    if missing:
        raise SystemExit(f"no run for skills {missing}: train them (--skills) or give --{missing[0]}-run")
    import yaml

    config_path = out / "mutex.yaml"
    config_path.parent.mkdir(parents=True, exist_ok=True)
    config_path.write_text(yaml.safe_dump(mutex_config(runs, args), sort_keys=False))
    result = evaluate(config_path, args)
    references = {}
    if args.references:
        for skill, run in runs.items():
            path = out / f"{skill}_alone.yaml"
            path.write_text(yaml.safe_dump(reference_config(skill, run, args), sort_keys=False))
            whole = argparse.Namespace(**{**vars(args), "segment_steps": args.steps})
            references[skill] = evaluate(path, whole, [skill])
    info = machine_info()
    print(
        f"\n{TASK} mutex of {list(SKILLS)} ({config_path}), {info['cpu_model']} ({info['cpu_count']} CPUs); "
        f"{args.envs} envs x {args.steps} steps, skill switch every {args.segment_steps} steps, "
        f"means over each segment's steps from the {args.settle}th on (alive envs)"
    )
    print(segment_table(result))
    for skill, ref in references.items():
        seg = ref["segments"][0]
        print(
            f"{skill} alone at {SKILLS[skill]['command']} for all {args.steps} steps (no switching): "
            f"vx {seg['vx']:+.3f}, vy {seg['vy']:+.3f}, yaw rate {seg['wz']:+.3f}, "
            f"return {ref['return_mean']:.2f}, falls {ref['falls']}/{args.envs}, "
            f"length {ref['length_mean']:.1f}"
        )
    print(
        f"return {result['return_mean']:.2f} +- {result['return_std']:.2f}, "
        f"length {result['length_mean']:.1f}, "
        f"falls {result['falls']}/{args.envs}; rollout {result['rollout_s']:.1f} s (compilation included), "
        f"total {time.time() - start:.0f} s"
    )
    write_json(
        out / "results.json",
        {
            "machine": info,
            "args": vars(args),
            "runs": runs,
            "training": training,
            **result,
            "references": references,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
