"""AMP building blocks: discriminator losses, gradient penalty, style reward, AMP normalisers,
replay buffer, motion library sampling, AMP observations of Brax states, config fields.

The torch parity test runs the REFERENCE.md formulas (as st_rl writes them) in PyTorch on the
same weights and inputs.
"""

from __future__ import annotations

import brax.envs
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from brax import math as bmath
from brax.base import Motion, State, Transform
from hypothesis import given, settings
from hypothesis import strategies as st

from strl_jax.agents.amp import (
    DISCRIMINATOR_LOSSES,
    LOSS_LOG_NAMES,
    amp_loss_coefs,
    dagger_loss,
    discriminator_accuracy,
    discriminator_loss_terms,
    gradient_penalty,
    init_amp_normalizers,
    lsgan_losses,
    mimic_loss,
    mix_rewards,
    normalize_amp_obs,
    predict_style_reward,
    style_reward,
    update_amp_normalizers,
)
from strl_jax.agents.motion_prior import init_policy_replay, replay_add, replay_draw
from strl_jax.agents.ppo import weighted_total
from strl_jax.buffers.motion import (
    amp_observation,
    interpolate_frames,
    make_motion_library,
    sample_expert_amp_obs,
    sample_motion_pairs,
)
from strl_jax.configs.loader import ConfigError, resolve_config
from strl_jax.envs.amp_obs import (
    COMPONENTS,
    KNOWN_LAYOUTS,
    TASK_DEFAULTS,
    WithAmpObservation,
    amp_observation_size,
    body_layout,
    layout_from_system,
    make_amp_observation,
)
from strl_jax.envs.brax_env import make_brax_env
from strl_jax.networks.discriminator import Discriminator, init_discriminator, make_discriminator
from strl_jax.networks.normalizer import normalize, update_normalizer

D = 6  # AMP observation size of the small tests (frames of 3)


def close(a, b, **kw):
    np.testing.assert_allclose(
        np.asarray(a, np.float64), np.asarray(b, np.float64), **{"rtol": 1e-5, "atol": 1e-6, **kw}
    )


@pytest.fixture(scope="module")
def disc():
    """A small tanh discriminator (smooth, so finite differences are meaningful) and batches."""
    module = Discriminator(hidden_dims=(16, 8), activation="tanh")
    params = init_discriminator(module, jax.random.PRNGKey(0), D)
    keys = jax.random.split(jax.random.PRNGKey(1), 2)
    policy = jax.random.normal(keys[0], (32, D))
    expert = 1.0 + 0.5 * jax.random.normal(keys[1], (32, D))
    return module, params, policy, expert


# ------------------------------------------------------------------------------------ losses
def test_lsgan_losses_and_accuracy():
    d_expert = jnp.array([1.0, 0.5, -0.2, 2.0])
    d_policy = jnp.array([-1.0, 0.3, -3.0])
    expert, policy = lsgan_losses(d_expert, d_policy)
    close(expert, 0.5 * np.mean((np.array([1.0, 0.5, -0.2, 2.0]) - 1) ** 2))
    close(policy, 0.5 * np.mean((np.array([-1.0, 0.3, -3.0]) + 1) ** 2))
    acc_expert, acc_policy = discriminator_accuracy(d_expert, d_policy)
    close(acc_expert, 3 / 4)
    close(acc_policy, 2 / 3)


def test_gradient_penalty_of_a_linear_discriminator_is_exact():
    w = jnp.array([0.5, -2.0, 1.0])
    penalty = gradient_penalty(lambda x: x @ w + 3.0, jnp.ones((7, 3)), coef=10.0)
    close(penalty, 10.0 * float(w @ w))  # lambda * ||w||^2, no 0.5


