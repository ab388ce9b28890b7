"""Recurrent policies: masked-scan sequences equal rsl_rl's split-and-pad, rollout and update
agree, minibatches are whole environments, a recurrent run resumes exactly. (Whether memory
helps is test_recurrent.py's.)"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from rsl_rl.utils import split_and_pad_trajectories, unpad_trajectories

from strl_jax.buffers.minibatch import minibatch_indices
from strl_jax.configs import resolve_config
from strl_jax.envs import make_env_from_config
from strl_jax.networks.actor_critic_recurrent import ActorCriticRecurrent
from strl_jax.networks.gaussian import gaussian_log_prob
from strl_jax.networks.normalizer import InputNormalization
from strl_jax.networks.policy import PolicyModel
from strl_jax.runners.learner_builder import make_learner
from strl_jax.train_loops.ppo_update import make_batch, ppo_update

T, B, D, H, L, A = 9, 6, 3, 5, 2, 2


def _torch_from_flax(memory_params: dict, rnn: torch.nn.Module) -> None:
    """Copy strl_jax memory weights into a torch nn.LSTM / nn.GRU (same layout by design)."""
    with torch.no_grad():
        for layer in range(L):
            for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                value = np.asarray(memory_params[f"layer_{layer}"][name], np.float64)
                getattr(rnn, f"{name}_l{layer}").copy_(torch.from_numpy(value))


def _rsl_rl_actor_means(rnn, head, obs, dones, hidden0):
    """rsl_rl's update-time evaluation: split at dones, pad, run, unpad, then the actor head."""
    obs_t = torch.from_numpy(obs)
    dones_t = torch.from_numpy(dones)
    padded, masks = split_and_pad_trajectories(obs_t, dones_t)
    # Stored per-step hidden states: h0 at t=0, zero after a done (rsl_rl resets done envs).
    starts = [(0, b) for b in range(B)] + [(t + 1, b) for t in range(T - 1) for b in range(B) if dones[t, b]]
    starts.sort(key=lambda tb: (tb[1], tb[0]))  # trajectories are ordered env-major
    if isinstance(hidden0, tuple):
        h = torch.stack(
            [torch.from_numpy(hidden0[0][:, b]) if t == 0 else torch.zeros(L, H) for t, b in starts], 1
        )
        c = torch.stack(
            [torch.from_numpy(hidden0[1][:, b]) if t == 0 else torch.zeros(L, H) for t, b in starts], 1
        )
        hidden = (h, c)
    else:
        hidden = torch.stack(
            [torch.from_numpy(hidden0[:, b]) if t == 0 else torch.zeros(L, H) for t, b in starts], 1
        )
    out, _ = rnn(padded, hidden)
    return head(unpad_trajectories(out, masks)).detach().numpy()


