"""APPO / ATPPO through the learner and the runner: the style reward in the rollout, AMP frames
across resets, raw-data normaliser updates, the policy replay, joint optimisation, logs, resume
and config errors. A tiny PPO run on inverted_pendulum, collected with `strl_jax.collect`, is
the expert."""

from __future__ import annotations

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from learning_runs import DISCRIMINATOR_STEPS, appo_cfg, appo_demo, appo_learner, discriminator_step
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from strl_jax.agents.amp import init_amp_normalizers, style_reward, update_amp_normalizers
from strl_jax.configs.loader import ConfigError, resolve_config
from strl_jax.networks.normalizer import normalize, update_normalizer
from strl_jax.runners.runner import build_programs, train


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """A motion dataset collected from a one-iteration PPO run (`learning_runs.appo_demo`)."""
    return appo_demo(tmp_path_factory.mktemp("amp"))


@pytest.fixture(scope="module")
def appo(demo):
    """`(learner, train_state, rollout_state, transitions, rollout key)` with lerp 0.25."""
    learner, ts, rs = appo_learner(demo)
    _, rollout_key, _ = jax.random.split(ts.key, 3)
    _, transitions, _ = jax.jit(learner.rollout)(ts, rs, rollout_key)
    return learner, ts, rs, transitions, rollout_key


def test_rollout_reward_is_the_mixed_style_reward(appo):
    learner, ts, _, tr, _ = appo
    (prior,), amp, policy_amp = learner.parts, ts.parts["amp"], tr.parts["amp"]["policy"]
    d = prior.disc_apply(amp.params, normalize(amp.normalizers.policy, policy_amp))
    style = style_reward(d, 1.0)
    # inverted_pendulum pays 1 per step; episodes of 1000 steps never time out in 16 steps
    np.testing.assert_allclose(tr.rewards, 0.75 * style + 0.25 * 1.0, rtol=1e-5, atol=1e-6)
    assert float(jnp.std(style)) > 0  # the untrained discriminator still tells states apart


def test_amp_frames_chain_and_keep_the_pre_reset_frame(appo):
    """s' of step t is s of step t+1, except where the episode ended: there s' is the frame the
    step reached before the reset (the next s is a fresh initial state)."""
    _, _, _, tr, _ = appo
    policy_amp = tr.parts["amp"]["policy"]
    frame = policy_amp.shape[-1] // 2
    s, s_next = np.asarray(policy_amp[..., :frame]), np.asarray(policy_amp[..., frame:])
    done = np.asarray(tr.dones[:-1]) > 0
    assert done.sum() > 0, "no episode ended: the test needs a reset"
    np.testing.assert_allclose(s_next[:-1][~done], s[1:][~done], rtol=1e-6)
    assert np.all(np.abs(s_next[:-1][done] - s[1:][done]).max(axis=-1) > 1e-6)
    # a fallen pole: the pre-reset angle is beyond brax's 0.2 rad termination threshold
    assert np.all(np.abs(s_next[:-1][done][:, 0]) > 0.2)


