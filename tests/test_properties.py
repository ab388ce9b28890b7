"""Property tests: strl_jax's math against small numpy reference implementations.

Each test draws random inputs with hypothesis and checks one library function against a
float64 numpy re-statement of the formula in REFERENCE.md section 1 (rsl_rl / st_rl semantics).
Shapes come from small fixed sets so that jitted functions compile only a handful of times.
"""

from __future__ import annotations

import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strl_jax.agents.ppo import (
    adaptive_learning_rate,
    make_optimizer,
    surrogate_loss,
    value_loss,
    weighted_total,
)
from strl_jax.buffers.gae import bootstrap_timeouts, compute_gae, normalize_advantages
from strl_jax.buffers.minibatch import env_block_size, merge_time_env, minibatch_indices, select_columns
from strl_jax.masked_rows import reserved_rows, where_rows
from strl_jax.networks.gaussian import gaussian_entropy, gaussian_kl, gaussian_log_prob, gaussian_sample
from strl_jax.networks.normalizer import init_normalizer, normalize, update_normalizer

PROPS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FEW = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

seeds = st.integers(0, 2**31 - 1)
gammas = st.floats(0.0, 1.0)
lams = st.floats(0.0, 1.0)
clips = st.floats(0.01, 0.5)

# Jitted wrappers with gamma / lam traced (not static), so they compile once per shape only.
_gae = jax.jit(compute_gae)
_boot = jax.jit(bootstrap_timeouts)


def f32(x):
    return np.asarray(x, dtype=np.float32)


# ----------------------------------------------------------------------------- numpy references


def np_gae(rewards, values, dones, last_values, gamma, lam):
    """rsl_rl's PPO.compute_returns loop, in float64."""
    rewards, values, dones, last_values = (
        np.asarray(a, np.float64) for a in (rewards, values, dones, last_values)
    )
    steps = rewards.shape[0]
    advantages = np.zeros_like(rewards)
    advantage = np.zeros_like(last_values)
    for t in reversed(range(steps)):
        next_values = last_values if t == steps - 1 else values[t + 1]
        not_done = 1.0 - dones[t]
        delta = rewards[t] + not_done * gamma * next_values - values[t]
        advantage = delta + not_done * gamma * lam * advantage
        advantages[t] = advantage
    return advantages, advantages + values


def np_normalize_advantages(a):
    a = np.asarray(a, np.float64)
    return (a - a.mean()) / (a.std(ddof=1) + 1e-8)


def np_log_prob(actions, mean, std):
    return np.sum(-0.5 * ((actions - mean) / std) ** 2 - np.log(std) - 0.5 * np.log(2 * np.pi), axis=-1)


def np_entropy(std):
    return np.sum(0.5 + 0.5 * np.log(2 * np.pi) + np.log(std), axis=-1)


def np_kl(old_mean, old_std, mean, std, eps):
    return np.sum(
        np.log(std / old_std + eps) + (old_std**2 + (old_mean - mean) ** 2) / (2 * std**2) - 0.5, axis=-1
    )


def np_surrogate(logp, old_logp, adv, clip):
    ratio = np.exp(logp - old_logp)
    return np.mean(np.maximum(-adv * ratio, -adv * np.clip(ratio, 1 - clip, 1 + clip)))


def np_value_loss(values, old_values, returns, clip, use_clipped):
    if not use_clipped:
        return np.mean((returns - values) ** 2)
    clipped = old_values + np.clip(values - old_values, -clip, clip)
    return np.mean(np.maximum((values - returns) ** 2, (clipped - returns) ** 2))


def np_adaptive_lr(lr, kl, desired_kl):
    """rsl_rl PPO.update's branch, with the comparisons done in float32 like a float32 kl_mean tensor."""
    kl = np.float32(kl)
    if kl > np.float32(desired_kl * 2.0):
        return max(1e-5, lr / 1.5)
    if kl < np.float32(desired_kl / 2.0) and kl > 0.0:
        return min(1e-2, lr * 1.5)
    return lr


# ----------------------------------------------------------------------------- GAE


