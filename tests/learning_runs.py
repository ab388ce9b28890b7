"""The suite's seeded end-to-end learning runs, as functions of their seeds.

A seeded run lands elsewhere on another CPU model (XLA's fusions and float rounding differ), so
the tests assert only what holds across seeds and rounding variants: thresholds come from the
spread that `bench/learning_spread.py` measures over many seeds under both XLA:CPU flag settings
(BENCHMARKS.md, "Spread of the test suite's learning runs"). Tests and that script share these
functions, so what is measured is what is tested.
"""

from __future__ import annotations

import contextlib
import functools
import math
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from tiny_config import tiny

from strl_jax.agents.algorithms import PARTS
from strl_jax.buffers.motion_files import trajectory_files
from strl_jax.buffers.rollout_dataset import load_dataset_arrays
from strl_jax.checkpoints.orbax_checkpoints import CHECKPOINT_DIR
from strl_jax.collect import main as collect_main
from strl_jax.configs.loader import resolve_config
from strl_jax.envs import make_env_from_config
from strl_jax.inference import load_policy
from strl_jax.networks.normalizer import InputNormalization
from strl_jax.plot import read_metrics
from strl_jax.runners.learner_builder import make_learner
from strl_jax.runners.members import run_keys
from strl_jax.runners.runner import build_programs, train
from strl_jax.static_take import take_static
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
    episode lengths and W1 distances to the expert of the pole's angle (`near`: APPO, `far`:
    untrained) and of its angular velocity (`near_velocity`, `far_velocity`), plus the APPO run's
    rows."""
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
    velocity = lambda frames: np.concatenate(frames)[:, 1]
    length = lambda frames: float(np.mean([len(f) - 1 for f in frames]))
    out = {"expert_length": length(expert), "fresh_length": length(fresh), "rows": result.rows}
    out["far"] = w1(angle(fresh), angle(expert))
    out["far_velocity"] = w1(velocity(fresh), velocity(expert))
    for iteration in at:
        appo_frames = collect_frames(
            root / "appo" / CHECKPOINT_DIR / str(iteration), root / f"demo_appo_{iteration}"
        )
        out[iteration] = {
            "length": length(appo_frames),
            "near": w1(angle(appo_frames), angle(expert)),
            "near_velocity": w1(velocity(appo_frames), velocity(expert)),
        }
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


def estimator_error(learner, params, normalizers, transitions) -> float:
    """Mean squared error of the policy's `estimator` stage over a stored rollout, against its
    target components of the critic observation, both in the units of `normalizers` (the loss's)."""
    nobs = InputNormalization().groups(normalizers, transitions.obs)
    resets = jnp.concatenate([jnp.zeros_like(transitions.dones[:1]), transitions.dones[:-1]])
    units = learner.model.units(normalizers)
    (stage,) = [s for s in learner.model.stages if s.name == "estimator"]
    _, _, _, est = learner.model.sequence(
        params, nobs, transitions.initial_hidden, resets, transitions.draws, units
    )
    return float(jnp.mean(jnp.square(est["estimator"] - take_static(nobs["critic"], stage.target_idx))))


def estimator_errors(cfg, result) -> list[float]:
    """Mean squared error (critic-normalised units) of the initial and of the trained estimator on
    one rollout of the trained policy: the same data for both, so RL's drifting data cannot hide
    or fake progress."""
    learner = make_learner(make_env_from_config(cfg.env), cfg)
    initial, _ = jax.jit(learner.init)(jax.random.PRNGKey(cfg.seed))
    ts = result.train_state
    _, tr, _ = jax.jit(learner.rollout)(ts, result.rollout_state, jax.random.PRNGKey(7))
    return [estimator_error(learner, params, ts.normalizers, tr) for params in (initial.params, ts.params)]


def estimator_run_config(seed: int = 1):
    """EstimatorPPO, 2K iterations straight."""
    return estimator_config(f"runner.max_iterations={2 * ESTIMATOR_K}", f"seed={seed}")


def estimator_error_ratio(root: Path, seed: int = 1) -> dict:
    """The trained estimator's error over the initial one's, after `estimator_run_config`'s run."""
    cfg = estimator_run_config(seed)
    initial, trained = estimator_errors(cfg, train(cfg, root, verbose=False))
    return {"initial": initial, "trained": trained, "ratio": trained / initial}


# The "Your own robot" example (examples/custom_robot/, tests/test_custom_robot_example.py): Strider
# trained by entry point at test sizes, its estimator of the base velocity checked on fixed data.
REPO = Path(__file__).resolve().parents[1]
STRIDER_CONFIG = "examples/custom_robot/strider.yaml"
STRIDER_SMALL = [
    "--num_envs",
    "4",
    "--quiet",
    "policy.actor_hidden_dims=[16]",
    "policy.critic_hidden_dims=[16]",
    "policy.estimator_kwargs.hidden_sizes=[8]",
    "runner.num_steps_per_env=8",
    "algorithm.num_mini_batches=2",
    "algorithm.num_learning_epochs=1",
    "runner.eval_interval=10",
    "runner.num_eval_envs=2",
    "runner.save_interval=10",
    "env.episode_length=100",
]
STRIDER_ITERATIONS = 20
STRIDER_DATA_ROLLOUTS = 4  # the fixed data: the untrained policy's first 4 rollouts (4 envs x 32 steps)


def train_strider(out: Path, *overrides: str) -> subprocess.CompletedProcess:
    """`python -m strl_jax.train --config examples/custom_robot/strider.yaml` at test sizes into
    `out`, run from the repository root (the entry point's module is imported from the working
    folder)."""
    command = [sys.executable, "-m", "strl_jax.train", "--config", STRIDER_CONFIG,
               "--max_iterations", str(STRIDER_ITERATIONS), "--log_dir", str(out), *STRIDER_SMALL,
               *overrides]  # fmt: skip
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=1800)