def test_iteration_trains_the_discriminator_and_feeds_raw_data(appo):
    learner, ts, rs, tr, _ = appo
    step = discriminator_step(learner, ts, rs)
    new_ts, new_rs, metrics = step["train_state"], step["rollout_state"], step["scalars"]
    (prior,), amp, new_amp = learner.parts, ts.parts["amp"], new_ts.parts["amp"]
    policy_amp, expert_amp = tr.parts["amp"]["policy"], tr.parts["amp"]["expert"]
    # normaliser (shared, the default): one update with the rollout's raw policy and expert data
    flat = lambda x: x.reshape(-1, x.shape[-1])  # noqa: E731
    fresh_norms = init_amp_normalizers(policy_amp.shape[-1])
    both = jnp.concatenate([flat(policy_amp), flat(expert_amp)])
    close = lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)  # noqa: E731
    jax.tree.map(close, new_amp.normalizers.policy, update_normalizer(fresh_norms.policy, both, 1e8))
    # st_rl's separate normalisers: each side its own raw batch
    separate = dataclasses.replace(prior, shared_normalizer=False)
    updated = separate.update_normalizers(amp, policy_amp, expert_amp, None).normalizers
    expected = update_amp_normalizers(fresh_norms, flat(policy_amp), flat(expert_amp), 1e8)
    jax.tree.map(close, updated, expected)
    # replay: each env's ring starts with its rollout. The iteration's program rolls out again and
    # rounds in its own way, and the pendulum's dynamics grow that along the 16 steps (to ~1e-5
    # under XLA:CPU's older fusion emitter); a step or env out of place differs by ~0.1.
    replay = new_rs.parts["amp"]
    np.testing.assert_allclose(replay.data[:, :16], np.swapaxes(policy_amp, 0, 1), rtol=1e-4, atol=1e-4)
    assert np.all(np.asarray(replay.size) == 16)
    # The discriminator trained through the shared optimiser: Adam moves a weight by about the
    # learning rate per step while its gradient keeps its sign, and the policy's adaptive schedule
    # raised the rate by 1.5 before each of the iteration's 2 x 2 steps (its KL stayed low).
    assert float(metrics["learning_rate"]) == pytest.approx(1e-3 * 1.5**DISCRIMINATOR_STEPS, rel=1e-5)
    # BENCHMARKS.md, Learning spread: discriminator steps: median weight change over the rates'
    # sum (0.0122), learner seeds 0-4, 0.953-0.979 (largest 1.003-1.004): margin 0.15 to the worst.
    rates, change = step["rates"], step["change"]
    assert 0.8 * rates < np.median(change) and change.max() < 1.1 * rates, (np.median(change), rates)
    assert "'amp'" in str(jax.tree_util.tree_structure(new_ts.opt_state))
    for key in ("discriminator_expert", "discriminator_policy", "discriminator_grad_pen",
                "discriminator_accuracy_expert", "discriminator_accuracy_policy",
                "discriminator_expert_score", "discriminator_policy_score",
                "mean_style_reward", "mean_task_reward"):  # fmt: skip
        assert np.isfinite(float(metrics[key])), key
    assert float(metrics["mean_task_reward"]) == pytest.approx(1.0)


def rows_without_time(path):
    drop = ("wall_time", "iteration_time", "fps")
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [{k: v for k, v in row.items() if k not in drop} for row in rows]


def test_appo_logs_and_resumes_exactly(demo, tmp_path):
    extra = ["algorithm.mimic_loss_coef=0.1", "algorithm.dagger_loss_coef=0.1"]
    cfg = appo_cfg(demo, "runner.max_iterations=4", *extra)
    train(cfg, tmp_path / "straight", verbose=False)
    first = appo_cfg(demo, "runner.max_iterations=2", *extra)
    train(first, tmp_path / "split", verbose=False)
    train(cfg, tmp_path / "split", verbose=False, resume=True)
    straight = rows_without_time(tmp_path / "straight" / "metrics.jsonl")
    assert rows_without_time(tmp_path / "split" / "metrics.jsonl") == straight
    assert {"discriminator_expert", "mimic", "dagger", "mean_style_reward"} <= straight[-1].keys()
    events = EventAccumulator(str(tmp_path / "straight"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {
        "Loss/discriminator_expert", "Loss/discriminator_policy", "Loss/discriminator_grad_pen",
        "Loss/discriminator_accuracy_expert", "Loss/discriminator_accuracy_policy",
        "Train/mean_style_reward", "Train/mean_task_reward", "Loss/surrogate",
    } <= tags  # fmt: skip


def test_atppo_combines_teacher_and_motion_prior(demo, tmp_path):
    cfg = appo_cfg(
        demo,
        "runner.max_iterations=1",
        f"algorithm.teacher_policy.checkpoint={demo / 'expert'}",
        "algorithm.teacher_act_prob=0.5",
        algorithm="ATPPO",
    )
    result = train(cfg, tmp_path, verbose=False)
    row = result.rows[-1]
    assert {"distillation", "teacher_act_fraction", "discriminator_expert", "mean_style_reward"} <= row.keys()


def test_amp_config_errors_name_the_problem(demo):
    with pytest.raises(ConfigError, match="needs algorithm.amp_motion_files"):
        resolve_config("inverted_pendulum", overrides=["algorithm.class_name=APPO"])
    one_feature = appo_cfg(demo, "env.amp_obs_components=[joint_pos]")
    with pytest.raises(ConfigError, match="the motion frames have 2 features .* has 1"):
        build_programs(one_feature)
