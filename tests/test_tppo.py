"""TPPO and Distillation parts: schedules, distillation targets, teacher masks, the teacher's
loading checks, the rollout hook and rsl_rl's truncated-BPTT update, against references."""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from strl_jax.agents.coefficient_schedules import make_schedule
from strl_jax.agents.distillation import (
    behavior_loss,
    step_order,
)
from strl_jax.agents.ppo import MinibatchInputs, ppo_loss
from strl_jax.agents.tppo import distillation_loss, resample_mask
from strl_jax.checkpoints.orbax_checkpoints import CHECKPOINT_DIR, open_manager, save_checkpoint
from strl_jax.configs import ConfigError, config_to_dict, resolve_config
from strl_jax.envs import make_env_from_config
from strl_jax.networks.gaussian import gaussian_log_prob
from strl_jax.networks.normalizer import init_normalizer, normalize
from strl_jax.networks.policy import make_policy_model
from strl_jax.runners.learner_builder import make_learner
from strl_jax.train_loops.ppo_update import loss_settings, make_batch
from strl_jax.train_loops.update_rules import PPOUpdate

# ----------------------------------------------------------------------------- schedules


def st_rl_prob(option: str, scale: float, x: float) -> float:
    """st_rl tppo.py GET_PROB_FUNC."""
    return {
        "linear": lambda x: max(0.0, 1 - 1 / scale * x),
        "exp": lambda x: max(0.0, (1 - 1 / scale) ** x),
        "tanh": lambda x: max(0.0, 0.5 * (1 - math.tanh(1 / scale * (x - scale)))),
    }[option](x)


@pytest.mark.parametrize("option", ["linear", "exp", "tanh"])
@pytest.mark.parametrize("scale", [1.0, 7.0, 100.0, 2500.0])
def test_schedules_match_st_rl(option, scale):
    schedule = jax.jit(make_schedule(option, scale))
    for x in [0, 1, 3, 6, 7, 50, 99, 100, 101, 250, 5000]:
        assert float(schedule(jnp.int32(x))) == pytest.approx(st_rl_prob(option, scale, x), abs=1e-6)


def test_constant_schedule_and_bad_name():
    assert float(make_schedule(0.3, 100.0)(jnp.int32(1234))) == pytest.approx(0.3)
    with pytest.raises(ValueError, match="valid choices"):
        make_schedule("cosine", 100.0)


# ----------------------------------------------------------------------------- distillation targets


def st_rl_distillation_loss(target: str, mean, std, labels) -> float:
    """st_rl tppo.py compute_losses (action part) in torch."""
    mean, std, labels = (torch.from_numpy(np.asarray(a, np.float64)) for a in (mean, std, labels))
    if target == "real":
        loss = torch.norm(mean - labels, dim=-1)
    elif target == "mse_sum":
        loss = F.mse_loss(mean, labels, reduction="none").sum(-1)
    elif target == "l1":
        loss = torch.norm(mean - labels, dim=-1, p=1)
    elif target == "tanh":
        loss = F.binary_cross_entropy((mean + 1) * 0.5, (labels + 1) * 0.5) * 2
    elif target == "scaled_tanh":
        l1 = torch.norm(mean - labels, dim=-1, p=1)
        bce = F.binary_cross_entropy((mean + 1) * 0.5, (labels + 1) * 0.5, reduction="none")
        loss = bce.mean(-1) * 2 * l1 / mean.shape[-1]
    elif target == "max_log_prob":
        loss = -torch.distributions.Normal(mean, std).log_prob(labels).sum(-1)
    return float(loss.mean())


@pytest.mark.parametrize("target", ["real", "mse_sum", "l1", "tanh", "scaled_tanh", "max_log_prob"])
@pytest.mark.parametrize("shape", [(5, 3), (4, 6, 2)])
def test_distillation_targets_match_st_rl(target, shape):
    rng = np.random.default_rng(len(shape))
    mean = np.tanh(rng.normal(size=shape))  # tanh targets assume squashed actions
    labels = np.tanh(rng.normal(size=shape))
    std = np.exp(rng.normal(size=shape) * 0.3)
    got = distillation_loss(target, jnp.asarray(mean), jnp.asarray(std), jnp.asarray(labels))
    assert float(got) == pytest.approx(st_rl_distillation_loss(target, mean, std, labels), rel=1e-5, abs=1e-6)


def test_distillation_target_is_zero_at_the_label_and_has_gradient():
    labels = jnp.array([[0.2, -0.4], [0.0, 0.7]])
    for target in ("real", "mse_sum", "l1", "scaled_tanh"):
        assert float(distillation_loss(target, labels, jnp.ones_like(labels), labels)) == pytest.approx(0.0)
    grad = jax.grad(lambda m: distillation_loss("mse_sum", m, jnp.ones_like(m), labels))(labels + 0.1)
    np.testing.assert_allclose(grad, 0.1, rtol=1e-5)  # 2 * 0.1 / 2 samples
    with pytest.raises(ValueError, match="valid choices"):
        distillation_loss("kl", labels, labels, labels)