@pytest.mark.parametrize("rnn_type", ["lstm", "gru"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_masked_scan_equals_rsl_rl_split_and_pad(rnn_type, seed):
    rng = np.random.default_rng(seed)
    module = ActorCriticRecurrent(
        action_dim=A,
        actor_hidden_dims=(),
        critic_hidden_dims=(),
        rnn_type=rnn_type,
        rnn_hidden_size=H,
        rnn_num_layers=L,
    )
    model = PolicyModel(module)
    params = model.init(jax.random.PRNGKey(seed), {"policy": (D,), "critic": (D,)})
    obs = rng.normal(size=(T, B, D)).astype(np.float32)
    dones = (rng.random((T, B)) < 0.25).astype(np.float32)
    hidden0 = model.initial_hidden(B)
    hidden0 = jax.tree.map(lambda x: jnp.asarray(rng.normal(size=x.shape), jnp.float32), hidden0)
    resets = np.concatenate([np.zeros((1, B), np.float32), dones[:-1]], 0)
    mean, _, _, _ = model.sequence(params, {"policy": obs, "critic": obs}, hidden0, jnp.asarray(resets))

    rnn = (torch.nn.LSTM if rnn_type == "lstm" else torch.nn.GRU)(D, H, L).double()
    _torch_from_flax(params["params"]["memory_a"], rnn)
    head = torch.nn.Linear(H, A).double()
    with torch.no_grad():
        head.weight.copy_(
            torch.from_numpy(np.asarray(params["params"]["actor"]["output"]["kernel"], np.float64).T)
        )
        head.bias.copy_(torch.from_numpy(np.asarray(params["params"]["actor"]["output"]["bias"], np.float64)))
    h_a = jax.tree.map(lambda x: np.asarray(x, np.float64), hidden0["actor"])
    expected = _rsl_rl_actor_means(rnn, head, obs.astype(np.float64), dones, h_a)
    np.testing.assert_allclose(mean, expected, rtol=1e-5, atol=1e-5)


@pytest.fixture(scope="module")
def recurrent_learner():
    cfg = resolve_config(
        "inverted_pendulum_pomdp",
        overrides=[
            "env.num_envs=8",
            "runner.num_steps_per_env=12",
            "policy.rnn_hidden_size=8",
            "policy.actor_hidden_dims=[8]",
            "policy.critic_hidden_dims=[8]",
            "env.episode_length=20",
            "algorithm.num_mini_batches=2",
        ],
    )
    learner = make_learner(make_env_from_config(cfg.env), cfg)
    ts, rs = jax.jit(learner.init)(jax.random.PRNGKey(0))
    return learner, ts, rs


def test_policy_group_hides_velocities(recurrent_learner):
    learner, _, rs = recurrent_learner
    assert rs.obs["policy"].shape == (8, 2) and rs.obs["critic"].shape == (8, 4)
    np.testing.assert_array_equal(rs.obs["policy"], rs.obs["critic"][:, :2])


def test_update_sequences_reproduce_rollout_log_probs(recurrent_learner):
    """Re-running stored sequences from the initial hidden state gives the acting log-probs (ratio 1)."""
    learner, ts, rs = recurrent_learner
    ts = ts.replace(normalizers=jax.tree.map(lambda x: x + 0.3, ts.normalizers))
    # Warm the hidden state up first so the stored initial state is not zero.
    rs, _, _ = jax.jit(learner.rollout)(ts, rs, jax.random.PRNGKey(1))
    assert float(jnp.abs(rs.hidden["actor"][0]).sum()) > 0
    new_rs, transitions, _ = jax.jit(learner.rollout)(ts, rs, jax.random.PRNGKey(2))
    assert float(transitions.dones.sum()) > 0  # episodes of 20 steps end inside the rollout
    nobs = InputNormalization().groups(ts.normalizers, transitions.obs)
    resets = jnp.concatenate([jnp.zeros_like(transitions.dones[:1]), transitions.dones[:-1]], 0)
    mean, std, values, _ = learner.model.sequence(ts.params, nobs, transitions.initial_hidden, resets)
    np.testing.assert_allclose(
        gaussian_log_prob(transitions.actions, mean, std), transitions.log_prob, atol=1e-5
    )
    np.testing.assert_allclose(values, transitions.values, atol=1e-5)
    # Bootstrapping the last value does not move the carried hidden state.
    before = jax.tree.map(np.asarray, new_rs.hidden)
    learner.critic_value(ts.params, ts.normalizers, new_rs.obs, new_rs.hidden)
    jax.tree.map(np.testing.assert_array_equal, before, jax.tree.map(np.asarray, new_rs.hidden))


def test_recurrent_minibatches_are_whole_environments(recurrent_learner):
    """A recurrent update's minibatches are whole environments' sequences, re-run from their
    stored initial memories: the batch stays `[T, N]`, an order partitions the environments, and
    the update's first step sees exactly the acting policy (its KL is st_rl's eps per action
    dimension; a minibatch cut across time or restarted from the wrong memory moves it)."""
    learner, ts, rs = recurrent_learner
    rs, _, _ = jax.jit(learner.rollout)(ts, rs, jax.random.PRNGKey(1))  # memories not zero
    rs, transitions, _ = jax.jit(learner.rollout)(ts, rs, jax.random.PRNGKey(2))
    last_values = learner.critic_value(ts.params, ts.normalizers, rs.obs, rs.hidden)
    steps, envs = transitions.rewards.shape
    batch, _ = jax.jit(functools.partial(make_batch, learner))(ts, transitions, last_values)
    assert batch.obs["policy"].shape[:2] == (steps, envs) and float(transitions.dones.sum()) > 0
    minibatches = learner.cfg.algorithm.num_mini_batches
    order = np.asarray(minibatch_indices(jax.random.PRNGKey(3), envs, 1, minibatches))
    assert order.shape == (minibatches, envs // minibatches)
    assert sorted(order.ravel().tolist()) == list(range(envs))
    update = jax.jit(functools.partial(ppo_update, learner))
    output, _ = update(ts, {}, transitions, last_values, jax.random.PRNGKey(4))
    metrics = output.metrics
    assert metrics["kl"].shape == (learner.cfg.algorithm.num_learning_epochs, minibatches)
    eps_only = learner.env.action_size * np.log1p(learner.cfg.algorithm.kl_epsilon)
    np.testing.assert_allclose(float(metrics["kl"][0, 0]), eps_only, rtol=0.02)
    assert float(np.max(metrics["kl"])) > 10 * eps_only  # later steps see a moved policy


def test_recurrent_run_resumes_exactly(tmp_path):
    """Hidden states are part of the checkpointed rollout state: 2 + resume + 2 iterations of an
    LSTM policy equal 4 straight iterations, value for value."""
    import json

    from strl_jax.runners.runner import train
    from strl_jax.train import main as train_main

    tiny = [
        "env.num_envs=8",
        "env.episode_length=20",
        "runner.num_steps_per_env=6",
        "policy.rnn_hidden_size=8",
        "policy.actor_hidden_dims=[8]",
        "policy.critic_hidden_dims=[8]",
        "algorithm.num_mini_batches=2",
        "algorithm.num_learning_epochs=1",
        "runner.num_eval_envs=2",
        "runner.eval_interval=2",
        "runner.save_interval=2",
        "runner.print_interval=1000",
    ]
    full = train(
        resolve_config("inverted_pendulum_pomdp", overrides=tiny + ["runner.max_iterations=4"]),
        tmp_path / "full",
        verbose=False,
    )
    split_dir = tmp_path / "split"
    train(
        resolve_config("inverted_pendulum_pomdp", overrides=tiny + ["runner.max_iterations=2"]),
        split_dir,
        verbose=False,
    )
    assert train_main(["--resume", str(split_dir), "--quiet", "runner.max_iterations=4"]) == 0
    time_keys = {"wall_time", "fps", "iteration_time"}
    rows = lambda d: [
        {k: v for k, v in json.loads(line).items() if k not in time_keys}
        for line in (d / "metrics.jsonl").read_text().splitlines()
    ]
    assert rows(split_dir) == rows(full.log_dir)
    assert any("eval_reward" in r for r in rows(split_dir))
    assert float(np.abs(np.asarray(full.rollout_state.hidden["actor"][0])).sum()) > 0
