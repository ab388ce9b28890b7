"""The Brax adapter: fresh-random auto-reset, terminated vs truncated, final observations."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from strl_jax.configs import ConfigError
from strl_jax.envs import make_brax_env

N = 6
EPISODE_LENGTH = 4


@pytest.fixture(scope="module")
def env():
    return make_brax_env("inverted_pendulum", "positional", N, EPISODE_LENGTH)


@pytest.fixture(scope="module")
def compiled(env):
    return jax.jit(env.reset), jax.jit(env.step)


LONG_N = 64  # 16 rows gathered per chunk of resets (test_finished_envs_restart_from_their_own_reset_key)


@pytest.fixture(scope="module")
def long_env():
    """Episodes of 1000 steps, none of which time out in a test; with its compiled reset and step
    (shared by the tests that need a long episode)."""
    env = make_brax_env("inverted_pendulum", "positional", LONG_N, 1000)
    return env, jax.jit(env.reset), jax.jit(env.step)


def test_observation_groups_and_sizes(env, compiled):
    reset, _ = compiled
    state, obs = reset(jax.random.PRNGKey(0))
    assert set(obs) == {"policy", "critic"}
    assert env.observation_shapes() == {"policy": (4,), "critic": (4,)}
    assert obs["policy"].shape == (N, 4)
    np.testing.assert_array_equal(obs["policy"], obs["critic"])
    # Independent keys give independent initial states.
    assert len({tuple(np.round(np.asarray(o), 6)) for o in obs["policy"]}) == N


def test_time_limit_is_truncation_and_reset_is_fresh(env, compiled):
    reset, step = compiled
    state, obs = reset(jax.random.PRNGKey(1))
    zero = jnp.zeros((N, 1))
    initial = np.asarray(obs["policy"])
    for t in range(1, EPISODE_LENGTH + 1):
        pre_state = state
        state, res = step(state, zero)
        assert not np.any(np.asarray(res.terminated) & np.asarray(res.truncated))
        if t < EPISODE_LENGTH:
            assert not np.any(res.truncated)
            np.testing.assert_array_equal(state.step_count, t)
    # A pendulum left alone for 4 steps does not fall: every env timed out.
    assert np.all(res.truncated) and not np.any(res.terminated)
    np.testing.assert_array_equal(state.step_count, 0)
    # final_obs is where the step went, before the reset: equal to stepping Brax directly.
    direct = jax.jit(jax.vmap(env.env.step))(pre_state.brax_state, zero)
    np.testing.assert_allclose(res.final_obs["critic"], direct.obs, atol=1e-6)
    # The next observation comes from new random initial states, not the first episode's.
    assert not np.allclose(res.obs["policy"], res.final_obs["policy"])
    assert not np.allclose(res.obs["policy"], initial)


def test_termination_is_not_truncation(env, compiled, long_env):
    reset, step = compiled
    state, _ = reset(jax.random.PRNGKey(2))
    push = jnp.ones((N, 1)) * 3.0  # clipped to 1.0, still topples the pole quickly
    terminated_any = False
    for _ in range(3 * EPISODE_LENGTH):
        state, res = step(state, push)
        terminated_any |= bool(np.any(res.terminated))
        assert not np.any(np.asarray(res.terminated) & np.asarray(res.truncated))
    _, reset_long, step_long = long_env
    state, _ = reset_long(jax.random.PRNGKey(3))
    push = jnp.ones((LONG_N, 1)) * 3.0
    for _ in range(40):
        state, res = step_long(state, push)
        terminated_any |= bool(np.any(res.terminated))
        assert not np.any(res.truncated)
    assert terminated_any


def test_action_repeat_sums_rewards():
    env2 = make_brax_env("inverted_pendulum", "positional", 2, 100, action_repeat=2)
    state, _ = jax.jit(env2.reset)(jax.random.PRNGKey(4))
    action = jnp.full((2, 1), 0.3)
    _, res = jax.jit(env2.step)(state, action)
    brax_step = jax.jit(jax.vmap(env2.env.step))  # one program: op by op compiles each primitive
    s1 = brax_step(state.brax_state, action)
    s2 = brax_step(s1, action)
    np.testing.assert_allclose(res.reward, s1.reward + s2.reward, atol=1e-6)
    np.testing.assert_allclose(res.final_obs["policy"], s2.obs, atol=1e-5)


def test_wrong_action_shape_is_rejected(env, compiled):
    _, step = compiled
    state, _ = compiled[0](jax.random.PRNGKey(0))
    with pytest.raises(AssertionError):
        step(state, jnp.zeros((N + 1, 1)))


def test_unknown_task_and_kwargs_are_clear():
    with pytest.raises(ConfigError, match="valid Brax tasks"):
        make_brax_env("cartpole", "positional", 2, 10)
    with pytest.raises(ConfigError, match="valid backends"):
        make_brax_env("ant", "bullet", 2, 10)
    with pytest.raises(ConfigError, match="do not fit brax task"):
        make_brax_env("inverted_pendulum", "positional", 2, 10, env_kwargs={"wings": 2})


def test_finished_envs_restart_from_their_own_reset_key(long_env):
    """With few finished envs (one chunk of gathered resets) and with all of them (several), each
    finished env's new state is exactly `env.reset` of its split reset key; the others step on."""
    env64, reset, step = long_env
    n = LONG_N
    state, _ = reset(jax.random.PRNGKey(5))
    push = jnp.ones((n, 1)) * jnp.where(jnp.arange(n) % 8 == 0, 1.0, 0.0)[:, None]  # topple 8 envs
    limit = state.replace(step_count=jnp.full((n,), 999, jnp.int32))  # all time out
    for start, action in ((state, push), (limit, jnp.zeros((n, 1)))):
        s, finished_any = start, False
        for _ in range(60):
            nxt, res = step(s, action)
            finished = np.asarray(res.terminated | res.truncated)
            if finished.any():
                finished_any = True
                keys = jax.vmap(jax.random.split)(s.reset_key)
                fresh = jax.jit(jax.vmap(env64.env.reset))(keys[:, 0])
                stepped = jax.jit(jax.vmap(env64.env.step))(s.brax_state, jnp.clip(action, -1, 1))
                f = finished[:, None]
                np.testing.assert_allclose(nxt.brax_state.obs, np.where(f, fresh.obs, stepped.obs), atol=1e-6)
                np.testing.assert_array_equal(nxt.reset_key, np.where(f, keys[:, 1], s.reset_key))
                break
            s = nxt
        assert finished_any