def test_gradient_penalty_matches_finite_differences(disc):
    module, params, _, expert = disc
    fn = lambda x: module.apply(params, x)
    x = np.asarray(expert[:5], np.float64)
    eps = 1e-3
    grads = np.zeros_like(x)
    for j in range(D):
        step = np.zeros(D)
        step[j] = eps
        up = np.asarray(fn(jnp.asarray(x + step, jnp.float32)), np.float64)
        down = np.asarray(fn(jnp.asarray(x - step, jnp.float32)), np.float64)
        grads[:, j] = (up - down) / (2 * eps)
    expected = 5.0 * np.mean(np.sum(grads**2, axis=-1))
    close(gradient_penalty(fn, jnp.asarray(x, jnp.float32), 5.0), expected, rtol=2e-3)


def test_style_reward_formula_and_no_gradient():
    d = jnp.array([1.0, -1.0, 3.0, 0.0, 2.0, -5.0])
    close(style_reward(d, 2.0), 2.0 * np.array([1.0, 0.0, 0.0, 0.75, 0.75, 0.0]))
    close(jax.grad(lambda d: jnp.sum(style_reward(d, 2.0)))(d), np.zeros(6))


def test_reward_mixing():
    style, task = jnp.array([0.2, 0.9]), jnp.array([5.0, -1.0])
    close(mix_rewards(style, task, 0.0), style)  # lerp 0: the task reward is dropped
    close(mix_rewards(style, task, 1.0), task)
    close(mix_rewards(style, task, 0.3), 0.7 * np.array([0.2, 0.9]) + 0.3 * np.array([5.0, -1.0]))


def test_mimic_and_dagger_losses():
    a = np.array([[0.0, 3.0], [1.0, 1.0]], np.float32)
    b = np.array([[4.0, 0.0], [1.0, 2.0]], np.float32)
    close(mimic_loss(jnp.asarray(a), jnp.asarray(b)), (5.0 + 1.0) / 2)
    close(dagger_loss(jnp.asarray(a), jnp.asarray(b)), (5.0 + 1.0) / 2)


def test_discriminator_loss_terms_and_coefficients(disc):
    module, params, policy, expert = disc
    losses, metrics = discriminator_loss_terms(module.apply, params, policy, expert, 10.0)
    assert set(losses) == set(DISCRIMINATOR_LOSSES)
    assert set(metrics) >= {"discriminator_accuracy_expert", "discriminator_accuracy_policy"}
    assert {LOSS_LOG_NAMES[k] for k in DISCRIMINATOR_LOSSES} == {
        "discriminator_expert",
        "discriminator_policy",
        "discriminator_grad_pen",
    }
    d_e, d_p = module.apply(params, expert), module.apply(params, policy)
    close(losses["discriminator_expert_loss"], lsgan_losses(d_e, d_p)[0])
    close(losses["discriminator_policy_loss"], lsgan_losses(d_e, d_p)[1])
    close(metrics["discriminator_accuracy_expert"], np.mean(np.asarray(d_e) > 0))

    cfg = resolve_config(
        "ant", overrides=["algorithm.discriminator_loss_coef=0.5", "algorithm.mimic_loss_coef=2"]
    )
    coefs = amp_loss_coefs(cfg.algorithm)
    assert coefs == {
        "discriminator_expert_loss": 0.5,
        "discriminator_policy_loss": 0.5,
        "discriminator_grad_pen_loss": 0.5,
        "mimic_loss": 2.0,
        "dagger_loss": 0.0,
    }

    def total(p):
        terms, _ = discriminator_loss_terms(module.apply, p, policy, expert, 10.0)
        return weighted_total(terms, coefs)

    grads = jax.grad(total)(params)  # differentiates through the gradient penalty (double backward)
    assert all(bool(jnp.all(jnp.isfinite(g))) for g in jax.tree.leaves(grads))
    assert any(float(jnp.abs(g).max()) > 0 for g in jax.tree.leaves(grads))