@st.composite
def rollouts(draw):
    """Time-major rollout [T, N] with random dones, time-outs a subset of the dones."""
    steps = draw(st.sampled_from([1, 3, 8]))
    envs = draw(st.sampled_from([1, 4]))
    rng = np.random.default_rng(draw(seeds))
    p_done = draw(st.sampled_from([0.0, 0.2, 0.5, 1.0]))
    dones = rng.random((steps, envs)) < p_done
    time_outs = dones & (rng.random((steps, envs)) < 0.5)
    return dict(
        rewards=f32(rng.normal(size=(steps, envs)) * draw(st.sampled_from([0.1, 1.0, 5.0]))),
        values=f32(rng.normal(size=(steps, envs)) * 3.0),
        last_values=f32(rng.normal(size=(envs,)) * 3.0),
        dones=dones,
        time_outs=time_outs,
    )


@PROPS
@given(rollouts(), gammas, lams)
def test_gae_matches_numpy_loop(ro, gamma, lam):
    """compute_gae equals rsl_rl's backward loop for any dones pattern, gamma and lambda, and R = A + V."""
    adv, ret = _gae(
        ro["rewards"], ro["values"], f32(ro["dones"]), ro["last_values"], jnp.float32(gamma), jnp.float32(lam)
    )
    chex.assert_shape([adv, ret], ro["rewards"].shape)
    ref_adv, ref_ret = np_gae(ro["rewards"], ro["values"], ro["dones"], ro["last_values"], gamma, lam)
    np.testing.assert_allclose(adv, ref_adv, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(ret, ref_ret, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(ret - ro["values"], adv, rtol=1e-6, atol=1e-5)


@PROPS
@given(rollouts(), gammas, lams)
def test_gae_with_timeout_bootstrap_matches_numpy(ro, gamma, lam):
    """bootstrap_timeouts adds gamma*V*timeout to the reward; GAE then matches the numpy loop."""
    boot = _boot(ro["rewards"], ro["time_outs"], ro["values"], jnp.float32(gamma))
    ref_boot = ro["rewards"].astype(np.float64) + gamma * ro["values"] * ro["time_outs"]
    np.testing.assert_allclose(boot, ref_boot, rtol=1e-6, atol=1e-5)
    # rewards are untouched where there is no time-out
    np.testing.assert_array_equal(np.asarray(boot)[~ro["time_outs"]], ro["rewards"][~ro["time_outs"]])
    adv, ret = _gae(
        boot, ro["values"], f32(ro["dones"]), ro["last_values"], jnp.float32(gamma), jnp.float32(lam)
    )
    ref_adv, ref_ret = np_gae(ref_boot, ro["values"], ro["dones"], ro["last_values"], gamma, lam)
    np.testing.assert_allclose(adv, ref_adv, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(ret, ref_ret, rtol=1e-5, atol=1e-4)


@PROPS
@given(rollouts(), gammas)
def test_gae_limits_lambda_one_and_zero(ro, gamma):
    """lam=1 without dones gives discounted MC returns bootstrapped by V_T; lam=0 gives one-step TD."""
    r, v, lv = ro["rewards"].astype(np.float64), ro["values"].astype(np.float64), ro["last_values"]
    steps = r.shape[0]
    no_dones = np.zeros_like(r, dtype=np.float32)
    _, ret = _gae(ro["rewards"], ro["values"], no_dones, lv, jnp.float32(gamma), jnp.float32(1.0))
    mc = np.stack(
        [
            sum(gamma ** (k - t) * r[k] for k in range(t, steps)) + gamma ** (steps - t) * lv
            for t in range(steps)
        ]
    )
    np.testing.assert_allclose(ret, mc, rtol=1e-5, atol=1e-4)
    adv, _ = _gae(ro["rewards"], ro["values"], f32(ro["dones"]), lv, jnp.float32(gamma), jnp.float32(0.0))
    next_v = np.concatenate([v[1:], lv[None]], axis=0)
    td = r + gamma * (1.0 - ro["dones"]) * next_v - v
    np.testing.assert_allclose(adv, td, rtol=1e-5, atol=1e-4)


def test_gae_done_cuts_the_bootstrap():
    """A done at step t stops both the value bootstrap and the advantage recursion from t+1."""
    rewards = jnp.array([[1.0], [2.0], [4.0]])
    values = jnp.array([[10.0], [20.0], [30.0]])
    dones = jnp.array([[0.0], [1.0], [0.0]])
    adv, ret = compute_gae(rewards, values, dones, jnp.array([100.0]), gamma=0.5, lam=1.0)
    # step 1 is terminal: R_1 = r_1; step 2 bootstraps from last value; step 0 sees R_1 only.
    np.testing.assert_allclose(np.asarray(ret)[:, 0], [1.0 + 0.5 * 2.0, 2.0, 4.0 + 0.5 * 100.0])
    np.testing.assert_allclose(adv, ret - values)


@st.composite
def advantage_arrays(draw):
    shape = draw(st.sampled_from([(2, 1), (3, 4), (8, 4), (16, 2)]))
    rng = np.random.default_rng(draw(seeds))
    scale = draw(st.sampled_from([0.01, 1.0, 100.0]))
    offset = draw(st.sampled_from([0.0, 3.0, -50.0]))
    return f32(offset + scale * rng.normal(size=shape))


@PROPS
@given(advantage_arrays())
def test_normalize_advantages_matches_numpy(a):
    """normalize_advantages = (A - mean) / (unbiased std + 1e-8) over the batch (torch's Tensor.std())."""
    out = np.asarray(normalize_advantages(jnp.asarray(a)))
    ref = np_normalize_advantages(a)
    # float32 centring loses about eps32 * max|A| absolute, i.e. that divided by std after scaling
    tol = 1e-4 + 4 * np.finfo(np.float32).eps * np.abs(a).max() / a.astype(np.float64).std(ddof=1)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=tol)
    assert abs(out.astype(np.float64).mean()) < tol
    assert out.astype(np.float64).std(ddof=1) == pytest.approx(1.0, abs=1e-3 + tol)


# ----------------------------------------------------------------------------- normaliser


@st.composite
def batch_sequences(draw):
    dim = draw(st.sampled_from([1, 3]))
    sizes = draw(st.lists(st.integers(1, 6), min_size=1, max_size=6))
    rng = np.random.default_rng(draw(seeds))
    offset = rng.normal(size=(dim,)) * draw(st.sampled_from([0.0, 5.0]))
    scale = draw(st.sampled_from([0.1, 1.0, 3.0]))
    return [f32(offset + scale * rng.normal(size=(n, dim))) for n in sizes]


def _run_normalizer(batches, until):
    state = init_normalizer(batches[0].shape[-1])
    for x in batches:
        state = update_normalizer(state, jnp.asarray(x), until=until)
    return state


def _reference_stats(batches, until):
    """Running stats of every batch that arrives while count < until (rsl_rl checks before updating)."""
    seen, count = [], 0
    for x in batches:
        if until is not None and count >= until:
            break
        seen.append(x.astype(np.float64))
        count += x.shape[0]
    data = np.concatenate(seen, axis=0)
    return data.mean(axis=0), data.var(axis=0), count


@PROPS
@given(batch_sequences(), st.one_of(st.none(), st.integers(1, 20)))
def test_normalizer_equals_statistics_of_all_data_seen(batches, until):
    """After any sequence of batches, mean/var (biased)/count equal the moments of the data seen; with
    `until`, updates stop once count >= until, and the batch that crosses `until` is fully included."""
    state = _run_normalizer(batches, until)
    mean, var, count = _reference_stats(batches, until)
    assert float(state.count) == count
    np.testing.assert_allclose(state.mean, mean, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(state.var, var, rtol=1e-4, atol=1e-5)
    x = batches[-1]
    np.testing.assert_allclose(
        normalize(state, jnp.asarray(x)), (x - mean) / (np.sqrt(var) + 1e-2), rtol=1e-4, atol=1e-4
    )


def test_normalizer_initial_state_and_until_boundary():
    """Fresh state is (0, 1, 0); with until=4 and batches of 3 the 2nd batch is used, the 3rd ignored."""
    state = init_normalizer((2,))
    np.testing.assert_array_equal(state.mean, [0.0, 0.0])
    np.testing.assert_array_equal(state.var, [1.0, 1.0])
    assert float(state.count) == 0.0
    np.testing.assert_allclose(normalize(state, jnp.ones((1, 2))), np.full((1, 2), 1.0 / 1.01), rtol=1e-6)
    b1, b2, b3 = (jnp.full((3, 2), v) for v in (1.0, 3.0, 100.0))
    s = update_normalizer(state, b1, until=4)
    s = update_normalizer(s, b2, until=4)
    assert float(s.count) == 6.0
    np.testing.assert_allclose(s.mean, [2.0, 2.0])
    np.testing.assert_allclose(s.var, [1.0, 1.0])
    frozen = update_normalizer(s, b3, until=4)
    chex.assert_trees_all_equal(frozen, s)
    # exactly at the limit is frozen too (count >= until)
    s6 = update_normalizer(init_normalizer((2,)), jnp.zeros((6, 2)), until=6)
    chex.assert_trees_all_equal(update_normalizer(s6, b3, until=6), s6)


def test_normalizer_flattens_leading_axes():
    """A [T, N, d] batch updates the statistics exactly like its [T*N, d] flattening."""
    x = jnp.asarray(f32(np.random.default_rng(0).normal(size=(3, 4, 2))))
    a = update_normalizer(init_normalizer(2), x)
    b = update_normalizer(init_normalizer(2), x.reshape(12, 2))
    chex.assert_trees_all_close(a, b)
    assert float(a.count) == 12.0


# ----------------------------------------------------------------------------- Gaussian


@st.composite
def gaussian_pairs(draw):
    shape = draw(st.sampled_from([(1,), (3,), (5, 2), (4, 6)]))
    rng = np.random.default_rng(draw(seeds))
    std_scale = draw(st.sampled_from([0.05, 1.0, 4.0]))
    return dict(
        actions=f32(rng.normal(size=shape) * 2),
        old_mean=f32(rng.normal(size=shape)),
        old_std=f32(std_scale * np.exp(rng.uniform(-1, 1, size=shape))),
        mean=f32(rng.normal(size=shape)),
        std=f32(std_scale * np.exp(rng.uniform(-1, 1, size=shape))),
    )


@PROPS
@given(gaussian_pairs())
def test_gaussian_log_prob_and_entropy_match_numpy(g):
    """Log-density and entropy of the diagonal Gaussian are summed over the last axis."""
    lp = gaussian_log_prob(g["actions"], g["mean"], g["std"])
    chex.assert_shape(lp, g["actions"].shape[:-1])
    np.testing.assert_allclose(lp, np_log_prob(g["actions"], g["mean"], g["std"]), rtol=1e-5, atol=1e-4)
    ent = gaussian_entropy(g["std"])
    chex.assert_shape(ent, g["std"].shape[:-1])
    np.testing.assert_allclose(ent, np_entropy(g["std"]), rtol=1e-5, atol=1e-5)
    # log-prob at the mean is the highest and equals -(H - d/2)
    at_mean = gaussian_log_prob(g["mean"], g["mean"], g["std"])
    assert np.all(np.asarray(at_mean) >= np.asarray(lp) - 1e-5)
    np.testing.assert_allclose(at_mean, -(np.asarray(ent) - 0.5 * g["std"].shape[-1]), rtol=1e-5, atol=1e-5)


@PROPS
@given(gaussian_pairs(), st.sampled_from([0.0, 1e-5]))
def test_gaussian_kl_matches_numpy(g, eps):
    """gaussian_kl follows st_rl's formula (log(sigma/sigma_old + eps) ...) for eps=1e-5 and eps=0."""
    kl = gaussian_kl(g["old_mean"], g["old_std"], g["mean"], g["std"], eps=eps)
    chex.assert_shape(kl, g["mean"].shape[:-1])
    ref = np_kl(*(g[k].astype(np.float64) for k in ("old_mean", "old_std", "mean", "std")), eps)
    np.testing.assert_allclose(kl, ref, rtol=1e-4, atol=1e-4)


@PROPS
@given(gaussian_pairs())
def test_gaussian_kl_is_nonnegative_and_zero_on_itself(g):
    """Exact KL (eps=0) is >= 0 and KL(p, p) = 0; st_rl's eps=1e-5 gives KL(p, p) = d*log(1 + 1e-5)."""
    kl = np.asarray(gaussian_kl(g["old_mean"], g["old_std"], g["mean"], g["std"], eps=0.0))
    assert np.all(kl >= -1e-5 * g["mean"].shape[-1])
    same = np.asarray(gaussian_kl(g["mean"], g["std"], g["mean"], g["std"], eps=0.0))
    np.testing.assert_allclose(same, 0.0, atol=1e-6)
    same_eps = np.asarray(gaussian_kl(g["mean"], g["std"], g["mean"], g["std"]))
    np.testing.assert_allclose(same_eps, g["mean"].shape[-1] * math.log1p(1e-5), rtol=1e-2)


@FEW
@given(seeds, st.sampled_from([(1,), (4, 3)]))
def test_gaussian_sample_is_mean_plus_std_times_normal(seed, shape):
    """gaussian_sample(key) = mean + std * N(0, I) drawn with the same key, in the mean's shape/dtype."""
    rng = np.random.default_rng(seed)
    mean, std = f32(rng.normal(size=shape)), f32(np.exp(rng.normal(size=shape)))
    key = jax.random.PRNGKey(seed)
    sample = gaussian_sample(key, jnp.asarray(mean), jnp.asarray(std))
    chex.assert_shape(sample, shape)
    chex.assert_type(sample, jnp.float32)
    np.testing.assert_allclose(
        sample, mean + std * np.asarray(jax.random.normal(key, shape)), rtol=1e-6, atol=1e-6
    )


# ----------------------------------------------------------------------------- PPO losses


@st.composite
def loss_inputs(draw):
    size = draw(st.sampled_from([1, 4, 16]))
    rng = np.random.default_rng(draw(seeds))
    spread = draw(st.sampled_from([0.01, 0.3, 2.0]))
    old_logp = rng.normal(size=size) - 2.0
    old_values = rng.normal(size=size) * 2
    return dict(
        logp=f32(old_logp + spread * rng.normal(size=size)),
        old_logp=f32(old_logp),
        adv=f32(rng.normal(size=size)),
        values=f32(old_values + spread * rng.normal(size=size)),
        old_values=f32(old_values),
        returns=f32(rng.normal(size=size) * 2),
    )


@PROPS
@given(loss_inputs(), clips, st.sampled_from([2.0, 3.0, 10.0]))
def test_dual_clip_bounds_negative_advantages_and_keeps_the_rest(d, clip, dual):
    """Dual-clip PPO: each term with A < 0 is min(PPO's term, -c A); with A >= 0 PPO's term."""
    out = float(surrogate_loss(d["logp"], d["old_logp"], d["adv"], clip, dual))
    adv = d["adv"].astype(np.float64)
    ratio = np.exp(d["logp"].astype(np.float64) - d["old_logp"])
    ppo = np.maximum(-adv * ratio, -adv * np.clip(ratio, 1 - clip, 1 + clip))
    ref = np.mean(np.where(adv < 0, np.minimum(ppo, -dual * adv), ppo))
    assert out == pytest.approx(ref, rel=1e-5, abs=1e-5)


def test_dual_clip_keeps_a_very_unlikely_executed_action_finite():
    """An executed action 100 nats less likely under the old policy than under the new one (a TPPO
    teacher's action the student has moved towards): PPO's ratio overflows to inf and its gradient
    is NaN; the dual clip gives c |A| and a zero gradient."""
    old = jnp.asarray([-110.0, -1.0])
    adv = jnp.asarray([-1.0, 0.5])

    def loss(logp, dual):
        return surrogate_loss(logp, old, adv, 0.2, dual)

    logp = jnp.asarray([-10.0, -1.0])
    assert not np.isfinite(float(loss(logp, None)))
    assert float(loss(logp, 3.0)) == pytest.approx((3.0 * 1.0 - 0.5) / 2)
    grad = jax.grad(loss)(logp, 3.0)
    assert np.all(np.isfinite(np.asarray(grad))) and float(grad[0]) == 0.0
    assert not np.isfinite(np.asarray(jax.grad(loss)(logp, None))).all()


@PROPS
@given(loss_inputs(), clips)
def test_surrogate_loss_matches_numpy(d, clip):
    """Clipped surrogate mean(max(-A r, -A clip(r))) matches numpy, is >= -mean(A r), is -mean(A) at r=1."""
    out = float(surrogate_loss(d["logp"], d["old_logp"], d["adv"], clip))
    ref = np_surrogate(d["logp"].astype(np.float64), d["old_logp"], d["adv"], clip)
    assert out == pytest.approx(ref, rel=1e-5, abs=1e-5)
    # pessimistic bound: never below the unclipped objective
    # (float32 against float64: the margin is relative, the ratio reaches e^5)
    ratio = np.exp(d["logp"].astype(np.float64) - d["old_logp"])
    unclipped = float(np.mean(-d["adv"] * ratio))
    assert out >= unclipped - 1e-5 * max(1.0, abs(unclipped))
    # at ratio 1 the loss is -mean(A)
    at_one = float(surrogate_loss(d["old_logp"], d["old_logp"], d["adv"], clip))
    assert at_one == pytest.approx(-float(np.mean(d["adv"].astype(np.float64))), abs=1e-6)


@PROPS
@given(loss_inputs(), clips)
def test_value_loss_clipped_and_plain_match_numpy(d, clip):
    """Clipped value loss matches numpy, is >= the plain MSE, and equals it when |V - V_old| <= clip."""
    args = (d["values"], d["old_values"], d["returns"])
    clipped = float(value_loss(*args, clip, True))
    plain = float(value_loss(*args, clip, False))
    ref_args = tuple(a.astype(np.float64) for a in args)
    assert clipped == pytest.approx(np_value_loss(*ref_args, clip, True), rel=1e-5, abs=1e-5)
    assert plain == pytest.approx(np_value_loss(*ref_args, clip, False), rel=1e-5, abs=1e-5)
    assert clipped >= plain - 1e-5
    near = d["old_values"] + np.clip(d["values"] - d["old_values"], -0.9 * clip, 0.9 * clip)
    near_clipped = float(value_loss(near, d["old_values"], d["returns"], clip, True))
    near_plain = float(value_loss(near, d["old_values"], d["returns"], clip, False))
    assert near_clipped == pytest.approx(near_plain, rel=1e-6, abs=1e-6)


@PROPS
@given(
    st.floats(1e-6, 5e-2),
    st.one_of(st.floats(-1.0, 1.0), st.floats(0.0, 1e-2), st.sampled_from([0.0, -0.0, 1e-3, 2e-2, 5e-3])),
    st.sampled_from([0.01, 0.002, 0.05]),
)
def test_adaptive_learning_rate_matches_rsl_rl_rule(lr, kl, desired_kl):
    """Shrink /1.5 (floor 1e-5) above 2 kl*, grow *1.5 (cap 1e-2) in (0, kl*/2), otherwise unchanged."""
    out = float(adaptive_learning_rate(jnp.float32(lr), jnp.float32(kl), desired_kl))
    assert out == pytest.approx(np_adaptive_lr(float(np.float32(lr)), kl, desired_kl), rel=1e-6)


@pytest.mark.parametrize(
    "lr, kl, expected",
    [
        (1e-3, 0.05, 1e-3 / 1.5),  # shrink
        (1.2e-5, 1.0, 1e-5),  # shrink hits the 1e-5 floor
        (1e-5, 1.0, 1e-5),  # stays at the floor
        (1e-3, 0.001, 1.5e-3),  # grow
        (8e-3, 0.001, 1e-2),  # grow hits the 1e-2 cap
        (1e-3, 0.0, 1e-3),  # kl == 0: no change
        (1e-3, -0.001, 1e-3),  # kl < 0 (numerical noise): no change
        (1e-3, 0.01, 1e-3),  # inside the band
        (1e-3, 0.02, 1e-3),  # exactly 2 kl*: not strictly above
        (1e-3, 0.005, 1e-3),  # exactly kl*/2: not strictly below
        (5e-2, 0.01, 5e-2),  # in band: lr outside the bounds is left alone
    ],
)
def test_adaptive_learning_rate_branches(lr, kl, expected):
    """Every branch of the rule, including both bounds and the kl <= 0 no-change case (desired kl 0.01)."""
    assert float(adaptive_learning_rate(jnp.float32(lr), jnp.float32(kl), 0.01)) == pytest.approx(
        expected, rel=1e-6
    )


def test_weighted_total_uses_coefficients_defaulting_to_one():
    """loss = sum_k coef_k * loss_k with missing coefficients equal to 1 (st_rl's `<name>_coef`)."""
    losses = {
        "surrogate_loss": jnp.float32(2.0),
        "value_loss": jnp.float32(3.0),
        "entropy": jnp.float32(-4.0),
    }
    total = weighted_total(losses, {"value_loss": 0.5, "entropy": 0.01})
    assert float(total) == pytest.approx(2.0 + 1.5 - 0.04, rel=1e-6)


def test_make_optimizer_direction_excludes_lr_and_clips():
    """make_optimizer returns the clipped update direction without the learning rate; unknown names raise."""
    grads = {"w": jnp.array([3.0, 4.0])}  # global norm 5
    sgd = make_optimizer("sgd", max_grad_norm=1.0)
    direction, _ = sgd.update(grads, sgd.init(grads))
    np.testing.assert_allclose(direction["w"], [0.6, 0.8], rtol=1e-6)
    unclipped = make_optimizer("sgd", max_grad_norm=None)
    np.testing.assert_allclose(unclipped.update(grads, unclipped.init(grads))[0]["w"], [3.0, 4.0])
    adam = make_optimizer("adam", max_grad_norm=1.0)
    first, _ = adam.update(grads, adam.init(grads))
    np.testing.assert_allclose(
        first["w"], [1.0, 1.0], rtol=1e-5
    )  # Adam's first step is sign(g), not -lr*sign(g)
    ref = optax.adam(1.0).update(grads, optax.adam(1.0).init(grads))[0]
    np.testing.assert_allclose(first["w"], -np.asarray(ref["w"]), rtol=1e-5)
    with pytest.raises(ValueError, match="unknown optimizer"):
        make_optimizer("rmsprop", 1.0)


# ----------------------------------------------------------------------------- minibatches


@FEW
@given(seeds, st.sampled_from([(4, 2), (3, 4), (8, 3), (6, 8)]), st.sampled_from([1, 2, 3, 4]))
def test_minibatch_columns_partition_the_batch(seed, time_env, num_mini_batches):
    """Each epoch's minibatches partition the merged batch exactly (a permutation), applied
    identically to every leaf, and every minibatch holds an equal share of every env block;
    envs that cannot be cut into whole blocks raise ValueError."""
    steps, envs = time_env
    size = steps * envs
    ids = np.arange(size, dtype=np.float32).reshape(steps, envs)
    batch = merge_time_env(
        {"id": jnp.asarray(ids), "obs": jnp.asarray(ids[..., None] * np.array([1.0, -2.0]))}
    )
    chex.assert_shape([batch["id"], batch["obs"]], [(1, size), (1, size, 2)])
    np.testing.assert_array_equal(batch["id"][0], np.arange(size))
    block = env_block_size(steps, num_mini_batches)
    if envs % block:
        with pytest.raises(ValueError, match="blocks of"):
            minibatch_indices(jax.random.PRNGKey(seed), envs, steps, num_mini_batches)
        return
    order = minibatch_indices(jax.random.PRNGKey(seed), envs, steps, num_mini_batches)
    chex.assert_shape(order, (num_mini_batches, size // num_mini_batches))
    mbs = [select_columns(batch, idx) for idx in order]
    ids_seen = np.concatenate([np.asarray(mb["id"]).ravel() for mb in mbs])
    np.testing.assert_array_equal(np.sort(ids_seen), np.arange(size))
    for mb in mbs:
        np.testing.assert_array_equal(mb["obs"], np.asarray(mb["id"])[..., None] * np.array([1.0, -2.0]))
        env_of = np.asarray(mb["id"]).ravel().astype(int) % envs
        per_block = np.bincount(env_of // block, minlength=envs // block)
        assert np.all(per_block == block * steps // num_mini_batches)


@FEW
@given(seeds, st.sampled_from([(24, 8, 4), (5, 128, 32), (1, 16, 4), (6, 16, 4)]), st.sampled_from([2, 4]))
def test_minibatches_are_the_union_of_per_device_minibatches(seed, shape, devices):
    """Split the envs over devices: device d's minibatch m, mapped back to global columns, are
    exactly the global minibatch m's columns of d's envs. The update is device-count invariant."""
    steps, envs, num_mini_batches = shape
    key = jax.random.PRNGKey(seed)
    whole = np.asarray(minibatch_indices(key, envs, steps, num_mini_batches))
    local_envs = envs // devices
    for d in range(devices):
        part = minibatch_indices(key, local_envs, steps, num_mini_batches, first_env=d * local_envs)
        part = np.asarray(part)
        t, n = part // local_envs, part % local_envs
        as_global = t * envs + d * local_envs + n
        for m in range(num_mini_batches):
            mine = whole[m][(whole[m] % envs) // local_envs == d]
            np.testing.assert_array_equal(np.sort(as_global[m]), np.sort(mine))


def test_minibatch_indices_new_key_new_order():
    """Different epoch keys give different orders; the same key gives the same order."""
    a = minibatch_indices(jax.random.PRNGKey(0), 16, 4, 4)
    b = minibatch_indices(jax.random.PRNGKey(1), 16, 4, 4)
    c = minibatch_indices(jax.random.PRNGKey(0), 16, 4, 4)
    assert not np.array_equal(a, b)
    np.testing.assert_array_equal(a, c)


def test_select_columns_keeps_whole_environments():
    """Recurrent minibatches: selecting env columns keeps every time step of those envs."""
    x = np.arange(3 * 4 * 2).reshape(3, 4, 2)
    out = select_columns({"x": jnp.asarray(x)}, jnp.array([2, 0]))["x"]
    np.testing.assert_array_equal(out, x[:, [2, 0]])


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.booleans(), min_size=1, max_size=24), st.integers(1, 30))
def test_where_rows_equals_computing_every_row(mask, max_rows):
    """In one chunk (few masked rows) or several (more than `max_rows`), the result is `where(mask,
    fn(x), otherwise)`; inputs may carry the rows on another axis (`in_axes`)."""
    n = len(mask)
    mask = jnp.asarray(mask)
    x = jnp.arange(n * 3, dtype=jnp.float32).reshape(n, 3)
    h = jnp.arange(2 * n, dtype=jnp.float32).reshape(2, n) * 10  # rows on axis 1

    def fn(args):
        a, b = args
        return {"s": a.sum(-1) + b.sum(0), "v": a * 2}

    otherwise = {"s": -jnp.ones(n), "v": jnp.zeros((n, 3))}
    got = where_rows(mask, fn, (x, h), otherwise, max_rows, in_axes=(0, 1))
    want = fn((x, h))
    np.testing.assert_allclose(got["s"], np.where(mask, want["s"], -1.0))
    np.testing.assert_allclose(got["v"], np.where(mask[:, None], want["v"], 0.0))
    assert reserved_rows(n, 0.5) == min(n, max(16, math.ceil(n / 2)))
