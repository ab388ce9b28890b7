"""Deterministic episodes: evaluation during training, `play`, and a teacher's reference return."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from strl_jax.envs.brax_env import BraxVecEnv
from strl_jax.networks.policy import reset_hidden_groups


def episode_rollout(env: BraxVecEnv, act, hidden, key: jax.Array, reset_hidden=None, record=None):
    """One deterministic episode per env with `act(obs, hidden) -> (action, hidden')`.

    Returns `(returns [N], lengths [N], records [T, ...])`: `record(env_state)` of the state each
    step acted on (None without `record`). Shared by evaluation and `play`.
    """
    reset_hidden = reset_hidden or reset_hidden_groups
    env_state, obs = env.reset(key)
    n = env.num_envs

    def step(carry, _):
        env_state, obs, hidden, alive, ret, length = carry
        recorded = None if record is None else record(env_state)
        action, hidden = act(obs, hidden)
        env_state, res = env.step(env_state, action)
        done = res.terminated | res.truncated
        ret = ret + res.reward * alive
        length = length + alive
        alive = alive * (1.0 - done.astype(jnp.float32))
        return (env_state, res.obs, reset_hidden(hidden, done), alive, ret, length), recorded

    init = (env_state, obs, hidden, jnp.ones((n,)), jnp.zeros((n,)), jnp.zeros((n,)))
    (*_, returns, lengths), records = jax.lax.scan(step, init, None, length=env.episode_length)
    return returns, lengths, records


def deterministic_episodes(eval_env: BraxVecEnv, act, hidden, key: jax.Array) -> dict:
    """One episode per env with `act(obs, hidden) -> (action, hidden')`: mean return and length."""
    returns, lengths, _ = episode_rollout(eval_env, act, hidden, key)
    return {"episode_reward": jnp.mean(returns), "episode_length": jnp.mean(lengths)}
