"""The suite's seeded end-to-end learning runs, as functions of their seeds.

A seeded run lands elsewhere on another CPU model (XLA's fusions and float rounding differ), so
the tests assert only what holds across seeds and rounding variants: thresholds come from the
spread that `bench/learning_spread.py` measures over many seeds under both XLA:CPU flag settings
(BENCHMARKS.md, "Spread of the test suite's learning runs"). Tests and that script share these
functions, so what is measured is what is tested.
"""

from __future__ import annotations

import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from tiny_config import tiny

from strl_jax.buffers.motion_files import trajectory_files
from strl_jax.checkpoints.orbax_checkpoints import CHECKPOINT_DIR
from strl_jax.collect import main as collect_main
from strl_jax.configs.loader import resolve_config
from strl_jax.envs import make_env_from_config
from strl_jax.networks.normalizer import InputNormalization
from strl_jax.runners.learner_builder import make_learner
from strl_jax.runners.runner import build_programs, train
from strl_jax.train_loops.evaluation import deterministic_episodes

PENDULUM_EPISODE = 200
PENDULUM_COMMON = [
    f"env.episode_length={PENDULUM_EPISODE}",
    "env.num_envs=128",
    "runner.num_eval_envs=16",
    "runner.normalizer_until=4e4",
    "runner.save_interval=0",
    "runner.print_interval=1000",
]
# A full-state PPO expert of the 200-step pendulum, evaluated and saved every 10 iterations: the
# iteration at which a seed first balances for all 200 steps varies from 10 to 40, and some seeds
# fall back later, so the expert is the first checkpoint with the best evaluation.
EXPERT = [
    *PENDULUM_COMMON,
    "runner.num_steps_per_env=16",
    "runner.max_iterations=60",
    "runner.eval_interval=10",
    "runner.save_interval=10",
    "runner.max_checkpoints_to_keep=0",
]
EXPERT_SEED = 4
AMP_COMPONENTS = "joint_pos,joint_vel"  # pole angle and angular velocity (the cart's slider is the root)


def train_expert(root: Path, seed: int = EXPERT_SEED) -> tuple[Path, float]:
    """`(checkpoint folder, its deterministic eval return)` of a full-state PPO pendulum expert:
    the first checkpoint whose evaluation is the run's best."""
    cfg = resolve_config("inverted_pendulum_teacher", overrides=[*EXPERT, f"seed={seed}"])
    result = train(cfg, root, verbose=False)
    evals = [(r["eval_reward"], -r["iteration"]) for r in result.rows if "eval_reward" in r]
    best, iteration = max(evals)
    return root / CHECKPOINT_DIR / str(-iteration), float(best)


def collect_frames(run: Path, out: Path) -> list[np.ndarray]:
    """Record the run's mean-action episodes (16 envs, >= 1600 steps); one AMP-frame array each."""
    args = [str(run), "--out", str(out), "--num_envs", "16", "--min_timesteps", "1600",
            "--amp_obs_components", AMP_COMPONENTS]  # fmt: skip
    assert collect_main(args) == 0
    return [np.load(p)["amp_obs"] for p in trajectory_files(out)]


def w1(x: np.ndarray, y: np.ndarray) -> float:
    """Wasserstein-1 distance of two 1-d samples, from 256 quantiles."""
    q = (np.arange(256) + 0.5) / 256
    return float(np.mean(np.abs(np.quantile(x, q) - np.quantile(y, q))))


APPO_ITERATIONS = 60


