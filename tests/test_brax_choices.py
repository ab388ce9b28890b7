"""brax PPO's implementation choices as options: GAE over `gae_horizon`-step segments, minibatches
of whole segments, the normaliser taking in the rollout before the update, masked time-outs.

No env program is compiled: GAE and minibatches are checked as functions, the learner's update
on a synthetic rollout."""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from brax.training.agents.ppo.losses import compute_gae as brax_compute_gae
from tiny_config import tiny

from strl_jax.agents.ppo import recomputed_advantages
from strl_jax.buffers.gae import compute_gae, normalize_advantages
from strl_jax.buffers.minibatch import minibatch_indices
from strl_jax.buffers.transitions import Transition
from strl_jax.configs import ConfigError, resolve_config
from strl_jax.envs import make_env_from_config
from strl_jax.networks.gaussian import gaussian_kl, gaussian_log_prob
from strl_jax.runners.learner_builder import make_learner
from strl_jax.train_loops.ppo_update import loss_settings, make_batch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import brax_mapping  # noqa: E402
import vs_brax  # noqa: E402

GAMMA, LAM = 0.97, 0.95


def random_rollout(steps: int, envs: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    rewards = rng.normal(size=(steps, envs)).astype(np.float32)
    values = rng.normal(size=(steps, envs)).astype(np.float32)
    last = rng.normal(size=(envs,)).astype(np.float32)
    dones = (rng.random((steps, envs)) < 0.15).astype(np.float32)
    truncated = dones * (rng.random((steps, envs)) < 0.5)
    return rewards, values, dones, truncated, last


def numpy_gae(rewards, values, dones, last, masked=None, gamma=GAMMA, lam=LAM):
    """One segment, the textbook recursion; masked steps get A = 0 and cut the sum."""
    steps = rewards.shape[0]
    masked = np.zeros_like(rewards) if masked is None else masked
    adv, out = np.zeros_like(last), np.zeros_like(rewards)
    for t in reversed(range(steps)):
        nxt = last if t == steps - 1 else values[t + 1]
        delta = (rewards[t] + gamma * (1 - dones[t]) * nxt - values[t]) * (1 - masked[t])
        adv = delta + gamma * lam * (1 - dones[t]) * (1 - masked[t]) * adv
        out[t] = adv
    return out


def test_gae_horizon_is_gae_segment_by_segment():
    """Every h-step segment is its own GAE, bootstrapped from V(s_{t+h}) (the next segment's
    first value, or `last_values` for the last segment)."""
    rewards, values, dones, _, last = random_rollout(12, 5)
    adv, ret = compute_gae(rewards, values, dones, last, GAMMA, LAM, horizon=4)
    for k in range(3):
        seg = slice(4 * k, 4 * k + 4)
        boot = last if k == 2 else values[4 * k + 4]
        expected = numpy_gae(rewards[seg], values[seg], dones[seg], boot)
        np.testing.assert_allclose(adv[seg], expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ret, adv + values, rtol=1e-6)
    whole, _ = compute_gae(rewards, values, dones, last, GAMMA, LAM)
    np.testing.assert_allclose(whole, numpy_gae(rewards, values, dones, last), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="gae_horizon=5"):
        compute_gae(rewards, values, dones, last, GAMMA, LAM, horizon=5)


def test_masked_timeouts_match_brax_compute_gae():
    """`masked` = brax's `bootstrap_on_timeout=False`: its value targets `vs` per unroll_length
    segment equal strl_jax's returns (time-out steps: A = 0, R = V)."""
    h = 3
    rewards, values, dones, truncated, last = random_rollout(9, 6, seed=1)
    adv, ret = compute_gae(rewards, values, dones, last, GAMMA, LAM, horizon=h, masked=truncated)
    assert np.all(np.asarray(adv)[truncated > 0] == 0)
    for k in range(3):
        seg = slice(h * k, h * k + h)
        boot = last if k == 2 else values[h * k + h]
        vs, _ = brax_compute_gae(
            truncation=truncated[seg],
            termination=dones[seg] * (1 - truncated[seg]),
            rewards=rewards[seg],
            values=values[seg],
            bootstrap_value=boot,
            lambda_=LAM,
            discount=GAMMA,
        )
        np.testing.assert_allclose(ret[seg], vs, rtol=1e-5, atol=1e-5)
    expected = numpy_gae(rewards, values, dones, last, masked=truncated)
    np.testing.assert_allclose(
        compute_gae(rewards, values, dones, last, GAMMA, LAM, masked=truncated)[0],
        expected,
        rtol=1e-5,
        atol=1e-6,
    )


def segments_of(columns: np.ndarray, num_envs: int, h: int) -> set:
    return {(int(c) % num_envs, int(c) // num_envs // h) for c in columns}


def test_trajectory_minibatches_hold_whole_segments_once_per_epoch():
    envs, steps, h, m = 8, 12, 3, 4
    order = np.asarray(minibatch_indices(jax.random.PRNGKey(3), envs, steps, m, segment_length=h))
    assert order.shape == (m, envs * steps // m)
    np.testing.assert_array_equal(np.sort(order.reshape(-1)), np.arange(envs * steps))
    seen = set()
    for row in order:
        segs = segments_of(row, envs, h)
        assert len(segs) * h == len(row)  # only whole segments
        assert not segs & seen
        seen |= segs
    # sharded over two devices: each minibatch is the union of the devices' parts
    halves = [
        np.asarray(minibatch_indices(jax.random.PRNGKey(3), envs // 2, steps, m, first, segment_length=h))
        for first in (0, envs // 2)
    ]
    for i in range(m):
        parts = set()
        for first, part in zip((0, envs // 2), halves, strict=True):
            parts |= {(c // (envs // 2)) * envs + first + c % (envs // 2) for c in part[i].tolist()}
        assert parts == set(order[i].tolist())


# ----------------------------------------------------------------------------- the learner
CHOICES = ["runner.num_steps_per_env=8", "algorithm.gae_horizon=4", "algorithm.minibatch_unit=trajectory"]


def synthetic_rollout(normalizer_update: str, timeout: str = "final_obs", *extra: str):
    """The tiny learner, its initial states and a synthetic rollout acted by its initial policy:
    `(learner, (train_state, rollout_state), transitions, observation after the rollout)`."""
    cfg = resolve_config(
        "inverted_pendulum",
        overrides=tiny(
            *CHOICES,
            "algorithm.schedule=fixed",
            "algorithm.learning_rate=0.0",
            f"runner.normalizer_update={normalizer_update}",
            f"algorithm.timeout_bootstrap={timeout}",
            *extra,
        ),
    )
    learner = make_learner(make_env_from_config(cfg.env), cfg)
    train_state, rollout_state = jax.jit(learner.init)(jax.random.PRNGKey(0))
    steps, n = cfg.runner.num_steps_per_env, cfg.env.num_envs
    shapes = learner.env.observation_shapes()
    keys = iter(jax.random.split(jax.random.PRNGKey(1), 8))
    obs = {k: 3.0 + 2.0 * jax.random.normal(next(keys), (steps, n, *s)) for k, s in shapes.items()}
    flat = {k: v.reshape(steps * n, *v.shape[2:]) for k, v in obs.items()}
    mean, std, _, _ = learner.actor.forward(train_state.params, train_state.normalizers, flat, {}, {})
    actions = mean + std * jax.random.normal(next(keys), mean.shape)
    values = learner.critic_value(train_state.params, train_state.normalizers, flat, {})

    def steps_n(x):
        return x.reshape(steps, n, *x.shape[1:])

    dones = (jax.random.uniform(next(keys), (steps, n)) < 0.1).astype(jnp.float32)
    transitions = Transition(
        obs=obs,
        actions=steps_n(actions),
        log_prob=steps_n(gaussian_log_prob(actions, mean, std)),
        mean=steps_n(mean),
        std=steps_n(std),
        values=steps_n(values),
        rewards=jnp.ones((steps, n)),
        dones=dones,
        truncated=dones if timeout == "none" else None,
    )

    last = {k: 3.0 + 2.0 * jax.random.normal(next(keys), (n, *s)) for k, s in shapes.items()}
    return learner, (train_state, rollout_state), transitions, last


def one_update(normalizer_update: str, timeout: str = "final_obs", *extra: str):
    """One iteration of the tiny learner on a synthetic rollout, learning rate 0: the KL of the
    update is then only what the normaliser moved."""
    learner, (train_state, rollout_state), transitions, last = synthetic_rollout(
        normalizer_update, timeout, *extra
    )

    class GivenRollout:  # a rollout source (`train_loops.rollout.RolloutSource`) of the synthetic rollout
        fixed_rate = None

        def __call__(self, learner, ts, rs, key):
            return rs, transitions, {"parts": {}}, (last, {}), {}

    iterate = jax.jit(lambda t, r: learner.iterate(t, r, GivenRollout()))
    new_state, _, metrics = iterate(train_state, rollout_state)
    return learner, (train_state, rollout_state), new_state, metrics


@pytest.fixture(scope="module")
def updates():
    # `before` with every brax choice, masked time-outs included
    return {"after": one_update("after"), "before": one_update("before", timeout="none")}


def test_normalizer_order_is_observable(updates):
    """Both orders leave the same statistics; only `before` lets the update see them (brax), so
    the unchanged policy already differs from the acting one: KL > 0 instead of exactly 0."""
    (_, _, after, m_after), (_, _, before, m_before) = updates["after"], updates["before"]
    jax.tree.map(np.testing.assert_allclose, after.normalizers, before.normalizers)
    ones = jnp.ones((1, learner_action_size(updates)))
    same = float(gaussian_kl(ones, ones, ones, ones)[0])  # rsl_rl's KL has a 1e-5 in its log
    np.testing.assert_allclose(float(m_after["scalars"]["kl"]), same, rtol=1e-3)
    assert float(m_before["scalars"]["kl"]) > same + 1e-4


def learner_action_size(updates) -> int:
    return updates["after"][0].env.action_size


def test_timeout_mask_is_stored_only_when_used(updates):
    """`timeout_bootstrap: none` keeps the time-out flags in the rollout (traced, not compiled)."""
    for name, stored in (("before", True), ("after", False)):
        learner, states, _, _ = updates[name]
        _, transitions, _ = jax.eval_shape(learner.rollout, *states, jax.random.PRNGKey(1))
        if stored:
            assert transitions.truncated.shape == transitions.dones.shape
        else:
            assert transitions.truncated is None


def test_config_refusals():
    def resolve(*overrides):
        return resolve_config("inverted_pendulum", overrides=tiny(*overrides))

    with pytest.raises(
        ConfigError, match="gae_horizon=3 must be a positive divisor of runner.num_steps_per_env=8"
    ):
        resolve("algorithm.gae_horizon=3")
    with pytest.raises(ConfigError, match="num_mini_batches=32 must divide the 16 segments"):
        resolve("algorithm.minibatch_unit=trajectory", "algorithm.num_mini_batches=32")
    with pytest.raises(ConfigError, match="recurrent policy takes whole rollouts"):
        resolve(
            "policy.class_name=ActorCriticRecurrent",
            "algorithm.minibatch_unit=trajectory",
            "algorithm.gae_horizon=4",
        )
    for key, value in [
        ("algorithm.minibatch_unit", "segment"),
        ("runner.normalizer_update", "during"),
        ("algorithm.timeout_bootstrap", "mask"),
    ]:
        with pytest.raises(ConfigError, match=f"unknown {key} '{value}'; valid choices"):
            resolve(f"{key}={value}")
    resolve("algorithm.gae_horizon=4", "algorithm.minibatch_unit=trajectory")  # accepted


def test_brax_choices_are_valid_settings_and_matched_takes_the_winner():
    kw = vs_brax.brax_settings("inverted_pendulum", 1, 1, True, 128, {})
    every = brax_mapping.matched(kw, choices=brax_mapping.BRAX_CHOICE_NAMES)
    cfg = resolve_config("inverted_pendulum", overrides=brax_mapping.dotted_overrides(every))
    assert (cfg.algorithm.gae_horizon, cfg.algorithm.minibatch_unit) == (kw["unroll_length"], "trajectory")
    assert (cfg.runner.normalizer_update, cfg.algorithm.timeout_bootstrap) == ("before", "none")
    assert (cfg.algorithm.advantage_estimator, cfg.algorithm.recompute_advantages) == ("brax", True)
    matched = resolve_config(
        "inverted_pendulum", overrides=brax_mapping.dotted_overrides(brax_mapping.matched(kw))
    )
    assert matched.runner.normalizer_update == "before"
    assert (matched.algorithm.gae_horizon, matched.algorithm.minibatch_unit) == (None, "trajectory")
    assert (matched.algorithm.recompute_advantages, matched.algorithm.advantage_estimator) == (True, "gae")
    with pytest.raises(ValueError, match="valid choices"):
        brax_mapping.brax_choices(kw, ["unroll"])


def test_brax_advantage_matches_brax_compute_gae():
    """`estimator="brax"`: brax's advantages r_t + gamma vs_{t+1} - V_t per unroll_length segment
    (masked time-outs: 0); the returns are GAE's."""
    h = 3
    rewards, values, dones, truncated, last = random_rollout(9, 6, seed=2)
    args = (rewards, values, dones, last, GAMMA, LAM, h, truncated)
    adv, ret = compute_gae(*args, estimator="brax")
    np.testing.assert_array_equal(ret, compute_gae(*args)[1])
    assert not np.allclose(adv, compute_gae(*args)[0])
    for k in range(3):
        seg = slice(h * k, h * k + h)
        _, expected = brax_compute_gae(
            truncation=truncated[seg],
            termination=dones[seg] * (1 - truncated[seg]),
            rewards=rewards[seg],
            values=values[seg],
            bootstrap_value=last if k == 2 else values[h * k + h],
            lambda_=LAM,
            discount=GAMMA,
        )
        np.testing.assert_allclose(adv[seg], expected, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="unknown advantage estimator 'vtrace'"):
        compute_gae(*args, estimator="vtrace")


RECOMPUTE = ("algorithm.recompute_advantages=true", "algorithm.normalize_advantage_per_mini_batch=true")


@pytest.mark.parametrize("estimator", ["gae", "brax"])
def test_recomputed_advantages_follow_the_critic(estimator):
    """With the acting critic a minibatch's recomputed advantages are the rollout's (normalised
    over the minibatch); with another critic they are GAE of its values, segment by segment,
    bootstrapped from its value of each segment's next observation."""
    learner, (ts, _), transitions, last = synthetic_rollout(
        "after", "none", *RECOMPUTE, f"algorithm.advantage_estimator={estimator}"
    )
    last_values = learner.critic_value(ts.params, ts.normalizers, last, {})
    batch, _ = make_batch(learner, ts, transitions, last_values, None, last)
    h, n = 4, learner.env.num_envs
    order = minibatch_indices(jax.random.PRNGKey(2), n, transitions.rewards.shape[0], 2, segment_length=h)
    mb = batch.select_columns(order[0])

    def recomputed(params):
        values = learner.model.sequence(params, mb.obs, mb.hidden, mb.resets, mb.draws)[2]
        return values, recomputed_advantages(params, mb, values, loss_settings(learner))

    _, same = recomputed(ts.params)
    np.testing.assert_allclose(same.returns, mb.returns, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(same.advantages, normalize_advantages(mb.advantages), rtol=1e-4, atol=1e-4)
    params = jax.tree.map(lambda x: 1.1 * x + 0.01, ts.params)
    values, other = recomputed(params)
    assert not np.allclose(other.returns, mb.returns, atol=1e-3)
    if estimator == "gae":
        inputs = jax.tree.map(np.asarray, mb.gae_inputs)
        expected = []
        for j in range(values.shape[1] // h):
            seg = slice(j * h, (j + 1) * h)
            boot_obs = {k: v[0, (j + 1) * h - 1][None] for k, v in inputs["next_obs"].items()}
            boot = np.asarray(learner.model.value(params, boot_obs, {}))
            col = lambda x, seg=seg: x[0, seg][:, None]  # noqa: E731
            expected.append(
                numpy_gae(
                    col(inputs["rewards"]),
                    col(np.asarray(values)),
                    col(inputs["dones"]),
                    boot,
                    col(inputs["masked"]),
                    learner.cfg.algorithm.gamma,
                    learner.cfg.algorithm.lam,
                )[:, 0]
            )
        expected = np.concatenate(expected)[None]
        np.testing.assert_allclose(other.returns, expected + np.asarray(values), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(other.advantages, normalize_advantages(expected), rtol=1e-4, atol=1e-4)
    # the whole iteration runs with it
    _, _, new_state, metrics = one_update(
        "after", "none", *RECOMPUTE, f"algorithm.advantage_estimator={estimator}"
    )
    assert np.isfinite(float(metrics["scalars"]["surrogate"]))


def test_recomputed_advantages_refusals():
    def resolve(*overrides):
        return resolve_config("inverted_pendulum", overrides=tiny(*overrides))

    base = "algorithm.recompute_advantages=true"
    with pytest.raises(
        ConfigError, match="recompute_advantages=true needs algorithm.minibatch_unit=trajectory"
    ):
        resolve(base, "algorithm.normalize_advantage_per_mini_batch=true")
    with pytest.raises(ConfigError, match="needs algorithm.normalize_advantage_per_mini_batch=true"):
        resolve(base, "algorithm.minibatch_unit=trajectory")
    with pytest.raises(ConfigError, match="needs a feed-forward policy.class_name"):
        resolve(*RECOMPUTE, "algorithm.minibatch_unit=trajectory", "policy.class_name=ActorCriticRecurrent")
    with pytest.raises(ConfigError, match=r"unknown algorithm.advantage_estimator 'td'; valid choices"):
        resolve("algorithm.advantage_estimator=td")
    resolve(*RECOMPUTE, "algorithm.minibatch_unit=trajectory", "algorithm.gae_horizon=4")  # accepted