def strider_estimator_errors(run: Path, checkpoint: int | None = None) -> dict:
    """The estimator's error (`estimator_error`) before training and at the run's newest (or the
    given) checkpoint, on the same data: the untrained policy's first rollouts from the run's own
    initial state (the runner's init program and key), in the units of the checkpoint's
    normalisers, so only the estimator's parameters differ."""
    loaded = load_policy(run, checkpoint)
    programs = build_programs(loaded.cfg)
    learner = programs.learner
    initial, rollout_state = programs.init(run_keys(loaded.cfg)[0])
    rollout = jax.jit(learner.rollout)
    errors = np.zeros(2)
    for key in jax.random.split(jax.random.PRNGKey(7), STRIDER_DATA_ROLLOUTS):
        rollout_state, transitions, _ = rollout(initial, rollout_state, key)
        for i, params in enumerate((initial.params, loaded.params)):
            errors[i] += estimator_error(learner, params, loaded.normalizers, transitions)
    initial_error, trained = errors / STRIDER_DATA_ROLLOUTS
    return {"initial": initial_error, "trained": trained, "ratio": trained / initial_error}


def strider_estimator_run(root: Path, seed: int = 1) -> dict:
    """`strider_estimator_errors` after `train_strider` with `seed`."""
    done = train_strider(root / "strider", f"seed={seed}")
    assert done.returncode == 0, done.stderr[-3000:]
    return strider_estimator_errors(root / "strider")


# The mirror loss on the pendulum (tests/test_symmetry.py).
MIRROR_LOSS = (
    "algorithm.symmetry_cfg={{data_augmentation_func: 'strl_jax.envs.symmetry:inverted_pendulum', "
    "use_data_augmentation: false, use_mirror_loss: {on}, mirror_loss_coeff: 10.0}}"
)


def mirror_loss_rows(root: Path, seed: int = 1, mirror_loss: bool = True) -> list[dict]:
    """Four iterations of the tiny inverted_pendulum run with the mirror loss (no augmentation,
    whose mirrored samples would make the policy symmetric by themselves) and no observation
    normaliser: its rows, whose `symmetry` is the policy's mirror error (`mirror_loss=False`: the
    loss only logged, not trained)."""
    overrides = tiny(
        MIRROR_LOSS.format(on=str(mirror_loss).lower()),
        "runner.max_iterations=4",
        "runner.empirical_normalization=false",
        "algorithm.num_learning_epochs=8",
        f"seed={seed}",
    )
    return train(resolve_config("inverted_pendulum", overrides=overrides), root, verbose=False).rows


# APPO's discriminator steps (tests/test_appo.py): a demo recorded from a one-iteration PPO run.
APPO_TINY = tiny("env.episode_length=1000", "runner.num_steps_per_env=16")
DISCRIMINATOR_STEPS = 2 * 2  # the tiny run's epochs x minibatches


