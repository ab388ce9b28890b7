"""A tiny PPO run on the pendulum end to end: the same seed gives the same run, the run writes its
outputs, the first update starts at ratio one, the time-out bootstrap equals the critic, the std
stays above its floor. (Whether PPO learns is test_training.py's.)"""

from __future__ import annotations

import functools
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import yaml

from strl_jax.configs import resolve_config
from strl_jax.envs import make_env_from_config
from strl_jax.errors import ConfigError
from strl_jax.networks.actor_critic import MIN_STD, clamp_std, std_floor
from strl_jax.networks.gaussian import gaussian_log_prob
from strl_jax.networks.normalizer import InputNormalization
from strl_jax.records.run_logger import TIME_KEYS
from strl_jax.runners.learner_builder import make_learner
from strl_jax.runners.runner import train
from strl_jax.train_loops.rollout import timeout_rows, timeout_values

TINY = [
    "env.num_envs=16",
    "runner.num_steps_per_env=8",
    "runner.max_iterations=3",
    "runner.eval_interval=2",
    "runner.num_eval_envs=2",
    "env.episode_length=50",
    "policy.actor_hidden_dims=[16]",
    "policy.critic_hidden_dims=[16]",
    "algorithm.num_mini_batches=2",
    "algorithm.num_learning_epochs=2",
]


def _strip_times(rows):
    return [{k: v for k, v in r.items() if k not in TIME_KEYS} for r in rows]


@pytest.fixture(scope="module")
def tiny_runs(tmp_path_factory):
    cfg = resolve_config("inverted_pendulum", overrides=TINY)
    first = train(cfg, tmp_path_factory.mktemp("run_a"), verbose=False)
    second = train(cfg, tmp_path_factory.mktemp("run_b"), verbose=False)
    return cfg, first, second


def test_same_seed_gives_identical_metrics(tiny_runs):
    _, first, second = tiny_runs
    rows_a = [json.loads(line) for line in (first.log_dir / "metrics.jsonl").read_text().splitlines()]
    rows_b = [json.loads(line) for line in (second.log_dir / "metrics.jsonl").read_text().splitlines()]
    assert len(rows_a) == 3
    assert _strip_times(rows_a) == _strip_times(rows_b)
    jax.tree.map(np.testing.assert_array_equal, first.train_state.params, second.train_state.params)


def test_run_outputs(tiny_runs):
    cfg, first, _ = tiny_runs
    saved = yaml.safe_load((first.log_dir / "config.yaml").read_text())
    assert saved["env"]["num_envs"] == 16 and saved["algorithm"]["class_name"] == "PPO"
    rows = [json.loads(line) for line in (first.log_dir / "metrics.jsonl").read_text().splitlines()]
    required = {
        "iteration",
        "env_steps",
        "wall_time",
        "fps",
        "mean_reward",
        "mean_episode_length",
        "surrogate",
        "value_function",
        "entropy",
        "learning_rate",
        "mean_noise_std",
    }
    for row in rows:
        assert required <= set(row)
        assert row["env_steps"] == row["iteration"] * 16 * 8
    assert [("eval_reward" in r) for r in rows] == [False, True, True]
    assert list(first.log_dir.glob("events.out.tfevents.*"))
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(first.log_dir))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {
        "Loss/surrogate",
        "Loss/value_function",
        "Loss/entropy",
        "Loss/learning_rate",
        "Policy/mean_noise_std",
        "Perf/total_fps",
        "Eval/episode_reward",
    } <= tags


def test_first_update_starts_at_ratio_one():
    """Normalisers change only after the update, so the first minibatch sees the acting policy."""
    cfg = resolve_config("inverted_pendulum", overrides=TINY)
    learner = make_learner(make_env_from_config(cfg.env), cfg)
    ts, rs = jax.jit(learner.init)(jax.random.PRNGKey(0))  # one program each: op by op compiles more
    ts = ts.replace(normalizers=jax.tree.map(lambda x: x + 0.5, ts.normalizers))  # non-trivial stats
    _, transitions, _ = jax.jit(learner.rollout)(ts, rs, jax.random.PRNGKey(1))
    nobs = InputNormalization().groups(ts.normalizers, transitions.obs)
    mean, std, _ = learner.model.distribution(ts.params, nobs, {})
    np.testing.assert_allclose(
        gaussian_log_prob(transitions.actions, mean, std), transitions.log_prob, atol=1e-5
    )


