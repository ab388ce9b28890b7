"""Does APPO imitate? Expert PPO -> demonstrations -> APPO with the style reward only.

1. Train a PPO expert on the task (or reuse `--expert RUN`).
2. `python -m strl_jax.collect` its deterministic motion (AMP frames of the task's components).
3. Train APPO from a fresh policy with `task_reward_lerp: 0`: the env's reward is never seen.
4. Baselines: the fresh (untrained) policy, and PPO trained on an "alive only" reward (the task's
   `--baseline-kwargs`, e.g. hopper without its forward-progress term), i.e. PPO without style.
5. Collect each policy's motion the same way and compare with the expert's: forward speed (the
   first component of `root_lin_vel` where the frame has it), the per-joint Wasserstein-1
   distance of joint angles, the episode length, and the discriminator's accuracies over APPO's
   last iterations.

    python bench/amp_imitation.py --task hopper --work /tmp/amp_hopper
    python bench/amp_imitation.py --task inverted_pendulum --components joint_pos,joint_vel \
        --expert-iterations 30 --appo-iterations 30 --work /tmp/amp_ip

Prints a table and writes `summary.json` under `--work`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from strl_jax.buffers.motion_files import trajectory_files
from strl_jax.collect import main as collect_main
from strl_jax.configs.loader import resolve_config
from strl_jax.envs.amp_obs import body_layout, component_size, resolve_components
from strl_jax.runners.runner import train


def motion_stats(dataset: Path, task: str, components: tuple[str, ...]) -> dict:
    """Forward speed, joint angles and episode lengths of a collected dataset."""
    frames = [np.load(p)["amp_obs"] for p in trajectory_files(dataset)]
    layout = body_layout(task)
    offsets, start = {}, 0
    for name in components:
        size = component_size(name, layout)
        offsets[name] = (start, start + size)
        start += size
    allf = np.concatenate(frames)
    # a trajectory of T steps has T + 1 frames (the last one: the state its last step reached)
    out = {"episodes": len(frames), "mean_episode_length": float(np.mean([len(f) - 1 for f in frames]))}
    if "root_lin_vel" in offsets:
        out["forward_speed"] = float(allf[:, offsets["root_lin_vel"][0]].mean())
    if "joint_pos" in offsets:
        a, b = offsets["joint_pos"]
        out["joint_pos"] = allf[:, a:b]
    return out


def wasserstein_1d(x: np.ndarray, y: np.ndarray, points: int = 512) -> float:
    """W1 between two samples via their quantile functions."""
    q = (np.arange(points) + 0.5) / points
    return float(np.mean(np.abs(np.quantile(x, q) - np.quantile(y, q))))


def joint_distance(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.mean([wasserstein_1d(a[:, j], b[:, j]) for j in range(a.shape[1])]))


def collect(run: Path, out: Path, components: tuple[str, ...], steps: int, envs: int) -> None:
    if out.exists():
        return
    args = [str(run), "--out", str(out), "--num_envs", str(envs), "--min_timesteps", str(steps),
            "--amp_obs_components", ",".join(components)]  # fmt: skip
    assert collect_main(args) == 0, f"collect from {run} failed"


def run(cfg_overrides: list[str], task: str, log_dir: Path) -> dict:
    if (log_dir / "checkpoints").is_dir():
        rows = [json.loads(line) for line in (log_dir / "metrics.jsonl").read_text().splitlines()]
        return {"rows": rows, "seconds": None}
    start = time.time()
    result = train(resolve_config(task, overrides=cfg_overrides), log_dir, verbose=False)
    return {"rows": result.rows, "seconds": time.time() - start}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="hopper")
    p.add_argument("--components", default=None, help="AMP frame components (default: the task's)")
    p.add_argument("--work", default="/tmp/strl_amp_imitation")
    p.add_argument("--expert", default=None, help="reuse this PPO run as the expert")
    p.add_argument("--expert-iterations", type=int, default=150)
    p.add_argument("--appo-iterations", type=int, default=200)
    p.add_argument("--baseline-iterations", type=int, default=None, help="default: --appo-iterations")
    p.add_argument(
        "--baseline-kwargs",
        default="forward_reward_weight=0.0",
        help="env_kwargs of the PPO-without-style baseline ('' to skip it)",
    )
    p.add_argument("--collect-steps", type=int, default=20000)
    p.add_argument("--collect-envs", type=int, default=64)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("overrides", nargs="*", help="config overrides for every run (num_envs etc.)")
    args = p.parse_args(argv)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    components = resolve_components(args.task, args.components.split(",") if args.components else None)
    common = [f"seed={args.seed}", "runner.save_interval=50", "runner.eval_interval=25", *args.overrides]
    timings = {}

    expert = Path(args.expert) if args.expert else work / "expert"
    if not args.expert:
        expert_overrides = [*common, f"runner.max_iterations={args.expert_iterations}"]
        timings["expert"] = run(expert_overrides, args.task, expert)
    collect(expert, work / "demo_expert", components, args.collect_steps, args.collect_envs)

    appo = work / "appo"
    appo_overrides = [
        *common,
        "algorithm.class_name=APPO",
        f"algorithm.amp_motion_files=[{work / 'demo_expert'}]",
        f"env.amp_obs_components=[{','.join(components)}]",
        "policy.amp_discriminator.task_reward_lerp=0.0",
        f"runner.max_iterations={args.appo_iterations}",
    ]
    timings["appo"] = run(appo_overrides, args.task, appo)
    collect(appo, work / "demo_appo", components, args.collect_steps, args.collect_envs)

    fresh = work / "fresh"
    # one iteration at learning rate 0: the initial params, saved as a checkpoint
    untrained = ["runner.max_iterations=1", "algorithm.learning_rate=0.0", "algorithm.schedule=fixed"]
    timings["fresh"] = run([*common, *untrained], args.task, fresh)
    collect(fresh, work / "demo_fresh", components, args.collect_steps, args.collect_envs)

    policies = {"expert (PPO, task reward)": "demo_expert", "APPO, style reward only": "demo_appo",
                "fresh policy": "demo_fresh"}  # fmt: skip
    if args.baseline_kwargs:
        kwargs = "{" + ", ".join(kv.replace("=", ": ") for kv in args.baseline_kwargs.split(",")) + "}"
        alive = work / "ppo_without_style"
        iterations = args.baseline_iterations or args.appo_iterations
        overrides = [*common, f"env.env_kwargs={kwargs}", f"runner.max_iterations={iterations}"]
        timings["ppo_without_style"] = run(overrides, args.task, alive)
        collect(alive, work / "demo_ppo_without_style", components, args.collect_steps, args.collect_envs)
        policies[f"PPO without style ({args.baseline_kwargs})"] = "demo_ppo_without_style"

    stats = {name: motion_stats(work / folder, args.task, components) for name, folder in policies.items()}
    ref = stats["expert (PPO, task reward)"]
    appo_rows = timings["appo"]["rows"]
    last = appo_rows[-10:]
    acc = {k: float(np.mean([r[k] for r in last])) for k in
           ("discriminator_accuracy_expert", "discriminator_accuracy_policy")}  # fmt: skip
    first_acc = {k: float(np.mean([r[k] for r in appo_rows[:5]])) for k in acc}
    print(f"\n{args.task}: components {list(components)}")
    print(f"{'policy':<48} {'fwd speed':>10} {'joint W1':>9} {'ep len':>8}")
    summary = {"task": args.task, "components": list(components), "policies": {}, "discriminator": {}}
    for name, s in stats.items():
        w1 = joint_distance(s["joint_pos"], ref["joint_pos"]) if "joint_pos" in s else float("nan")
        speed = s.get("forward_speed", float("nan"))
        print(f"{name:<48} {speed:>10.3f} {w1:>9.4f} {s['mean_episode_length']:>8.1f}")
        summary["policies"][name] = {"forward_speed": speed, "joint_w1_to_expert": w1,
                                     "mean_episode_length": s["mean_episode_length"]}  # fmt: skip
    print(f"discriminator accuracy, APPO first 5 iterations: {first_acc}; last 10: {acc}")
    summary["discriminator"] = {"first_5": first_acc, "last_10": acc}
    summary["seconds"] = {k: v["seconds"] for k, v in timings.items()}
    (work / "summary.json").write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
