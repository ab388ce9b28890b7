"""Acting in an env without learning: evaluation during training, `play`, `collect`, and a
teacher's reference return. (The training rollout is the learner's own scan: it also runs the
critic and the parts.)"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from strl_jax.envs.vec_env import StepResult, VecEnv
from strl_jax.networks.policy import reset_hidden_groups

# (observation groups, hidden, key or None) -> (action, hidden')
Act = Callable[[dict, Any, Any], tuple[jax.Array, Any]]
# (env state acted on, observation groups acted on, action, the env's answer) -> what to keep
Record = Callable[[Any, dict, jax.Array, StepResult], Any]


def act_in_env(
    env: VecEnv,
    act: Act,
    reset_hidden: Callable[[Any, jax.Array], Any],
    carry: tuple[Any, dict, Any],
    record: Record,
    keys: jax.Array | None = None,
    length: int | None = None,
):
    """Steps of `act` in `env` from `carry = (env state, observations, hidden)`, one per key (or
    `length` steps without keys), as a `lax.scan`: `(carry', records [T, ...])`. The hidden state
    of finished episodes restarts from zero; the env resets them itself. `act` may return
    `((executed action, anything else), hidden')`: the env takes the first, `record` gets both."""

    def step(carry, key):
        env_state, obs, hidden = carry
        action, hidden = act(obs, hidden, key)
        next_state, res = env.step(env_state, action[0] if isinstance(action, tuple) else action)
        hidden = reset_hidden(hidden, res.terminated | res.truncated)
        return (next_state, res.obs, hidden), record(env_state, obs, action, res)

    return jax.lax.scan(step, carry, keys, length=length)


def episode_rollout(env: VecEnv, act, hidden, key: jax.Array, reset_hidden=None, record=None):
    """One deterministic episode per env with `act(obs, hidden) -> (action, hidden')`.

    Returns `(returns [N], lengths [N], records [T, ...], probes)`: `record(env_state)` of the
    state each step acted on (None without `record`), and the env's probe of each step
    (`{name: [T, N, ...]}`, empty without a probe) with `alive [T, N]`, 1 on the steps of the
    first episode. Shared by evaluation and `play`.
    """
    env_state, obs = env.reset(key)
    n = env.num_envs

    def keep(state, _obs, _action, res):
        kept = None if record is None else record(state)
        return res.reward, res.terminated | res.truncated, kept, res.probe

    _, (rewards, dones, records, probe) = act_in_env(
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
        step_alive = alive
        alive = alive * (1.0 - done.astype(jnp.float32))
        return (alive, ret, length), step_alive

    init = (jnp.ones((n,)), jnp.zeros((n,)), jnp.zeros((n,)))
    (_, returns, lengths), alive = jax.lax.scan(first_episode, init, (rewards, dones))
    return returns, lengths, records, {**probe, "alive": alive} if probe else {}


# what `locomotion_summary` reports for an env with a locomotion probe (logged as `eval_<name>`)
LOCOMOTION_METRICS = ("velrmsd", "CoT", "falls")


def locomotion_metrics(probe: dict, alive: jax.Array) -> dict[str, jax.Array]:
    """st_rl's locomotion evaluation over the steps of the first episodes (`alive` weights them).

    `velrmsd`: root mean square over steps of the velocity-tracking error `||v - command||` in
    (vx, vy, yaw rate), the base's own frame (what Playground's tracking rewards compare).
    `CoT`: cost of transport, mechanical energy per distance per weight, over the whole evaluation:
    `sum(power) / sum(weight * ||v_xy||)` (a robot standing still has an infinite CoT).
    """
    steps = jnp.maximum(jnp.sum(alive), 1.0)
    error = jnp.sum(jnp.square(probe["velocity"] - probe["command"]), axis=-1)
    speed = jnp.linalg.norm(probe["velocity"][..., :2], axis=-1)
    return {
        "velrmsd": jnp.sqrt(jnp.sum(error * alive) / steps),
        "CoT": jnp.sum(probe["power"] * alive) / jnp.sum(probe["weight"] * speed * alive),
    }


def deterministic_episodes(eval_env: VecEnv, act, hidden, key: jax.Array) -> dict:
    """One episode per env with `act(obs, hidden) -> (action, hidden')`: mean return and length,
    and where the env has a locomotion probe the locomotion metrics and `falls`, the fraction of
    episodes that ended before the env's episode length (terminated: the robot fell)."""
    returns, lengths, _, probe = episode_rollout(eval_env, act, hidden, key)
    out = {"episode_reward": jnp.mean(returns), "episode_length": jnp.mean(lengths)}
    return out | locomotion_summary(eval_env, lengths, probe)


def locomotion_summary(env: VecEnv, lengths: jax.Array, probe: dict) -> dict[str, jax.Array]:
    """`locomotion_metrics` and `falls` (the fraction of episodes that ended before the env's
    episode length: terminated, the robot fell) where `env` has a locomotion probe; else {}."""
    if not {"velocity", "command", "power", "weight"} <= set(probe):
        return {}
    falls = jnp.mean((lengths < env.episode_length).astype(jnp.float32))
    return {**locomotion_metrics(probe, probe["alive"]), "falls": falls}
