"""Do two versions of strl_jax write the same metrics for the same seeds?

A refactor of the learner must not change a single number. This script trains short, seeded runs
on the pendulum (with checkpoints and evaluation) of PPO, a recurrent PPO, TPPO, Distillation,
APPO, ATPPO, EstimatorPPO, EstimatorTPPO, an encoder policy (EncoderActorCritic), PPO with RND,
PPO with symmetry augmentation and the mirror loss, a population of two members and two-stage
training (pretraining on a dataset, then RL; also with the imitation term carried into the RL
iterations), plus PPO on MuJoCo Playground's Go1JoystickFlatTerrain (domain randomisation,
privileged critic, locomotion evaluation; needs the `playground` extra; `--only NAME ...` picks
runs), and writes each run's metrics.jsonl under `--out` (a population: one per member). The
teacher, the motion dataset and the pretraining dataset come from `--assets`, made once
(`prepare`) so both versions learn from the same files. `compare` then checks two such folders
value by value, times aside.

    python bench/metrics_identity.py prepare --assets /tmp/ident_assets
    python bench/metrics_identity.py run --assets /tmp/ident_assets --out /tmp/before
    (change the code)
    python bench/metrics_identity.py run --assets /tmp/ident_assets --out /tmp/after
    python bench/metrics_identity.py compare /tmp/before /tmp/after
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

TIME_KEYS = ("wall_time", "fps", "iteration_time", "collection_time", "learning_time")
COMMON = [
    "env.episode_length=200",
    "env.num_envs=64",
    "runner.num_eval_envs=8",
    "runner.max_iterations=6",
    "runner.eval_interval=3",
    "runner.save_interval=3",
    "runner.print_interval=1000",
    "seed=3",
]
SMALL_MLP = ["policy.actor_hidden_dims=[32, 32]", "policy.critic_hidden_dims=[32, 32]"]
SMALL_RNN = ["policy.rnn_hidden_size=16", "policy.actor_hidden_dims=[16]", "policy.critic_hidden_dims=[16]"]


def runs(assets: Path) -> dict[str, tuple[str, list[str]]]:
    teacher = f"algorithm.teacher_policy.checkpoint={assets / 'teacher'}"
    amp = [
        f"algorithm.amp_motion_files=[{assets / 'demo'}]",
        "env.amp_obs_components=[joint_pos,joint_vel]",
        "policy.amp_discriminator.hidden_dims=[32, 32]",
        "policy.amp_discriminator.task_reward_lerp=0.3",
        "algorithm.amp_replay_buffer_size=1000",
    ]
    return {
        "ppo": ("inverted_pendulum", SMALL_MLP),
        "recurrent_ppo": ("inverted_pendulum_pomdp", [*SMALL_RNN, "policy.rnn_type=gru"]),
        "tppo": ("inverted_pendulum_student_tppo", [*SMALL_RNN, teacher, "algorithm.update_times_scale=3"]),
        "distillation": (
            "inverted_pendulum_student_distillation",
            [*SMALL_RNN, teacher, "algorithm.gradient_length=7"],
        ),
        "appo": (
            "inverted_pendulum",
            [
                "algorithm.class_name=APPO",
                *amp,
                "algorithm.mimic_loss_coef=0.1",
                "algorithm.dagger_loss_coef=0.1",
            ],
        ),
        "atppo": (
            "inverted_pendulum",
            [*SMALL_MLP, "algorithm.class_name=ATPPO", *amp, teacher, "algorithm.teacher_act_prob=0.5"],
        ),
        "estimator_ppo": (
            "inverted_pendulum_estimator",
            [*SMALL_RNN, "policy.estimator_kwargs={hidden_sizes: [16], nonlinearity: elu}"],
        ),
        "estimator_tppo": (
            "inverted_pendulum_estimator",
            [
                *SMALL_RNN,
                "policy.estimator_kwargs={hidden_sizes: [16], nonlinearity: elu}",
                "algorithm.class_name=EstimatorTPPO",
                teacher,
                "algorithm.teacher_act_prob=0.5",
            ],
        ),
        "encoder_ppo": (
            "inverted_pendulum",
            [
                *SMALL_MLP,
                "env.obs_groups.policy={cart: [0], pole: [1], velocities: [2, 3]}",
                "env.obs_groups.critic={cart: [0], pole: [1], velocities: [2, 3]}",
                "policy.class_name=EncoderActorCritic",
                "policy.encoder_component_names=[velocities]",
                "policy.encoder_kwargs={hidden_sizes: [8], nonlinearity: ELU}",
                "policy.encoder_output_size=3",
                "policy.critic_encoder_component_names=[velocities]",
            ],
        ),
        "rnd": (
            "inverted_pendulum",
            [
                *SMALL_MLP,
                "algorithm.rnd_cfg={weight: 0.5, num_outputs: 4, predictor_hidden_dims: [8], "
                "target_hidden_dims: [8], state_normalization: true, reward_normalization: true, "
                "learning_rate: 0.005, weight_schedule: {mode: linear, initial_step: 4, final_step: 2000, "
                "final_value: 1.0}}",
            ],
        ),
        "symmetry": (
            "inverted_pendulum",
            [
                *SMALL_MLP,
                "algorithm.symmetry_cfg={use_data_augmentation: true, use_mirror_loss: true, "
                "mirror_loss_coeff: 0.5, data_augmentation_func: 'strl_jax.envs.symmetry:inverted_pendulum'}",
            ],
        ),
        "population": (
            "inverted_pendulum",
            [*SMALL_MLP, "runner.num_seeds=2", "algorithm.schedule=fixed"],
        ),
        "two_stage": (  # st_rl's pretraining values key by key; the next run takes the defaults
            "inverted_pendulum_teacher",
            [
                *SMALL_MLP,
                "runner.pretrain_iterations=3",
                f"runner.pretrain_dataset={{data_dir: {assets / 'dataset'}, dataset_loops: -1, "
                "imitation_loss_coef: 1.0, learning_rate: null, imitation_labels: actions}",
            ],
        ),
        "two_stage_rl_imitation": (
            "inverted_pendulum_teacher",
            [
                *SMALL_MLP,
                "runner.pretrain_iterations=3",
                f"runner.pretrain_dataset={{data_dir: {assets / 'dataset'}, dataset_loops: -1, "
                "rl_imitation_coef: 10, rl_imitation_iterations: 2}",
            ],
        ),
        "playground_go1": (
            "Go1JoystickFlatTerrain",
            [
                *SMALL_MLP,
                "env.num_envs=16",
                "runner.num_steps_per_env=8",
                "algorithm.num_mini_batches=2",
                "runner.num_eval_envs=4",
            ],  # fmt: skip
        ),
    }


def prepare(assets: Path) -> None:
    from strl_jax.collect import main as collect_main
    from strl_jax.configs.loader import resolve_config
    from strl_jax.runners.runner import train

    cfg = resolve_config(
        "inverted_pendulum_teacher",
        overrides=[*COMMON, "runner.max_iterations=10", "runner.save_interval=10", "runner.eval_interval=0"],
    )
    train(cfg, assets / "teacher", verbose=False)
    args = [str(assets / "teacher"), "--out", str(assets / "demo"), "--num_envs", "8",
            "--min_timesteps", "400", "--amp_obs_components", "joint_pos,joint_vel"]  # fmt: skip
    assert collect_main(args) == 0
    args = [str(assets / "teacher"), "--out", str(assets / "dataset"), "--num_envs", "8",
            "--min_timesteps", "800", "--sample_actions",
            "--amp_obs_components", "joint_pos,joint_vel"]  # fmt: skip
    assert collect_main(args) == 0


def run(assets: Path, out: Path, only: list[str] | None) -> None:
    from strl_jax.configs.loader import resolve_config
    from strl_jax.runners.runner import release_programs, train

    for name, (preset, overrides) in runs(assets).items():
        if only and name not in only:
            continue
        cfg = resolve_config(preset, overrides=[*COMMON, *overrides])
        train(cfg, out / name, verbose=False)
        release_programs()
        print(f"{name}: {out / name / 'metrics.jsonl'}", flush=True)


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def compare(before: Path, after: Path) -> int:
    failures = 0
    for path in sorted(before.rglob("metrics.jsonl")):  # a population: one file per member
        name = str(path.parent.relative_to(before))
        if not (after / name / "metrics.jsonl").is_file():
            print(f"{name}: not run")
            continue
        old, new = rows(path), rows(after / name / "metrics.jsonl")
        differ, added, missing = [], set(), set()
        for r_old, r_new in zip(old, new, strict=True):
            for key in r_old.keys() - set(TIME_KEYS):
                if key not in r_new:
                    missing.add(key)
                elif not same(r_old[key], r_new[key]):
                    differ.append((r_old["iteration"], key, r_old[key], r_new[key]))
            added |= r_new.keys() - r_old.keys()
        verdict = "identical" if not differ and not missing and len(old) == len(new) else "DIFFERENT"
        failures += verdict != "identical"
        print(f"{name}: {len(old)} rows, {verdict}" + (f"; new keys {sorted(added)}" if added else ""))
        for it, key, a, b in differ[:8]:
            print(f"    iteration {it} {key}: {a!r} -> {b!r}")
        if missing:
            print(f"    missing keys: {sorted(missing)}")
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--assets", type=Path, required=True)
    r = sub.add_parser("run")
    r.add_argument("--assets", type=Path, required=True)
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--only", nargs="*")
    c = sub.add_parser("compare")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    args = parser.parse_args(argv)
    if args.command == "prepare":
        prepare(args.assets)
        return 0
    if args.command == "run":
        run(args.assets, args.out, args.only)
        return 0
    return compare(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())