def appo_demo(root: Path) -> Path:
    """`root`, holding a one-iteration PPO run (`expert`) and its sampled episodes (`demo`)."""
    cfg = resolve_config("inverted_pendulum", overrides=[*APPO_TINY, "runner.max_iterations=1"])
    train(cfg, root / "expert", verbose=False)
    code = collect_main([
        str(root / "expert"), "--out", str(root / "demo"), "--num_envs", "8",
        "--amp_obs_components", AMP_COMPONENTS, "--min_timesteps", "64", "--sample_actions",
    ])  # fmt: skip
    assert code == 0
    return root


def appo_cfg(demo: Path, *overrides: str, algorithm: str = "APPO"):
    """The tiny pendulum run as APPO (or ATPPO) on `appo_demo`'s episodes."""
    return resolve_config(
        "inverted_pendulum",
        overrides=[
            *APPO_TINY,
            f"algorithm.class_name={algorithm}",
            f"algorithm.amp_motion_files=[{demo / 'demo'}]",
            f"env.amp_obs_components=[{AMP_COMPONENTS}]",
            "policy.amp_discriminator.hidden_dims=[32, 16]",
            "algorithm.amp_replay_buffer_size=512",
            *overrides,
        ],
    )


def appo_learner(demo: Path, seed: int = 0) -> tuple:
    """`(learner, train state, rollout state)`: APPO with task-reward lerp 0.25, initialised from `seed`."""
    learner = build_programs(appo_cfg(demo, "policy.amp_discriminator.task_reward_lerp=0.25")).learner
    return (learner, *jax.jit(learner.init)(jax.random.PRNGKey(seed)))


def discriminator_step(learner, train_state, rollout_state) -> dict:
    """One APPO iteration from copies of the states: the new states, the logged scalars, each
    discriminator weight's absolute change and the sum of the iteration's step rates (the policy's
    adaptive schedule raises the rate by 1.5 before each of its `DISCRIMINATOR_STEPS` steps while
    the KL stays low; Adam moves a weight by about the rate per step while its gradient keeps its
    sign)."""
    fresh = jax.tree.map(jnp.copy, (train_state, rollout_state))
    new_ts, new_rs, metrics = jax.jit(learner.iteration)(*fresh)
    rate = float(metrics["scalars"]["learning_rate"])
    before, after = train_state.parts["amp"].params, new_ts.parts["amp"].params
    pairs = zip(jax.tree.leaves(after), jax.tree.leaves(before), strict=True)
    return {
        "train_state": new_ts,
        "rollout_state": new_rs,
        "scalars": metrics["scalars"],
        "change": np.concatenate([np.abs(np.asarray(a - b)).ravel() for a, b in pairs]),
        "rates": rate * sum(1.5**-k for k in range(DISCRIMINATOR_STEPS)),
    }


def discriminator_steps(root: Path, seed: int = 0) -> dict:
    """`discriminator_step` of `appo_learner(seed)`: median and largest weight change over the rates' sum."""
    step = discriminator_step(*appo_learner(appo_demo(root), seed))
    rate = float(step["scalars"]["learning_rate"])
    return {
        "median": float(np.median(step["change"]) / step["rates"]),
        "largest": float(step["change"].max() / step["rates"]),
        "rate_over_grown": rate / (1e-3 * 1.5**DISCRIMINATOR_STEPS),
    }


# hopper_gpu's learner settings on the pendulum (tests/test_gpu_presets.py).
def readme_cpu_overrides(task: str) -> list[str]:
    """The README's CPU-size arguments of `task`'s GPU preset (bench/brax_presets.py) as dotted overrides."""
    if str(REPO / "bench") not in sys.path:
        sys.path.insert(0, str(REPO / "bench"))
    import brax_presets  # bench/ is no package: importable once on the path

    flags = {"--num_envs": "env.num_envs", "--max_iterations": "runner.max_iterations"}
    out = []
    for arg in brax_presets.cpu_overrides(task):
        flag, _, value = arg.partition(" ")
        out.append(f"{flags[flag]}={value}" if flag in flags else arg)
    return out


