"""Where finished envs restart from (`VecEnv.auto_reset`): the initial-state pool drawn by its own
program gives the episodes of resetting in the step, fresh per env; evaluation envs never reset."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_config import tiny

from strl_jax.configs import ConfigError
from strl_jax.configs.loader import resolve_config
from strl_jax.envs import make_brax_env
from strl_jax.envs.vec_env import RESET_SCOPE
from strl_jax.runners import runner
from strl_jax.runners.learner_builder import make_learner
from strl_jax.train_loops.evaluation import deterministic_episodes

N = 6
EPISODE_LENGTH = 4


@pytest.fixture(scope="module")
def env():
    return make_brax_env("inverted_pendulum", "positional", N, EPISODE_LENGTH)


def zero_action_rollout(env, steps: int):
    """Jitted `state -> (state', (obs [T, N, 4], finished [T, N]))` with zero actions."""

    def run(state):
        def body(s, _):
            s, res = env.step(s, jnp.zeros((env.num_envs, 1)))
            return s, (res.obs["policy"], res.terminated | res.truncated)

        return jax.lax.scan(body, state, None, length=steps)

    return jax.jit(run)


def test_pool_gives_the_episodes_of_resetting_in_the_step(env):
    key = jax.random.PRNGKey(3)
    pool_env, step_env = env.replace(auto_reset="pool"), env.replace(auto_reset="in_step")
    refresh = jax.jit(pool_env.refresh_pool)
    pooled, first_obs = jax.jit(pool_env.reset)(key)
    assert pooled.pool_used.all()  # a stand-in until the first refresh draws every row
    pooled = refresh(pooled)
    in_step, _ = jax.jit(step_env.reset)(key)
    pool_run = zero_action_rollout(pool_env, EPISODE_LENGTH)
    # every env times out once, at the last step: the same episodes, the same keys
    a_state, (a_obs, a_done) = zero_action_rollout(step_env, EPISODE_LENGTH)(in_step)
    b_state, (b_obs, b_done) = pool_run(pooled)
    assert np.all(a_done[-1]) and not np.any(a_done[:-1])
    np.testing.assert_array_equal(a_done, b_done)
    np.testing.assert_allclose(a_obs, b_obs, atol=1e-6)
    np.testing.assert_array_equal(a_state.reset_key, b_state.reset_key)
    # fresh: each env's new episode starts from its own new state
    restart = np.asarray(b_obs[-1])
    assert len({tuple(np.round(row, 6)) for row in restart}) == N
    assert not np.allclose(restart, first_obs["policy"])
    # the pool rows taken are flagged; the refresh draws new ones with each env's next key
    assert b_state.pool_used.all()
    refreshed = refresh(b_state)
    assert not refreshed.pool_used.any()
    assert not np.allclose(refreshed.pool.obs, b_state.pool.obs)
    # what repeats: without a refresh, an env finishing again restarts from the same pool state
    _, (c_obs, _) = pool_run(b_state)
    np.testing.assert_array_equal(c_obs[-1], restart)
    _, (d_obs, _) = pool_run(refreshed)
    assert not np.allclose(d_obs[-1], restart)


def test_every_mode_starts_from_the_same_first_states(env):
    """`reset` = pending envs, the pool refresh, the first states: the same states and keys with
    and without a pool; with a pool the first states are the pool's rows, taken."""
    key = jax.random.PRNGKey(5)
    pending = env.replace(auto_reset="pool").pending(key)
    assert not np.any(pending.brax_state.obs)  # zeros: nothing reset yet
    out = {mode: jax.jit(env.replace(auto_reset=mode).reset)(key) for mode in ("pool", "in_step", "none")}
    for mode in ("in_step", "none"):
        np.testing.assert_array_equal(out[mode][1]["policy"], out["pool"][1]["policy"])
        np.testing.assert_array_equal(out[mode][0].reset_key, out["pool"][0].reset_key)
    pooled = out["pool"][0]
    np.testing.assert_array_equal(pooled.pool.obs, pooled.brax_state.obs)
    assert pooled.pool_used.all()
    assert len({tuple(np.round(row, 6)) for row in np.asarray(out["pool"][1]["policy"])}) == N


def test_the_reset_is_compiled_once_in_the_pool_refresh():
    """The learner's init traces no reset (the first states come from the pool refresh, the
    program the iterations run), and neither does the iteration; the runner's init and its
    iterations share one compiled refresh."""
    cfg = resolve_config("inverted_pendulum", overrides=tiny())
    learner = make_learner(runner.training_env(cfg), cfg)
    key = jax.random.PRNGKey(0)
    _, rollout_state = jax.eval_shape(learner.init, key)

    def traced(fn, *args) -> str:
        return jax.jit(fn).lower(*args).as_text(debug_info=True)

    assert RESET_SCOPE in traced(learner.init, key)  # the scope marks a reset
    assert RESET_SCOPE not in traced(learner.init_pending, key)
    assert RESET_SCOPE not in traced(learner.start_episodes, rollout_state)
    assert RESET_SCOPE in traced(learner.refresh_pool, rollout_state)
    assert RESET_SCOPE not in traced(learner.iteration, *jax.eval_shape(learner.init, key))
    programs = runner.build_programs(cfg)
    state = programs.init(key)
    expected = jax.jit(learner.init)(key)  # the staged init is the learner's init
    for a, b in zip(jax.tree.leaves(expected), jax.tree.leaves(state), strict=True):
        if jnp.issubdtype(a.dtype, jnp.floating):  # two programs: their rounding (~1e-7 here)
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
        else:  # keys, counters, flags
            np.testing.assert_array_equal(a, b)
    programs.env_iteration(*state)
    assert programs.sharded.refresh._cache_size() == 1


def test_evaluation_envs_without_resets_count_the_same_first_episodes():
    """A constant push topples the pendulums mid-episode: the first episodes' returns and lengths
    are those of envs that reset, and the envs that stop stay finite."""
    env = make_brax_env("inverted_pendulum", "positional", 4, 60)
    key = jax.random.PRNGKey(0)

    def act(obs, hidden):
        return jnp.ones((obs["policy"].shape[0], 1)), hidden

    def evaluate(mode: str) -> dict:
        mode_env = env.replace(auto_reset=mode)
        return jax.jit(lambda k: deterministic_episodes(mode_env, act, {}, k))(key)

    out = {mode: evaluate(mode) for mode in ("in_step", "none")}
    assert float(out["none"]["episode_length"]) < 60  # the episodes ended before the time limit
    for name in ("episode_reward", "episode_length"):
        np.testing.assert_allclose(out["none"][name], out["in_step"][name], rtol=1e-6)
        assert np.isfinite(out["none"][name])


def test_unknown_auto_reset_is_refused_by_name(env):
    with pytest.raises(ConfigError, match=r"env.auto_reset 'lazy'; valid choices: \['pool', 'in_step'\]"):
        resolve_config("inverted_pendulum", overrides=["env.auto_reset=lazy"])
    with pytest.raises(ConfigError, match="auto_reset='lazy': expected one of pool, in_step, none"):
        env.replace(auto_reset="lazy")