def style_imitation(
    root: Path, expert_dir: Path, seed: int = 1, at: tuple[int, ...] = (APPO_ITERATIONS,)
) -> dict:
    """APPO on the style reward alone (`task_reward_lerp: 0`) imitating the expert's recorded
    motion, and an untrained policy for comparison, after each iteration count in `at`: mean
    episode lengths and pole-angle W1 distances to the expert (`near`: APPO, `far`: untrained),
    plus the APPO run's rows."""
    common = [*PENDULUM_COMMON, "runner.num_steps_per_env=16", f"seed={seed}"]
    expert = collect_frames(expert_dir, root / "demo")
    appo = [
        "algorithm.class_name=APPO",
        f"algorithm.amp_motion_files=[{root / 'demo'}]",
        f"env.amp_obs_components=[{AMP_COMPONENTS}]",
        "policy.amp_discriminator.hidden_dims=[64, 64]",
        "policy.amp_discriminator.task_reward_lerp=0.0",
        f"runner.max_iterations={max(at)}",
        "runner.eval_interval=10",
        f"runner.save_interval={math.gcd(*at)}",
        "runner.max_checkpoints_to_keep=0",
    ]
    result = train(
        resolve_config("inverted_pendulum", overrides=[*common, *appo]), root / "appo", verbose=False
    )
    untrained = ["runner.max_iterations=1", "algorithm.learning_rate=0.0", "algorithm.schedule=fixed"]
    train(resolve_config("inverted_pendulum", overrides=[*common, *untrained]), root / "fresh", verbose=False)
    fresh = collect_frames(root / "fresh", root / "demo_fresh")
    angle = lambda frames: np.concatenate(frames)[:, 0]
    length = lambda frames: float(np.mean([len(f) - 1 for f in frames]))
    out = {"expert_length": length(expert), "fresh_length": length(fresh), "rows": result.rows}
    out["far"] = w1(angle(fresh), angle(expert))
    for iteration in at:
        appo_frames = collect_frames(
            root / "appo" / CHECKPOINT_DIR / str(iteration), root / f"demo_appo_{iteration}"
        )
        out[iteration] = {"length": length(appo_frames), "near": w1(angle(appo_frames), angle(expert))}
    return out


def memory_vs_feedforward(root: Path, seed: int = 1) -> tuple[float, float]:
    """Best deterministic eval returns `(LSTM, MLP)` on the partially observed pendulum (the actor
    sees positions only), same budget: 60 iterations, as the LSTM takes off anywhere from
    iteration 20 to 50 depending on seed and rounding."""
    common = [f"seed={seed}", "runner.max_iterations=60", "runner.eval_interval=10", "runner.save_interval=0"]
    mlp = [
        "policy.class_name=ActorCritic",
        "policy.actor_hidden_dims=[64, 64]",
        "policy.critic_hidden_dims=[64, 64]",
    ]
    best = lambda result: max(r["eval_reward"] for r in result.rows if "eval_reward" in r)
    rnn = train(resolve_config("inverted_pendulum_pomdp", overrides=common), root / "rnn", verbose=False)
    ff = train(
        resolve_config("inverted_pendulum_pomdp", overrides=[*common, *mlp]), root / "mlp", verbose=False
    )
    return best(rnn), best(ff)


STUDENT = [
    *PENDULUM_COMMON,
    "runner.num_steps_per_env=24",
    "policy.rnn_hidden_size=32",
    "policy.actor_hidden_dims=[32]",
    "policy.critic_hidden_dims=[32]",
    "runner.max_iterations=25",
    "runner.eval_interval=5",
]
STUDENTS = {
    # episodes end (and masks are redrawn) every ~8 iterations: a short schedule hands over sooner
    "inverted_pendulum_student_tppo": ["algorithm.update_times_scale=5"],
    "inverted_pendulum_student_distillation": [],
}


def student_cfg(preset: str, teacher_dir: Path, *overrides: str):
    """A student preset (actor: positions only, LSTM) learning from the expert in `teacher_dir`."""
    overrides = [
        *STUDENT,
        *STUDENTS[preset],
        f"algorithm.teacher_policy.checkpoint={teacher_dir}",
        *overrides,
    ]
    return resolve_config(preset, overrides=overrides)


def teacher_return_on_student_env(teacher_dir: Path) -> float:
    """The teacher's deterministic return on the students' env (16 envs)."""
    cfg = student_cfg("inverted_pendulum_student_tppo", teacher_dir)
    (part,) = build_programs(cfg).learner.parts
    teacher, env = part.teacher, make_env_from_config(cfg.env, 16)

    def episodes(state, key):
        act = lambda obs, hidden: teacher.actor.act(state.params, state.normalizers, obs, hidden)  # noqa: E731
        return deterministic_episodes(env, act, teacher.initial_hidden(env.num_envs), key)

    result = jax.jit(episodes)(teacher.initial_state, jax.random.PRNGKey(7))
    return float(result["episode_reward"])