def gpu_preset_iteration(root: Path, seed: int = 1) -> tuple:
    """`(config, its one metrics row)`: hopper_gpu's learner settings at the README CPU size
    shrunk to 32 envs (one whole rollout per minibatch), one iteration on inverted_pendulum."""
    overrides = [
        *readme_cpu_overrides("hopper"),
        "env.task=inverted_pendulum",
        "env.num_envs=32",
        "env.episode_length=20",
        "runner.max_iterations=1",
        "runner.eval_interval=0",
        "runner.print_interval=1000",
        f"seed={seed}",
    ]
    cfg = resolve_config("hopper_gpu", overrides=overrides)
    (row,) = train(cfg, log_dir=root, verbose=False).rows
    return cfg, row


# A part defined in a test file (tests/test_parts.py's `RewardPredictor`), trained.
PART_ITERATIONS = 4


@contextlib.contextmanager
def own_part_registered() -> Iterator[None]:
    """tests/test_parts.py's part in `PARTS` while the block runs (its row is the test file's own)."""
    from test_parts import ROW  # the test modules import this one: theirs load when a scenario runs

    before = PARTS.get("reward_predictor")
    PARTS["reward_predictor"] = ROW
    try:
        yield
    finally:
        if before is None:
            del PARTS["reward_predictor"]
        else:
            PARTS["reward_predictor"] = before


def own_part_config(seed: int = 1, iterations: int = PART_ITERATIONS):
    """The tiny pendulum run with the part, its weight from `algorithm.parts.reward_predictor`."""
    from test_parts import OWN

    overrides = [*OWN, f"runner.max_iterations={iterations}", f"seed={seed}"]
    return resolve_config("inverted_pendulum", overrides=overrides)


def own_part_run(root: Path, seed: int = 1):
    """`own_part_config` trained straight, its `TrainResult`."""
    with own_part_registered():
        return train(own_part_config(seed), root, verbose=False)


# DAgger through st_rl TPPO's rollout history (tests/test_update_options.py): a student of a
# teacher written without training (tests/test_tppo.py's `write_teacher`).
DAGGER_ITERATIONS = 20


def dagger_teacher(path: Path) -> Path:
    """`path`, holding tests/test_tppo.py's teacher (parameters and normalisers, no training)."""
    from test_tppo import write_teacher

    path.mkdir(parents=True, exist_ok=True)
    write_teacher(path)
    return path


def dagger_config(teacher_dir: Path, *overrides: str):
    """The TPPO student preset at tests/test_tppo.py's size, DAgger only (no PPO loss)."""
    from test_tppo import TINY

    return resolve_config(
        "inverted_pendulum_student_tppo",
        overrides=[
            *TINY,
            "policy.rnn_hidden_size=8",
            f"algorithm.teacher_policy.checkpoint={teacher_dir}",
            "algorithm.using_ppo=false",
            *overrides,
        ],
    )


def imitation_error(learner, train_state, params, stored) -> jax.Array:
    """Mean L2 distance of the student's action means (`params`, with `train_state`'s normaliser)
    to the teacher's labels over one rollout the history stores (leaves `[T, N, 1, ...]`)."""
    rollout = jax.tree.map(lambda x: x[:, :, 0], stored)
    nobs = learner.normalization.groups(train_state.normalizers, rollout.obs)
    mean = learner.model.sequence(params, nobs, rollout.hidden, rollout.resets)[0]
    (labels,) = [fields["action_labels"] for fields in rollout.parts.values() if "action_labels" in fields]
    return jnp.mean(jnp.linalg.norm(mean - labels, axis=-1))


def dagger_run(teacher_dir: Path, recurrent: bool, seed: int = 0) -> dict:
    """`buffer_dilation_ratio=2` (every update's batch holds this rollout and the one before) at a
    fixed rate, `DAGGER_ITERATIONS` iterations from the learner's key `seed`: the trained and the
    untrained student's `imitation_error` on the first rollout (as the history kept it after
    iteration 1), with that history, how full it was, the next one and the first observation."""
    extra = [] if recurrent else ["policy.class_name=ActorCritic"]
    cfg = dagger_config(teacher_dir, "algorithm.buffer_dilation_ratio=2", "algorithm.schedule=fixed", *extra)
    learner = make_learner(make_env_from_config(cfg.env), cfg)
    initial, rs = jax.jit(learner.init)(jax.random.PRNGKey(seed))
    step = jax.jit(learner.iteration)
    first_obs = rs.obs["policy"]
    ts, rs, _ = step(initial, rs)
    kept, filled = rs.history.batch, int(rs.history.filled)
    ts, rs, _ = step(ts, rs)
    second = rs.history.batch
    for _ in range(DAGGER_ITERATIONS - 2):
        ts, rs, _ = step(ts, rs)
    error = jax.jit(functools.partial(imitation_error, learner, ts))
    trained, untrained = (float(error(params, kept)) for params in (ts.params, initial.params))
    return {"cfg": cfg, "first_obs": first_obs, "kept": kept, "filled": filled, "second": second,
            "trained": trained, "untrained": untrained}  # fmt: skip