# ------------------------------------------------------------------------------ normalisers
def test_amp_normalizers_update_with_raw_data():
    keys = jax.random.split(jax.random.PRNGKey(2), 2)
    policy_raw = 5.0 + 3.0 * jax.random.normal(keys[0], (4000, D))
    expert_raw = -2.0 + 0.5 * jax.random.normal(keys[1], (4000, D))
    norms = init_amp_normalizers(D)
    for _ in range(3):  # the same raw batches again: the statistics stay at their moments
        norms = update_amp_normalizers(norms, policy_raw, expert_raw)
    close(norms.policy.mean, np.mean(np.asarray(policy_raw), axis=0), rtol=1e-4, atol=1e-4)
    close(norms.policy.var, np.var(np.asarray(policy_raw), axis=0), rtol=1e-3)
    close(norms.expert.mean, np.mean(np.asarray(expert_raw), axis=0), rtol=1e-4, atol=1e-4)
    close(norms.expert.var, np.var(np.asarray(expert_raw), axis=0), rtol=1e-3)
    assert float(norms.policy.count) == float(norms.expert.count) == 12000

    # The recurring bug: folding the *normalised* batch back in. Its statistics would collapse
    # towards mean 0 / variance ~1 instead of tracking the data.
    p_n, e_n = normalize_amp_obs(norms, policy_raw, expert_raw)
    close(np.mean(np.asarray(p_n)), 0.0, atol=0.05)
    buggy = update_normalizer(init_amp_normalizers(D).policy, p_n)
    assert float(jnp.max(jnp.abs(buggy.mean))) < 0.1 and float(jnp.min(norms.policy.mean)) > 4.5

    # freezing after `until` samples (st_rl: 1e8)
    frozen = update_amp_normalizers(norms, policy_raw + 100, expert_raw, until=1000)
    close(frozen.policy.mean, norms.policy.mean)


def test_predict_style_reward_normalises_raw_policy_obs(disc):
    module, params, policy, expert = disc
    norms = update_amp_normalizers(init_amp_normalizers(D), 3 * policy + 1, expert)
    task = jnp.linspace(-1, 1, policy.shape[0])
    mixed, style = predict_style_reward(module.apply, params, norms, 3 * policy + 1, task, 2.0, 0.25)
    d = module.apply(params, normalize(norms.policy, 3 * policy + 1))
    close(style, style_reward(d, 2.0))
    close(mixed, 0.75 * np.asarray(style) + 0.25 * np.asarray(task))