def pendulum_balance(root: Path, seed: int = 1) -> list[float]:
    """Deterministic eval returns (every 10 iterations) of the default `inverted_pendulum` preset:
    1024 envs x 16 steps, 100 iterations, 1000-step episodes."""
    cfg = resolve_config("inverted_pendulum", overrides=["runner.eval_interval=10", f"seed={seed}"])
    result = train(cfg, root, verbose=False)
    return [r["eval_reward"] for r in result.rows if "eval_reward" in r]


# One short run of the 200-step pendulum with brax's tanh-squashed Gaussian (tests/test_tanh_gaussian.py:
# it learns, resumes exactly and exports as tanh(mean)).
TANH_LEARN = [
    "policy.distribution=tanh_gaussian",
    "env.episode_length=200",
    "env.num_envs=64",
    "runner.num_eval_envs=8",
    "policy.actor_hidden_dims=[32]",
    "policy.critic_hidden_dims=[32]",
    "runner.num_steps_per_env=16",
    "runner.max_iterations=60",
    "runner.eval_interval=10",
    "runner.save_interval=20",
    "runner.max_checkpoints_to_keep=0",
    "runner.print_interval=1000",
]


def tanh_config(seed: int = 1):
    return resolve_config("inverted_pendulum", overrides=[*TANH_LEARN, f"seed={seed}"])


def tanh_returns(result) -> list[float]:
    """The sampled policy's training return per iteration (deterministic evaluations are a poor
    signal on the 200-step pendulum: the untrained mean action already balances 40-115 steps)."""
    return [r["mean_reward"] for r in result.rows if r["mean_reward"] is not None]


def tanh_gaussian_run(root: Path, seed: int = 1):
    """The tanh-Gaussian pendulum run (60 iterations), its `TrainResult`."""
    return train(tanh_config(seed), root, verbose=False)


# EstimatorPPO on the pendulum whose velocities the actor never measures (tests/test_estimator_training.py).
ESTIMATOR_K = 6
ESTIMATOR = tiny(
    "env.num_envs=32",
    "policy.rnn_hidden_size=8",
    "policy.estimator_kwargs={hidden_sizes: [16], nonlinearity: elu}",
    "algorithm.learning_rate=3e-3",
    "algorithm.num_learning_epochs=5",
    "algorithm.num_mini_batches=4",
    "runner.num_steps_per_env=16",
    f"runner.eval_interval={ESTIMATOR_K}",
    f"runner.save_interval={ESTIMATOR_K}",
)


def estimator_config(*overrides: str):
    return resolve_config("inverted_pendulum_estimator", overrides=[*ESTIMATOR, *overrides])


def estimator_errors(cfg, result) -> list[float]:
    """Mean squared error (critic-normalised units) of the initial and of the trained estimator on
    one rollout of the trained policy: the same data for both, so RL's drifting data cannot hide
    or fake progress."""
    learner = make_learner(make_env_from_config(cfg.env), cfg)
    initial, _ = jax.jit(learner.init)(jax.random.PRNGKey(cfg.seed))
    ts = result.train_state
    _, tr, _ = jax.jit(learner.rollout)(ts, result.rollout_state, jax.random.PRNGKey(7))
    nobs = InputNormalization().groups(ts.normalizers, tr.obs)
    resets = jnp.concatenate([jnp.zeros_like(tr.dones[:1]), tr.dones[:-1]])
    units = learner.model.units(ts.normalizers)
    target = nobs["critic"][..., 2:4]
    errors = []
    for params in (initial.params, ts.params):
        _, _, _, est = learner.model.sequence(params, nobs, tr.initial_hidden, resets, tr.draws, units)
        errors.append(float(jnp.mean(jnp.square(est["estimator"] - target))))
    return errors


def estimator_run_config(seed: int = 1):
    """EstimatorPPO, 2K iterations straight."""
    return estimator_config(f"runner.max_iterations={2 * ESTIMATOR_K}", f"seed={seed}")


def estimator_error_ratio(root: Path, seed: int = 1) -> dict:
    """The trained estimator's error over the initial one's, after `estimator_run_config`'s run."""
    cfg = estimator_run_config(seed)
    initial, trained = estimator_errors(cfg, train(cfg, root, verbose=False))
    return {"initial": initial, "trained": trained, "ratio": trained / initial}