@pytest.mark.parametrize("loss_type", ["mse", "huber"])
def test_behavior_loss_matches_torch(loss_type):
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=(2, 7, 3)) * 1.5
    expected = {"mse": F.mse_loss, "huber": F.huber_loss}[loss_type](torch.from_numpy(a), torch.from_numpy(b))
    assert float(behavior_loss(loss_type, jnp.asarray(a), jnp.asarray(b))) == pytest.approx(
        float(expected), rel=1e-5
    )


# ----------------------------------------------------------------------------- teacher masks


def test_mask_is_resampled_only_where_episodes_ended():
    n = 20000
    mask = jnp.arange(n) % 2 == 0
    done = jnp.arange(n) % 3 == 0
    for prob in (0.0, 0.25, 1.0):
        keys = jax.random.split(jax.random.PRNGKey(1), n)
        new = np.asarray(resample_mask(keys, mask, done, jnp.float32(prob)))
        d = np.asarray(done)
        np.testing.assert_array_equal(new[~d], np.asarray(mask)[~d])
        assert new[d].mean() == pytest.approx(prob, abs=0.02)


# ----------------------------------------------------------------------------- teacher + rollout hook

TINY = [
    "env.num_envs=8",
    "env.episode_length=10",
    "runner.num_steps_per_env=6",
    "policy.actor_hidden_dims=[8]",
    "policy.critic_hidden_dims=[8]",
    "algorithm.num_mini_batches=2",
    "algorithm.num_learning_epochs=1",
]


def write_teacher(path) -> None:
    """A teacher run folder without training (or compiling an env): the parameters and
    normalisers a PPO run stores, the latter with non-trivial statistics."""
    cfg = resolve_config("inverted_pendulum_teacher", overrides=TINY)
    shapes = {"policy": (4,), "critic": (4,)}
    params = make_policy_model(1, cfg.policy).init(jax.random.PRNGKey(3), shapes)
    normalizers = {k: init_normalizer(s) for k, s in shapes.items()}
    normalizers = jax.tree.map(lambda x: x + 0.5, normalizers)
    manager = open_manager(path / CHECKPOINT_DIR)
    meta = {"window": {}, "wall_time": 0.0, "config": config_to_dict(cfg)}
    save_checkpoint(manager, 1, {"train_state": {"params": params, "normalizers": normalizers}}, meta)
    manager.wait_until_finished()
    manager.close()


@pytest.fixture(scope="module")
def teacher_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("teacher")
    write_teacher(path)
    return path


def student_cfg(teacher_dir, *overrides, preset="inverted_pendulum_student_tppo"):
    return resolve_config(
        preset,
        overrides=[
            *TINY,
            "policy.rnn_hidden_size=8",
            f"algorithm.teacher_policy.checkpoint={teacher_dir}",
            *overrides,
        ],
    )


def test_teacher_that_does_not_fit_is_a_config_error(teacher_dir, tmp_path):
    def build(cfg):
        return make_learner(make_env_from_config(cfg.env), cfg)

    with pytest.raises(ConfigError, match=r"shape \(4,\).*'policy' group has shape \(2,\)"):
        build(student_cfg(teacher_dir, "algorithm.label_action_with_critic_obs=false"))
    with pytest.raises(ConfigError, match="does not have"):
        build(student_cfg(teacher_dir, "algorithm.teacher_policy.obs_group=privileged"))
    with pytest.raises(ConfigError, match="is a 'ActorCritic'"):
        build(student_cfg(teacher_dir, "algorithm.teacher_policy.class_name=ActorCriticRecurrent"))
    with pytest.raises(ConfigError, match="needs a trained teacher"):
        build(student_cfg(teacher_dir, "algorithm.teacher_policy.checkpoint="))
    with pytest.raises(ConfigError, match="teacher_policy.checkpoint.*does not exist"):
        build(student_cfg(teacher_dir, f"algorithm.teacher_policy.checkpoint={tmp_path / 'nothing'}"))
    with pytest.raises(ConfigError, match="distill_target"):
        student_cfg(teacher_dir, "algorithm.distill_target=kl")
    with pytest.raises(ConfigError, match="teacher_act_prob"):
        student_cfg(teacher_dir, "algorithm.teacher_act_prob=cosine")
    with pytest.raises(ConfigError, match="teacher_act_prob"):
        student_cfg(teacher_dir, "algorithm.teacher_act_prob=1.5")
    with pytest.raises(ConfigError, match="loss_type"):
        student_cfg(teacher_dir, "algorithm.loss_type=l1", preset="inverted_pendulum_student_distillation")