# ------------------------------------------------------------------------------- torch parity
@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_discriminator_losses_match_torch(activation):
    import torch

    module = Discriminator(hidden_dims=(32, 16), activation=activation)
    params = init_discriminator(module, jax.random.PRNGKey(3), D)
    params = jax.tree.map(lambda p: 2.0 * p, params)  # scores spread over the reward's kink
    rng = np.random.default_rng(0)
    policy = rng.normal(size=(64, D)).astype(np.float32)
    expert = (0.5 + rng.normal(size=(64, D))).astype(np.float32)
    lam, coef = 10.0, 2.0

    layers = params["params"]["mlp"]
    act = {"relu": torch.nn.ReLU, "tanh": torch.nn.Tanh}[activation]
    net = torch.nn.Sequential(
        torch.nn.Linear(D, 32), act(), torch.nn.Linear(32, 16), act(), torch.nn.Linear(16, 1)
    )
    with torch.no_grad():
        for linear, name in zip((net[0], net[2], net[4]), ("hidden_0", "hidden_1", "output"), strict=True):
            linear.weight.copy_(torch.from_numpy(np.asarray(layers[name]["kernel"]).T.copy()))
            linear.bias.copy_(torch.from_numpy(np.asarray(layers[name]["bias"])))

    # st_rl APPO.compute_losses / AMPDiscriminator, written from REFERENCE.md
    tp, te = torch.from_numpy(policy), torch.from_numpy(expert)
    policy_d, expert_d = net(tp), net(te)
    t_expert = 0.5 * torch.nn.MSELoss()(expert_d, torch.ones_like(expert_d))
    t_policy = 0.5 * torch.nn.MSELoss()(policy_d, -torch.ones_like(policy_d))
    x = te.clone().requires_grad_(True)
    disc_out = net(x)
    (grad,) = torch.autograd.grad(disc_out, x, torch.ones_like(disc_out), create_graph=True)
    t_pen = lam * grad.norm(2, dim=1).pow(2).mean()
    (t_expert + t_policy + t_pen).backward()
    with torch.no_grad():
        t_style = coef * torch.clamp(1 - 0.25 * (policy_d - 1) ** 2, min=0.0)

    losses, _ = discriminator_loss_terms(module.apply, params, jnp.asarray(policy), jnp.asarray(expert), lam)
    close(losses["discriminator_expert_loss"], t_expert.item())
    close(losses["discriminator_policy_loss"], t_policy.item())
    close(losses["discriminator_grad_pen_loss"], t_pen.item(), rtol=1e-4)
    style = style_reward(module.apply(params, jnp.asarray(policy)), coef)
    close(style, t_style.squeeze(-1).numpy())
    assert 0 < int(np.sum(np.asarray(style) > 0)) < len(policy)  # both sides of the clamp are covered

    grads = jax.grad(
        lambda p: sum(
            discriminator_loss_terms(module.apply, p, jnp.asarray(policy), jnp.asarray(expert), lam)[
                0
            ].values()
        )
    )(params)["params"]["mlp"]
    for linear, name in zip((net[0], net[2], net[4]), ("hidden_0", "hidden_1", "output"), strict=True):
        close(grads[name]["kernel"], linear.weight.grad.numpy().T, rtol=1e-4, atol=1e-5)
        close(grads[name]["bias"], linear.bias.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_make_discriminator_from_config():
    cfg = resolve_config("ant", overrides=["policy.amp_discriminator.hidden_dims=[8, 4]"])
    module = make_discriminator(cfg.policy.amp_discriminator)
    assert module.hidden_dims == (8, 4) and module.activation == "relu"
    params = init_discriminator(module, jax.random.PRNGKey(0), 10)
    assert module.apply(params, jnp.zeros((3, 10))).shape == (3,)
    assert module.apply(params, jnp.zeros((2, 5, 10))).shape == (2, 5)


# ------------------------------------------------------------------------------ replay buffer
def sequential_reference(capacity, dim, batches):
    data, pos, size = np.zeros((capacity, dim), np.float32), 0, 0
    for batch in batches:
        for row in batch:
            data[pos] = row
            pos = (pos + 1) % capacity
            size = min(size + 1, capacity)
    return data, pos, size


@settings(max_examples=25, deadline=None)
@given(slots=st.integers(1, 7), steps=st.lists(st.integers(1, 12), min_size=1, max_size=5))
def test_policy_replay_add_equals_one_step_at_a_time(slots, steps):
    """Each env's ring takes a rollout's `[T, N, D]` observations as T single-row inserts would."""
    counter = iter(range(100_000))
    rollouts = [
        np.array([[[next(counter), env] for env in range(3)] for _ in range(t)], np.float32) for t in steps
    ]
    replay = init_policy_replay(3, slots, 2)
    for rollout in rollouts:
        replay = replay_add(replay, jnp.asarray(rollout))
    for env in range(3):
        data, pos, size = sequential_reference(slots, 2, [r[:, env] for r in rollouts])
        np.testing.assert_array_equal(np.asarray(replay.data[env]), data)
        assert int(replay.position[env]) == pos and int(replay.size[env]) == size


def test_policy_replay_draws_from_the_filled_slots_of_each_env():
    replay = init_policy_replay(2, 10, 1)
    rollout = jnp.stack([jnp.arange(1.0, 5.0), jnp.arange(11.0, 15.0)], axis=1)[..., None]  # [4, 2, 1]
    replay = jax.jit(replay_add)(replay, rollout)  # rows 1..4 (env 0) and 11..14 (env 1); 6 empty
    keys = jax.random.split(jax.random.PRNGKey(0), 4000)
    for env, expected in ((0, {1.0, 2.0, 3.0, 4.0}), (1, {11.0, 12.0, 13.0, 14.0})):
        rows = jax.jit(replay_draw)(replay, keys, jnp.full((4000,), env))
        values, counts = np.unique(np.asarray(rows), return_counts=True)
        assert set(values) == expected
        assert np.all(np.abs(counts / 4000 - 0.25) < 0.03)


# ------------------------------------------------------------------------------ motion library
def linear_library(weights=(1.0, 1.0, 1.0)):
    """Three motions whose frames move at known constant velocities: f(t) = c + v t."""
    velocities = [np.array([1.0, 0.0, 0.0]), np.array([0.0, 2.0, 0.0]), np.array([0.0, 0.0, -3.0])]
    durations, counts = [0.1, 0.05, 0.2], [11, 31, 6]
    motions = [
        100.0 * i + np.arange(n)[:, None] * fd * v[None, :]
        for i, (v, fd, n) in enumerate(zip(velocities, durations, counts, strict=True))
    ]
    return make_motion_library(motions, durations, list(weights)), velocities, motions


def test_interpolation_is_exact_at_frames_and_linear_between():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(5, 4)), rng.normal(size=(3, 4))
    lib = make_motion_library([a, b], [0.25, 0.5], names=["a", "b"])
    ids = jnp.array([0, 0, 0, 1, 1])
    frames = interpolate_frames(lib, ids, jnp.array([0.0, 0.75, 1.0, 0.5, 1.0]))
    close(frames, np.stack([a[0], a[3], a[4], b[1], b[2]]), atol=1e-6)
    alpha = 0.3
    mid = interpolate_frames(lib, jnp.array([0, 1]), jnp.array([0.25 * (2 + alpha), 0.5 * alpha]))
    close(mid, np.stack([(1 - alpha) * a[2] + alpha * a[3], (1 - alpha) * b[0] + alpha * b[1]]), atol=1e-5)
    close(interpolate_frames(lib, jnp.array([1]), jnp.array([9.0])), b[2:3])  # clamped at the end
    assert lib.names == ("a", "b") and lib.frame_dim == 4 and lib.num_motions == 2
    close(lib.duration, [1.0, 1.0])