# Pretraining's defaults on a synthetic dataset (tests/test_two_stage.py).
def pretraining_run(root: Path, seed: int = 1) -> dict:
    """Eight pretraining iterations of the tiny pendulum run on 16 synthetic trajectories of 8
    steps (tests/test_two_stage.py's `write_dataset`, with mean actions the opposite of the
    actions), each iteration replaying the same 128 steps (16 envs x 8 steps), so the rows compare:
    the configs with the default settings (`head_start`) and with `defaults: st_rl`, the
    dataset's actions and the `head_start` run's rows."""
    from test_two_stage import settings, write_dataset

    data = root / "data"
    base = tiny("runner.max_iterations=8", "runner.max_checkpoints_to_keep=0")
    base += [
        "algorithm.num_learning_epochs=5",
        "algorithm.num_mini_batches=4",
        "runner.pretrain_iterations=8",
        f"seed={seed}",
    ]
    head_start, st_rl = (
        resolve_config("inverted_pendulum", overrides=[*base, f"runner.pretrain_dataset={{{raw}}}"])
        for raw in (f"data_dir: {data}, dataset_loops: -1", f"data_dir: {data}, defaults: st_rl")
    )
    env = build_programs(head_start).env
    shape = env.observation_shapes()["policy"]
    write_dataset(data, shape[0], env.action_size, lengths=[8] * 16, mean_actions=True)
    actions = np.asarray(load_dataset_arrays(settings(data), {"policy": shape}, env.action_size, 0).actions)
    rows = train(head_start, root / "run", verbose=False).rows
    return {"head_start": head_start, "st_rl": st_rl, "actions": actions, "rows": rows}


# The pulls towards a synthetic dataset's labels (tests/test_two_stage.py): the tiny pendulum run,
# 12 trajectories of 5 steps whose mean actions are the opposite of their actions.
PULL_OBS, PULL_ACTIONS = (4,), 1


def two_stage_overrides(root: Path, seed: int = 1) -> list[str]:
    """Writes the dataset to `root / "data"` and returns the run's overrides: 4 pretraining
    iterations over it (used up during the third), then 2 RL iterations."""
    from test_two_stage import write_dataset

    base = tiny("runner.max_iterations=6", "runner.eval_interval=0", "runner.max_checkpoints_to_keep=0")
    base.append(f"seed={seed}")
    write_dataset(root / "data", PULL_OBS[0], PULL_ACTIONS, lengths=[5] * 12, mean_actions=True)
    return [
        *base,
        "runner.pretrain_iterations=4",
        f"runner.pretrain_dataset={{data_dir: {root / 'data'}, dataset_loops: 1}}",
    ]


def label_distances(run: Path, data: Path) -> tuple[float, float]:
    """The trained action mean's squared distance to the dataset's mean actions (the opposite of
    its actions) and to its actions, over the dataset's observations."""
    from test_two_stage import settings

    arrays = load_dataset_arrays(settings(data), {"policy": PULL_OBS}, PULL_ACTIONS, seed=0)
    mean = np.asarray(load_policy(run).policy()(np.asarray(arrays.obs["policy"])))
    actions = np.asarray(arrays.actions)
    return float(np.mean((mean + actions) ** 2)), float(np.mean((mean - actions) ** 2))


def train_main(run: Path, overrides: list[str]) -> list[dict]:
    """`python -m strl_jax.train` with `overrides` into `run`; its metric rows."""
    from strl_jax.train import main

    assert main(["--log_dir", str(run), "--quiet", *overrides]) == 0
    return read_metrics(run)