@pytest.fixture(scope="module")
def tppo_rollout(teacher_dir):
    """One jitted rollout of a recurrent TPPO student whose teacher acts in about half the envs."""
    cfg = student_cfg(teacher_dir, "algorithm.teacher_act_prob=0.5", "env.num_envs=64")
    learner = make_learner(make_env_from_config(cfg.env), cfg)
    ts, rs = jax.jit(learner.init)(jax.random.PRNGKey(0))
    new_rs, transitions, stats = jax.jit(learner.rollout)(ts, rs, jax.random.PRNGKey(1))
    return learner, ts, rs, transitions


def test_teacher_labels_every_step_from_the_critic_group(tppo_rollout):
    learner, ts, _, transitions = tppo_rollout
    (part,) = learner.parts
    teacher, state = part.teacher, ts.parts["teacher"]
    assert teacher.actor.obs_group == "critic" and transitions.obs["policy"].shape[-1] == 2
    x = normalize(state.normalizers["policy"], transitions.obs["critic"])
    mean, _, _ = teacher.actor.model.distribution(state.params, {"policy": x}, {})
    np.testing.assert_allclose(transitions.parts["teacher"]["action_labels"], mean, rtol=1e-5, atol=1e-6)


def test_executed_actions_follow_the_mask_and_log_probs_are_the_students(tppo_rollout):
    _, _, rs, transitions = tppo_rollout
    mask = np.asarray(rs.parts["teacher"].mask)
    assert 0 < mask.sum() < len(mask)
    labels = transitions.parts["teacher"]["action_labels"]
    first = np.all(np.isclose(transitions.actions[0], labels[0]), axis=-1)
    np.testing.assert_array_equal(first, mask)
    # log pi_student(executed action): teacher-driven steps keep PPO's first ratio at exactly 1.
    np.testing.assert_allclose(
        transitions.log_prob,
        gaussian_log_prob(transitions.actions, transitions.mean, transitions.std),
        rtol=1e-5,
        atol=1e-5,
    )


def test_dagger_has_only_the_distillation_term(tppo_rollout, teacher_dir):
    learner, ts, _, transitions = tppo_rollout
    last_values = jnp.zeros(transitions.rewards.shape[1])
    batch, _ = make_batch(learner, ts, transitions, last_values)
    trainable = learner.trainable(ts.params, ts.parts)
    inputs = MinibatchInputs(
        batch=batch, iteration=ts.iteration, train_parts=ts.parts, part_inputs={"teacher": None}
    )
    loss = jax.jit(functools.partial(ppo_loss, settings=loss_settings(learner)))
    _, (losses, _, _, _) = loss(trainable, inputs)
    assert set(losses) == {"surrogate_loss", "value_loss", "entropy", "distillation_loss"}
    dagger = learner.replace(update_rule=PPOUpdate(ppo_terms=False))
    dagger_batch, _ = make_batch(dagger, ts, transitions, last_values)
    dagger_loss = jax.jit(functools.partial(ppo_loss, settings=loss_settings(dagger)))
    total, (losses, _, _, _) = dagger_loss(trainable, inputs.replace(batch=dagger_batch))
    assert set(losses) == {"distillation_loss"}
    assert float(total) == pytest.approx(float(losses["distillation_loss"]))


# ----------------------------------------------------------------------------- truncated BPTT


def test_step_order_counts_windows_across_epochs():
    windows, rest = step_order(num_steps=4, num_epochs=3, gradient_length=5)
    np.testing.assert_array_equal(windows, [[0, 1, 2, 3, 0], [1, 2, 3, 0, 1]])
    np.testing.assert_array_equal(rest, [2, 3])


def test_real_distillation_gradient_is_torch_norms_where_mean_equals_label():
    """`||mu - a||` has torch.norm's zero gradient on a sample whose mean equals its label (a
    plain sqrt gives NaN there and poisons the whole update)."""
    mean = np.asarray([[0.0, 0.0], [1.0, 2.0], [-0.5, 0.25]], np.float32)
    labels = np.asarray([[0.0, 0.0], [0.0, 0.0], [0.5, 0.5]], np.float32)
    ours = jax.grad(lambda m: distillation_loss("real", m, jnp.ones_like(m), jnp.asarray(labels)))(
        jnp.asarray(mean)
    )
    tm = torch.tensor(mean, requires_grad=True)
    torch.norm(tm - torch.tensor(labels), dim=-1).mean().backward()
    np.testing.assert_allclose(np.asarray(ours), tm.grad.numpy(), atol=1e-7)