def test_sampled_pairs_are_dt_apart_within_the_motion_and_follow_weights():
    lib, velocities, motions = linear_library(weights=(1.0, 2.0, 7.0))
    dt, n = 0.04, 20_000
    s, s_next = jax.jit(sample_motion_pairs, static_argnums=2)(lib, jax.random.PRNGKey(4), n, dt)
    s, s_next = np.asarray(s), np.asarray(s_next)
    which = np.round(s[:, :1] / 100.0).astype(int)[:, 0]  # each motion sits at its own offset
    for m, v in enumerate(velocities):
        rows = which == m
        close(s_next[rows] - s[rows], np.broadcast_to(v * dt, (rows.sum(), 3)), atol=1e-4)
        t = (s[rows] - motions[m][0]) @ v / (v @ v)
        duration = (len(motions[m]) - 1) * float(lib.frame_duration[m])
        assert t.min() >= -1e-5 and t.max() <= duration - dt + 1e-5
        assert abs(t.mean() - (duration - dt) / 2) < 0.02 * duration  # uniform in time
    fractions = np.bincount(which, minlength=3) / n
    close(fractions, [0.1, 0.2, 0.7], atol=0.015)
    obs = sample_expert_amp_obs(lib, jax.random.PRNGKey(4), 8, dt)
    assert obs.shape == (8, 6)
    close(obs, amp_observation(*sample_motion_pairs(lib, jax.random.PRNGKey(4), 8, dt)))


def test_motion_shorter_than_dt_gives_its_first_and_last_frame():
    lib = make_motion_library([np.array([[0.0], [1.0]])], [0.01])
    s, s_next = sample_motion_pairs(lib, jax.random.PRNGKey(0), 3, 0.5)
    close(s, np.zeros((3, 1)))
    close(s_next, np.ones((3, 1)))


