"""Acting in an env without learning: evaluation during training, `play`, `collect`, and a
teacher's reference return. (The training rollout is the learner's own scan: it also runs the
critic and the parts.)"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from strl_jax.envs.brax_env import BraxVecEnv, StepResult
from strl_jax.networks.policy import reset_hidden_groups

# (observation groups, hidden, key or None) -> (action, hidden')
Act = Callable[[dict, Any, Any], tuple[jax.Array, Any]]
# (env state acted on, observation groups acted on, action, the env's answer) -> what to keep
Record = Callable[[Any, dict, jax.Array, StepResult], Any]


def act_in_env(
    env: BraxVecEnv,
    act: Act,
    reset_hidden: Callable[[Any, jax.Array], Any],
    carry: tuple[Any, dict, Any],
    record: Record,
    keys: jax.Array | None = None,
    length: int | None = None,
):
    """Steps of `act` in `env` from `carry = (env state, observations, hidden)`, one per key (or
    `length` steps without keys), as a `lax.scan`: `(carry', records [T, ...])`. The hidden state
    of finished episodes restarts from zero; the env resets them itself."""

    def step(carry, key):
        env_state, obs, hidden = carry
        action, hidden = act(obs, hidden, key)
        next_state, res = env.step(env_state, action)
        hidden = reset_hidden(hidden, res.terminated | res.truncated)
        return (next_state, res.obs, hidden), record(env_state, obs, action, res)

    return jax.lax.scan(step, carry, keys, length=length)


def episode_rollout(env: BraxVecEnv, act, hidden, key: jax.Array, reset_hidden=None, record=None):
    """One deterministic episode per env with `act(obs, hidden) -> (action, hidden')`.

    Returns `(returns [N], lengths [N], records [T, ...])`: `record(env_state)` of the state each
    step acted on (None without `record`). Shared by evaluation and `play`.
    """
    env_state, obs = env.reset(key)
    n = env.num_envs

    def keep(state, _obs, _action, res):
        return res.reward, res.terminated | res.truncated, None if record is None else record(state)

    _, (rewards, dones, records) = act_in_env(
        env,
        lambda obs, hidden, _key: act(obs, hidden),
        reset_hidden or reset_hidden_groups,
        (env_state, obs, hidden),
        keep,
        length=env.episode_length,
    )

    def first_episode(carry, xs):
        alive, ret, length = carry
        reward, done = xs
        ret = ret + reward * alive
        length = length + alive
        alive = alive * (1.0 - done.astype(jnp.float32))
        return (alive, ret, length), None

    init = (jnp.ones((n,)), jnp.zeros((n,)), jnp.zeros((n,)))
    (_, returns, lengths), _ = jax.lax.scan(first_episode, init, (rewards, dones))
    return returns, lengths, records


def deterministic_episodes(eval_env: BraxVecEnv, act, hidden, key: jax.Array) -> dict:
    """One episode per env with `act(obs, hidden) -> (action, hidden')`: mean return and length."""
    returns, lengths, _ = episode_rollout(eval_env, act, hidden, key)
    return {"episode_reward": jnp.mean(returns), "episode_length": jnp.mean(lengths)}
