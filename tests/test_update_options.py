"""st_rl TPPO's update options, available to every PPO-style update: a learning-rate scheduler by
torch name, the batch over several rollouts (`buffer_dilation_ratio`) and hidden-state
resampling (`hidden_state_resample_prob`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from learning_runs import dagger_config, dagger_run, dagger_teacher
from tiny_config import tiny

from strl_jax.buffers.history import empty_history, with_history
from strl_jax.configs import ConfigError, resolve_config
from strl_jax.envs import make_env_from_config
from strl_jax.networks.policy import resample_hidden
from strl_jax.runners.learner_builder import make_learner
from strl_jax.runners.runner import train
from strl_jax.train import main as train_main


# ----------------------------------------------------------------------------- lr scheduler
def test_lr_scheduler_steps_once_per_iteration_and_resumes(tmp_path):
    """StepLR(step_size=2, gamma=0.5) after every update, as st_rl's TPPO steps its scheduler;
    the rate lives in the train state, so a resumed run continues the schedule."""
    overrides = tiny(
        "algorithm.schedule=fixed",
        "algorithm.learning_rate=0.004",
        "algorithm.lr_scheduler_class_name=StepLR",
        "algorithm.lr_scheduler={step_size: 2, gamma: 0.5}",
        "runner.max_iterations=5",
    )
    cfg = resolve_config("inverted_pendulum", overrides=overrides)
    rows = train(cfg, tmp_path / "full", verbose=False).rows
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.004)
    scheduler = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    expected = []
    for _ in range(5):
        opt.step()
        scheduler.step()
        expected.append(opt.param_groups[0]["lr"])
    np.testing.assert_allclose([r["learning_rate"] for r in rows], expected, rtol=1e-6)

    short = resolve_config("inverted_pendulum", overrides=[*overrides, "runner.max_iterations=2"])
    train(short, tmp_path / "split", verbose=False)
    assert train_main(["--resume", str(tmp_path / "split"), "--quiet", "runner.max_iterations=5"]) == 0
    resumed = [
        r["learning_rate"]
        for r in map(eval_row, (tmp_path / "split" / "metrics.jsonl").read_text().splitlines())
    ]
    np.testing.assert_allclose(resumed, expected, rtol=1e-6)


def eval_row(line: str) -> dict:
    import json

    return json.loads(line)


def test_lr_scheduler_config_errors():
    with pytest.raises(ConfigError, match="StepLR"):
        resolve_config("inverted_pendulum", overrides=["algorithm.lr_scheduler_class_name=StepLR"])
    with pytest.raises(ConfigError, match="valid"):
        resolve_config("inverted_pendulum", overrides=["algorithm.lr_scheduler_class_name=OneCycle"])
    with pytest.raises(ConfigError, match="lr_scheduler_class_name is not"):
        resolve_config("inverted_pendulum", overrides=["algorithm.lr_scheduler={gamma: 0.5}"])


# ----------------------------------------------------------------------------- rollout history
def test_history_keeps_the_newest_rollouts_on_the_env_axis():
    def batch(v):
        return {"obs": jnp.full((3, 2, 1), float(v)), "hidden": jnp.full((1, 2, 4), float(v))}

    history = empty_history(jax.eval_shape(lambda: batch(0)), chunks=3)
    seen = []
    for v in (1, 2, 3, 4):
        merged, history = with_history(batch(v), history)
        assert merged["obs"].shape == (3, 6, 1) and merged["hidden"].shape == (1, 6, 4)
        # env-major: env n's columns are n * 3 + (oldest, ..., newest)
        seen.append(np.asarray(merged["obs"][0, :3, 0]).tolist())
    # empty places hold the newest rollout until there are older ones
    assert seen == [[1, 1, 1], [2, 1, 2], [1, 2, 3], [2, 3, 4]]
    assert int(history.filled) == 2


@pytest.fixture(scope="module")
def teacher_dir(tmp_path_factory):
    return dagger_teacher(tmp_path_factory.mktemp("teacher"))


@pytest.mark.parametrize("recurrent", [True, False])
def test_dagger_learns_from_the_last_rollouts(teacher_dir, recurrent):
    """buffer_dilation_ratio=2: every update's batch holds this rollout and the one before; over
    20 iterations the student learns the teacher's actions on the first rollout's steps. A fixed
    rate: the adaptive one climbs to 1e-2 on these tiny batches and the student overshoots back
    and forth. `learning_runs.dagger_run`, also measured by bench/learning_spread.py (case
    `dagger`)."""
    run = dagger_run(teacher_dir, recurrent)
    kept = run["kept"]
    assert run["filled"] == 1
    np.testing.assert_array_equal(np.asarray(kept.obs["policy"][0, :, 0]), np.asarray(run["first_obs"]))
    # the stored rollout is the previous one, whose first observation was where iteration 2 began
    assert not np.array_equal(np.asarray(run["second"].obs["policy"]), np.asarray(kept.obs["policy"]))
    if recurrent:
        assert kept.hidden["actor"][0].shape == (1, run["cfg"].env.num_envs, 1, 8)
    # BENCHMARKS.md, Learning spread: DAgger recurrent / DAgger feed-forward: the student's error
    # after 20 iterations over the untrained one's, learner keys 0-5, recurrent 0.032 / 0.086 /
    # 0.122, feed-forward 0.073 / 0.143 / 0.303: margin 0.197 to the worst.
    trained, untrained = run["trained"], run["untrained"]
    assert trained < 0.5 * untrained, (trained, untrained)


def test_history_config_errors(teacher_dir):
    with pytest.raises(ConfigError, match="whole number"):
        dagger_config(teacher_dir, "algorithm.buffer_dilation_ratio=1.5")
    with pytest.raises(ConfigError, match="needs a recurrent policy"):
        dagger_config(
            teacher_dir, "policy.class_name=ActorCritic", "algorithm.hidden_state_resample_prob=0.5"
        )


def test_history_resumes_exactly(teacher_dir, tmp_path):
    cfg = dagger_config(teacher_dir, "algorithm.buffer_dilation_ratio=3", "runner.max_iterations=4")
    full = train(cfg, tmp_path / "full", verbose=False)
    train(
        dagger_config(teacher_dir, "algorithm.buffer_dilation_ratio=3", "runner.max_iterations=2"),
        tmp_path / "split",
        verbose=False,
    )
    assert train_main(["--resume", str(tmp_path / "split"), "--quiet", "runner.max_iterations=4"]) == 0
    rows = [eval_row(x) for x in (tmp_path / "split" / "metrics.jsonl").read_text().splitlines()]
    assert [r["distillation"] for r in rows] == [r["distillation"] for r in full.rows]


# ----------------------------------------------------------------------------- hidden resampling
def test_resample_hidden_draws_uniform_memories_at_trajectory_starts():
    b, h = 20000, 3
    hidden = {"actor": (jnp.zeros((1, b, h)), jnp.ones((1, b, h))), "critic": jnp.full((2, b, h), 0.5)}
    starts = jnp.arange(b) % 2 == 0
    out = resample_hidden(hidden, starts, jax.random.PRNGKey(0), 0.3)
    changed = np.asarray(out["critic"][0, :, 0] != 0.5)
    assert not changed[1::2].any()  # no trajectory starts there
    assert changed[::2].mean() == pytest.approx(0.3, abs=0.02)
    # the same rows for every memory, values uniform in (-1, 1)
    np.testing.assert_array_equal(changed, np.asarray(out["actor"][1][0, :, 0] != 1.0))
    values = np.asarray(out["critic"])[:, changed]
    assert values.min() >= -1 and values.max() <= 1 and values.var() == pytest.approx(1 / 3, rel=0.05)


def test_resampling_changes_only_what_it_should(teacher_dir):
    cfg = dagger_config(teacher_dir)
    learner = make_learner(make_env_from_config(cfg.env), cfg)
    ts, rs = jax.jit(learner.init)(jax.random.PRNGKey(0))
    _, tr, _ = jax.jit(learner.rollout)(ts, rs, jax.random.PRNGKey(1))
    nobs = tr.obs
    resets = jnp.concatenate([jnp.zeros_like(tr.dones[:1]), tr.dones[:-1]])
    seq = jax.jit(learner.model.sequence, static_argnums=())
    plain = seq(ts.params, nobs, tr.initial_hidden, resets)[0]
    never = seq(ts.params, nobs, tr.initial_hidden, resets, None, None, (jax.random.PRNGKey(2), 0.0))[0]
    always = seq(ts.params, nobs, tr.initial_hidden, resets, None, None, (jax.random.PRNGKey(2), 1.0))[0]
    np.testing.assert_allclose(np.asarray(never), np.asarray(plain), atol=1e-6)  # another program: rounding
    assert not np.allclose(np.asarray(always[0]), np.asarray(plain[0]))
    cfg = dagger_config(teacher_dir, "algorithm.hidden_state_resample_prob=0.5", "algorithm.using_ppo=true")
    learner = make_learner(make_env_from_config(cfg.env), cfg)
    ts, rs = jax.jit(learner.init)(jax.random.PRNGKey(0))
    _, _, metrics = jax.jit(learner.iteration)(ts, rs)
    assert np.isfinite(float(metrics["scalars"]["surrogate"]))