@pytest.mark.parametrize(
    ("motions", "durations", "weights", "needle"),
    [
        ([np.zeros((1, 3))], [0.1], None, "has 1 frame(s); a transition needs at least 2"),
        ([np.zeros((4, 3)), np.zeros((4, 2))], [0.1, 0.1], None, "frames of size 2 but 'motion_0' has 3"),
        ([np.zeros((4, 3))], [0.0], None, "frame duration must be positive"),
        ([np.zeros((4, 3))], [0.1], [0.0], "weights sum to 0"),
        ([np.full((4, 3), np.nan)], [0.1], None, "non-finite"),
        ([], [], None, "at least one motion"),
    ],
)
def test_motion_library_errors(motions, durations, weights, needle):
    with pytest.raises(ValueError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        make_motion_library(motions, durations, weights)


# ---------------------------------------------------------------------------- AMP observations
def synthetic_state(key, num_links=3, q_size=13, qd_size=12) -> State:
    keys = jax.random.split(key, 6)
    rot = jax.vmap(bmath.normalize)(jax.random.normal(keys[0], (num_links, 4)))[0]
    return State(
        q=jax.random.normal(keys[1], (q_size,)),
        qd=jax.random.normal(keys[2], (qd_size,)),
        x=Transform(pos=jax.random.normal(keys[3], (num_links, 3)), rot=rot),
        xd=Motion(
            vel=jax.random.normal(keys[4], (num_links, 3)), ang=jax.random.normal(keys[5], (num_links, 3))
        ),
        contact=None,
    )


def yawed(state: State, yaw: float) -> State:
    """The same state with the whole body turned by `yaw` about the vertical through the root."""
    q = jnp.array([np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2)], jnp.float32)
    root = state.x.pos[0]
    turn = jax.vmap(lambda v: bmath.rotate(v, q))
    return state.replace(
        x=Transform(
            pos=root + turn(state.x.pos - root), rot=jax.vmap(lambda r: bmath.quat_mul(q, r))(state.x.rot)
        ),
        xd=Motion(vel=turn(state.xd.vel), ang=turn(state.xd.ang)),
    )


def test_free_root_frame_is_heading_invariant(monkeypatch):
    from strl_jax.envs import amp_obs

    monkeypatch.setitem(amp_obs.KNOWN_LAYOUTS, "toy_free", amp_obs.BodyLayout(7, 6, True, 13, 12, 3))
    amp_obs.body_layout.cache_clear()
    frame = make_amp_observation("toy_free", list(COMPONENTS))
    state = synthetic_state(jax.random.PRNGKey(5))
    a, b = frame(state), frame(yawed(state, 1.3))
    sizes = [1, 6, 3, 3, 3, 6, 6, 6]
    assert a.shape == (sum(sizes),) == (amp_observation_size("toy_free", list(COMPONENTS)),)
    close(a, b, atol=1e-5)  # every component is free of the heading (gravity is vertical)
    tangent, normal = np.asarray(a[1:4]), np.asarray(a[4:7])
    close(np.linalg.norm(tangent), 1.0)
    close(np.linalg.norm(normal), 1.0)
    close(tangent[1], 0.0, atol=1e-6)  # heading removed: the x axis has no sideways part
    close(a[0], state.x.pos[0, 2])
    close(a[7:10], bmath.inv_rotate(jnp.array([0.0, 0.0, -1.0]), state.x.rot[0]), atol=1e-6)
    close(a[16:22], state.q[7:])
    close(a[22:28], state.qd[6:])
    close(
        np.linalg.norm(np.asarray(a[28:34]).reshape(2, 3), axis=1),
        np.linalg.norm(state.x.pos[1:] - state.x.pos[0], axis=1),
    )
    amp_obs.body_layout.cache_clear()