def test_termination_reward_is_added_on_terminations_only():
    """`env.termination_reward` (legged_gym's termination reward, after the env's own reward):
    added on the steps whose episode terminated, never on time-outs; the dynamics are untouched."""
    from strl_jax.configs import resolve_config
    from strl_jax.envs import make_env_from_config

    cfg = resolve_config(
        "inverted_pendulum",
        overrides=["env.num_envs=4", "env.episode_length=7", "env.termination_reward=-7.5"],
    )
    shaped = make_env_from_config(cfg.env)
    plain = shaped.replace(termination_reward=0.0)
    push = jnp.concatenate([jnp.ones((2, 1)), jnp.zeros((2, 1))])  # envs 0, 1 topple; 2, 3 time out

    def run(env):
        def body(state, _):
            state, res = env.step(state, push)
            return state, (res.reward, res.terminated, res.truncated)

        return jax.lax.scan(body, env.reset(jax.random.PRNGKey(5))[0], None, length=30)[1]

    shaped_reward, terminated, truncated = jax.jit(lambda: run(shaped))()
    plain_reward, plain_terminated, _ = jax.jit(lambda: run(plain))()
    assert np.any(terminated) and np.any(truncated)
    np.testing.assert_array_equal(terminated, plain_terminated)
    np.testing.assert_allclose(shaped_reward - plain_reward, -7.5 * np.asarray(terminated), atol=1e-5)
    assert (
        cfg.env.termination_reward == -7.5 and resolve_config("inverted_pendulum").env.termination_reward == 0
    )