def label_pull_run(overrides: list[str], root: Path, run: Path) -> dict:
    """Three pretraining iterations imitating the dataset's `mean_actions` (weight 100, rate 3e-3):
    the policy's distances to those labels and to the executed actions."""
    labelled = [o for o in overrides if not o.startswith("runner.pretrain_")]
    data = f"data_dir: {root / 'data'}, dataset_loops: -1, imitation_loss_coef: 100, learning_rate: 3.0e-3"
    labelled += [
        "runner.pretrain_iterations=3",
        "runner.max_iterations=3",
        f"runner.pretrain_dataset={{{data}, imitation_labels: mean_actions}}",
    ]
    rows = train_main(run, labelled)
    to_labels, to_actions = label_distances(run, root / "data")
    return {"rows": rows, "to_labels": to_labels, "to_actions": to_actions}


def rl_imitation_run(overrides: list[str], root: Path, run: Path) -> dict:
    """Two pretraining iterations without imitation weight, then 4 RL iterations pulled towards the
    dataset's `mean_actions` at weight 300 falling linearly (`rl_imitation_coef`)."""
    carried = [o for o in overrides if not o.startswith("runner.pretrain_")]
    data = f"data_dir: {root / 'data'}, dataset_loops: -1, imitation_loss_coef: 0"
    carried += [
        "runner.pretrain_iterations=2",
        f"runner.pretrain_dataset={{{data}, rl_imitation_coef: 300, rl_imitation_iterations: 4, "
        "imitation_labels: mean_actions}",
    ]
    rows = train_main(run, carried)
    to_labels, to_actions = label_distances(run, root / "data")
    return {"rows": rows, "to_labels": to_labels, "to_actions": to_actions}


def filtered_pull_run(overrides: list[str], root: Path, filter_: str, reward: float) -> dict:
    """As `rl_imitation_run`, towards the executed actions of a dataset whose every step earns
    `reward`, through `rl_imitation_filter: filter_`: the run's folder and its RL iterations' rows."""
    from test_two_stage import write_dataset

    data_dir = root / f"data_{filter_}_{reward:+g}"
    write_dataset(data_dir, PULL_OBS[0], PULL_ACTIONS, [5] * 12, reward=reward)
    data = f"data_dir: {data_dir}, dataset_loops: -1, imitation_loss_coef: 0"
    carried = [o for o in overrides if not o.startswith("runner.pretrain_")]
    carried += [
        "runner.pretrain_iterations=2",
        f"runner.pretrain_dataset={{{data}, rl_imitation_coef: 300, rl_imitation_iterations: 4, "
        f"rl_imitation_filter: {filter_}}}",
    ]
    run = root / f"run_{filter_}_{reward:+g}"
    return {"run": run, "rows": train_main(run, carried)[2:]}


# Go1JoystickFlatTerrain at a small size (tests/test_playground_training.py): one config for every
# run of that module, so its programs compile once per process.
GO1_TASK = "Go1JoystickFlatTerrain"
GO1_ITERATIONS = 120
GO1_SAVE_INTERVAL = 3  # the module's split run stops after this many iterations and resumes as many
GO1_SMALL = [
    "env.num_envs=64",
    "runner.num_steps_per_env=24",
    "algorithm.num_mini_batches=4",
    "policy.actor_hidden_dims=[128,128]",
    "policy.critic_hidden_dims=[128,128]",
    "policy.init_noise_std=0.2",
    "algorithm.entropy_coef=0.0",
    "runner.num_eval_envs=4",
    "runner.eval_interval=60",
    f"runner.save_interval={GO1_SAVE_INTERVAL}",
    "runner.max_checkpoints_to_keep=0",
    "runner.print_interval=1000",
]


def go1_config(*overrides: str):
    return resolve_config(GO1_TASK, overrides=[*GO1_SMALL, *overrides])


def go1_flat_run(root: Path, seed: int = 1) -> tuple:
    """`GO1_ITERATIONS` iterations of the small Go1 run: its result and metric rows."""
    result = train(go1_config(f"runner.max_iterations={GO1_ITERATIONS}", f"seed={seed}"), root, verbose=False)
    return result, read_metrics(root)


def go1_flat_ratios(rows: list[dict]) -> dict:
    """What tests/test_playground_training.py asserts of the run: the mean step reward and the falls
    (finished episodes) per iteration over the last 10 iterations against iterations 2-11."""
    step_reward = np.array([r["mean_step_reward"] for r in rows])
    falls = np.array([r["episodes"] for r in rows])
    return {
        "step_reward": float(step_reward[-10:].mean() / step_reward[1:11].mean()),
        "falls": float(falls[-10:].mean() / falls[1:11].mean()),
    }