@pytest.mark.parametrize("task", ["inverted_pendulum", "inverted_pendulum_pomdp"])
def test_timeout_values_equal_the_critic_on_truncated_envs(task):
    """The gathered time-out bootstrap equals the critic on every env, masked to the truncated
    ones: with few time-outs (one chunk of gathered rows), exactly one chunk's worth, and more."""
    overrides = [*TINY, "env.num_envs=64", "env.episode_length=1000"]
    if task.endswith("pomdp"):
        overrides += ["policy.rnn_hidden_size=8"]
    cfg = resolve_config(task, overrides=overrides)
    learner = make_learner(make_env_from_config(cfg.env), cfg)
    ts, rs = jax.jit(learner.init)(jax.random.PRNGKey(0))
    assert timeout_rows(64, 1000) == 16
    key = jax.random.PRNGKey(3)
    final_obs = jax.tree.map(lambda x: jax.random.normal(key, x.shape), rs.obs)
    hidden = jax.tree.map(lambda x: jax.random.normal(jax.random.fold_in(key, 1), x.shape), rs.hidden)
    normalizers = jax.tree.map(lambda x: x + 0.5, ts.normalizers)
    every = learner.critic_value(ts.params, normalizers, final_obs, hidden)
    bootstrap = jax.jit(functools.partial(timeout_values, learner))
    for count in (0, 1, 3, 16, 17, 40, 64):
        truncated = jax.random.permutation(jax.random.fold_in(key, count), jnp.arange(64)) < count
        got = bootstrap(ts.params, normalizers, final_obs, hidden, truncated)
        np.testing.assert_allclose(got, jnp.where(truncated, every, 0.0), atol=1e-5, err_msg=f"{count}")


def test_clip_min_std_clamps_both_parameterisations():
    params = {"params": {"std": jnp.array([0.01, 0.5])}}
    np.testing.assert_allclose(clamp_std(params, "scalar", 0.2)["params"]["std"], [0.2, 0.5])
    params = {"params": {"log_std": jnp.log(jnp.array([0.01, 0.5]))}}
    np.testing.assert_allclose(
        jnp.exp(clamp_std(params, "log", 0.2)["params"]["log_std"]), [0.2, 0.5], rtol=1e-6
    )
    # without clip_min_std the std still never reaches zero or goes negative, for both types
    scalar = clamp_std({"params": {"std": jnp.array([-0.3, 0.0, 0.5])}}, "scalar", None)["params"]["std"]
    np.testing.assert_allclose(scalar, [MIN_STD, MIN_STD, 0.5])
    log_std = clamp_std({"params": {"log_std": jnp.array([-200.0, 0.1])}}, "log", None)["params"]["log_std"]
    np.testing.assert_allclose(jnp.exp(log_std), [MIN_STD, jnp.exp(0.1)], rtol=1e-5)


def test_std_floor_schedule_moves_the_floor_between_its_iterations():
    schedule = {"final": 0.1, "start": 10, "end": 20}
    floors = [float(std_floor(0.3, schedule, jnp.int32(i))) for i in (0, 10, 15, 19, 20, 500)]
    np.testing.assert_allclose(floors, [0.3, 0.3, 0.2, 0.12, 0.1, 0.1], rtol=1e-6)
    assert std_floor(0.3, None, jnp.int32(5)) == 0.3  # a constant floor stays a Python number
    step = {"final": 0.5, "start": 4, "end": 4}  # start == end: a step at that iteration
    assert [float(std_floor(0.2, step, jnp.int32(i))) for i in (3, 4)] == [np.float32(0.2), 0.5]


def test_a_trained_std_follows_the_floor_schedule(tmp_path):
    """The floor acts inside the compiled update: raised above the initial std it sets the std
    (gradients move it by far less than the gap), at the iteration the schedule says."""
    base = [o for o in TINY if not o.startswith("runner.max_iterations")]
    base += ["runner.eval_interval=0", "algorithm.clip_min_std=2.0", "policy.init_noise_std=1.0"]
    stds = {}
    for iterations in (2, 3):
        cfg = resolve_config(
            "inverted_pendulum",
            overrides=base
            + [
                f"runner.max_iterations={iterations}",
                "algorithm.clip_min_std_schedule={final: 3.0, start: 1, end: 2}",
            ],
        )
        run = train(cfg, tmp_path / str(iterations), verbose=False)
        stds[iterations] = np.asarray(run.train_state.params["params"]["std"])
    # updates at iterations 0 and 1 keep the floor at 2.0; the update at iteration 2 raises it to 3.0
    np.testing.assert_allclose(stds[2], 2.0, atol=2e-3)
    np.testing.assert_allclose(stds[3], 3.0, atol=2e-3)


@pytest.mark.parametrize(
    ("schedule", "named"),
    [
        ("{final: 0.1, start: 0}", "exactly the keys"),
        ("{final: -0.1, start: 0, end: 5}", "clip_min_std_schedule.final"),
        ("{final: 0.1, start: 0.5, end: 5}", "clip_min_std_schedule.start"),
        ("{final: 0.1, start: 6, end: 5}", "must not come before start"),
        ("0.1", "must be a mapping"),
    ],
)
def test_std_floor_schedule_rejects_bad_settings(schedule, named):
    with pytest.raises(ConfigError, match=named):
        resolve_config(
            "inverted_pendulum",
            overrides=["algorithm.clip_min_std=0.3", f"algorithm.clip_min_std_schedule={schedule}"],
        )


def test_std_floor_schedule_needs_a_floor_to_start_from():
    with pytest.raises(ConfigError, match="clip_min_std, which is null"):
        resolve_config(
            "inverted_pendulum", overrides=["algorithm.clip_min_std_schedule={final: 0.1, start: 0, end: 5}"]
        )