def test_known_layouts_match_the_brax_systems(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # MuJoCo logs humanoid's deprecated `settotalmass` to ./MUJOCO_LOG.TXT
    for task, layout in KNOWN_LAYOUTS.items():
        assert layout_from_system(brax.envs.get_environment(task).sys) == layout, task
    assert set(KNOWN_LAYOUTS) <= set(TASK_DEFAULTS)


@pytest.fixture(scope="module", params=["ant", "hopper"])
def reset_state(request):
    env = make_brax_env(request.param, "positional", num_envs=2, episode_length=10)
    env = env.replace(observe=WithAmpObservation(env.observe, request.param))
    state, obs = jax.jit(env.reset)(jax.random.PRNGKey(0))
    return request.param, env, state, obs


def test_amp_observation_on_real_brax_states(reset_state):
    task, env, state, obs = reset_state
    layout = body_layout(task)
    size = amp_observation_size(task)
    assert obs["amp"].shape == (2, size)
    assert size == 1 + 6 + 3 + 3 + (layout.q_size - layout.root_q) + (layout.qd_size - layout.root_qd)
    assert env.observation_shapes()["amp"] == (size,)
    ps = jax.tree.map(lambda x: x[0], state.brax_state.pipeline_state)
    frame = np.asarray(obs["amp"][0])
    close(frame[0], ps.x.pos[0, 2])
    close(np.linalg.norm(frame[1:4]), 1.0, atol=1e-5)
    close(frame[1 + 6 + 6 : 1 + 6 + 6 + layout.q_size - layout.root_q], ps.q[layout.root_q :])
    close(frame[-(layout.qd_size - layout.root_qd) :], ps.qd[layout.root_qd :])
    if task == "hopper":  # starts upright (reset noise 5e-3): x axis forward, z axis up
        close(frame[1:7], [1, 0, 0, 0, 0, 1], atol=2e-2)
    single = make_amp_observation(task)(ps)
    close(single, frame)
    shapes = jax.eval_shape(env.step, state, jnp.zeros((2, env.action_size)))[1]
    assert shapes.final_obs["amp"].shape == (2, size)


def test_amp_observation_errors():
    with pytest.raises(ValueError, match=r"unknown AMP observation component 'elbow'; valid components: \["):
        make_amp_observation("ant", ["joint_pos", "elbow"])
    with pytest.raises(ValueError, match="has no default AMP observation.*tasks with defaults"):
        amp_observation_size("reacher")
    with pytest.raises(ValueError, match="repeat"):
        amp_observation_size("ant", ["joint_pos", "joint_pos"])
    with pytest.raises(ValueError, match="unknown task 'nope'; valid tasks"):
        body_layout("nope")
    assert amp_observation_size("reacher", ["joint_pos"]) > 0  # layout read from the system


# --------------------------------------------------------------------------------- config
def test_amp_config_fields_and_validation():
    cfg = resolve_config("ant")
    assert cfg.policy.amp_discriminator.discriminator_grad_pen == 10.0
    assert cfg.policy.amp_discriminator.task_reward_lerp == 0.0
    assert cfg.algorithm.discriminator_loss_coef == 1.0 and cfg.algorithm.mimic_loss_coef == 0.0
    assert cfg.algorithm.amp_replay_buffer_size == 100_000 and cfg.env.amp_obs_components is None
    cfg = resolve_config(
        "hopper",
        overrides=["env.amp_obs_components=[joint_pos, root_height]", "algorithm.amp_motion_files=[a, b]"],
    )
    assert cfg.env.amp_obs_components == ("joint_pos", "root_height")
    assert cfg.algorithm.amp_motion_files == ("a", "b")
    bad = {
        "policy.amp_discriminator.activation=swoosh": "unknown policy.amp_discriminator.activation",
        "policy.amp_discriminator.task_reward_lerp=1.5": "task_reward_lerp must lie in",
        "policy.amp_discriminator.discriminator_grad_pen=-1": "discriminator_grad_pen must be >= 0",
        "policy.amp_discriminator.hidden_dims=[]": "hidden_dims must be a non-empty",
        "algorithm.amp_replay_buffer_size=0": "amp_replay_buffer_size must be at least 1",
        "env.amp_obs_components=[joint_pos, knee]": "env.amp_obs_components: unknown AMP observation",
    }
    amp = ["algorithm.class_name=APPO", "algorithm.amp_motion_files=[a]"]  # the AMP part's checks
    for override, needle in bad.items():
        with pytest.raises(ConfigError, match=needle):
            resolve_config("ant", overrides=[*amp, override])
