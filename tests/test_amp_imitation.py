"""End to end, small: a PPO expert balances inverted_pendulum, `strl_jax.collect` records it, and
APPO trained on the style reward alone (`task_reward_lerp: 0`) from a fresh policy learns to move
like it. bench/amp_imitation.py runs the full-size version (hopper; BENCHMARKS.md)."""

from __future__ import annotations

import numpy as np
import pytest

from strl_jax.buffers.motion_files import trajectory_files
from strl_jax.collect import main as collect_main
from strl_jax.configs.loader import resolve_config
from strl_jax.train_loops.runner import train

EPISODE = 200
COMMON = [
    f"env.episode_length={EPISODE}",
    "env.num_envs=128",
    "runner.num_steps_per_env=16",
    "runner.num_eval_envs=16",
    "runner.normalizer_until=4e4",
    "runner.save_interval=0",
    "runner.print_interval=1000",
]
COMPONENTS = "joint_pos,joint_vel"  # pole angle and angular velocity (the cart's slider is the root)


def collect(run, out) -> list[np.ndarray]:
    args = [str(run), "--out", str(out), "--num_envs", "16", "--min_timesteps", "1600",
            "--amp_obs_components", COMPONENTS]  # fmt: skip
    assert collect_main(args) == 0
    return [np.load(p)["amp_obs"] for p in trajectory_files(out)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("imitation")
    # the teacher settings of tests/test_teacher_student.py: balances all 200 steps
    expert = ["seed=4", "runner.max_iterations=30", "runner.eval_interval=30"]
    expert_cfg = resolve_config("inverted_pendulum_teacher", overrides=[*COMMON, *expert])
    train(expert_cfg, root / "expert", verbose=False)
    expert_frames = collect(root / "expert", root / "demo")
    appo = [
        "algorithm.class_name=APPO",
        f"algorithm.amp_motion_files=[{root / 'demo'}]",
        f"env.amp_obs_components=[{COMPONENTS}]",
        "policy.amp_discriminator.hidden_dims=[64, 64]",
        "policy.amp_discriminator.task_reward_lerp=0.0",
        "runner.max_iterations=30",
        "runner.eval_interval=10",
    ]
    appo_cfg = resolve_config("inverted_pendulum", overrides=[*COMMON, *appo])
    result = train(appo_cfg, root / "appo", verbose=False)
    untrained = ["runner.max_iterations=1", "algorithm.learning_rate=0.0", "algorithm.schedule=fixed"]
    train(resolve_config("inverted_pendulum", overrides=[*COMMON, *untrained]), root / "fresh", verbose=False)
    return {
        "expert": expert_frames,
        "appo": collect(root / "appo", root / "demo_appo"),
        "fresh": collect(root / "fresh", root / "demo_fresh"),
        "rows": result.rows,
    }


def w1(x: np.ndarray, y: np.ndarray) -> float:
    q = (np.arange(256) + 0.5) / 256
    return float(np.mean(np.abs(np.quantile(x, q) - np.quantile(y, q))))


def test_style_reward_alone_imitates_the_expert(runs):
    lengths = {k: np.mean([len(f) - 1 for f in runs[k]]) for k in ("expert", "appo", "fresh")}
    assert lengths["expert"] == EPISODE
    # the style reward alone teaches balancing: far longer episodes than the untrained policy
    assert lengths["appo"] >= 0.75 * EPISODE and lengths["appo"] > 2.5 * lengths["fresh"], lengths
    # and the pole-angle distribution is much closer to the expert's than the untrained one's
    angle = {k: np.concatenate(runs[k])[:, 0] for k in ("expert", "appo", "fresh")}
    near, far = w1(angle["appo"], angle["expert"]), w1(angle["fresh"], angle["expert"])
    assert near < 0.5 * far, (near, far)
    # the discriminator tells fewer of the policy's transitions from the expert's: towards chance
    policy_acc = [r["discriminator_accuracy_policy"] for r in runs["rows"]]
    assert np.mean(policy_acc[-5:]) < min(0.7, max(policy_acc[:10])), policy_acc
