"""The rollout: what one iteration learns from, behind a small source interface.

A rollout source is called as `source(learner, train_state, rollout_state, key)` and returns
`(rollout state', transitions [T, N], sums over steps and devices, (obs, memory) the last values
bootstrap from, extra scalars)`. `EnvSource` steps the vmapped envs with the current policy
(`rollout`, one `rollout_step` per env step, time-outs bootstrapped from `timeout_values`);
`train_loops.dataset_rollout.DatasetSource` replays demonstration trajectories instead. Both run
inside the learner's compiled iteration; `learner` is the static `RunSpec` they serve.
"""

from __future__ import annotations

import functools
from typing import Any, Protocol

import jax
import jax.numpy as jnp
from flax import struct

from strl_jax.agents.parts import EnvStep, StepContext
from strl_jax.agents.ppo import POLICY
from strl_jax.buffers.gae import bootstrap_timeouts
from strl_jax.buffers.transitions import Transition
from strl_jax.collectives import env_keys, psum
from strl_jax.masked_rows import reserved_rows, where_rows
from strl_jax.networks.policy import reset_hidden_groups
from strl_jax.train_loops.run_spec import RunSpec
from strl_jax.train_loops.state import RolloutState, TrainState

# `(rollout state', transitions, sums, (obs, memory) to bootstrap from, extra scalars)`
RolloutOutput = tuple[RolloutState, Transition, dict, tuple[dict, Any], dict]


class RolloutSource(Protocol):
    """Where an iteration's transitions come from (a pytree: its arrays are program arguments)."""

    # every optimiser step of an iteration on this source takes this rate, and the adaptive rule
    # and the scheduler do not run (None: the algorithm's schedule)
    fixed_rate: float | None

    def __call__(
        self, learner: RunSpec, train_state: TrainState, rollout_state: RolloutState, key: jax.Array
    ) -> RolloutOutput: ...


@struct.dataclass
class EnvSource:
    """The envs, stepped with the current policy."""

    fixed_rate: float | None = struct.field(pytree_node=False, default=None)

    def __call__(
        self, learner: RunSpec, train_state: TrainState, rollout_state: RolloutState, key: jax.Array
    ) -> RolloutOutput:
        return env_rollout(learner, train_state, rollout_state, key)


def timeout_rows(num_envs: int, episode_length: int) -> int:
    """Critic rows per chunk of time-out bootstraps: four times the time-outs of a step when
    episodes are spread evenly over their length, at least 16 (more take several chunks)."""
    return reserved_rows(num_envs, 4 / episode_length)


def timeout_values(
    learner: RunSpec, params, normalizers, final_obs, hidden, truncated: jax.Array
) -> jax.Array:
    """V(final observation) of the envs whose episode was truncated this step, 0 elsewhere.

    Only those values enter the returns (`bootstrap_timeouts`), and time-outs are rare (about
    `N / episode_length` a step when episodes are spread out): the critic sees only the
    truncated envs' rows (`where_rows`), not a second pass over every env.
    """
    n = truncated.shape[0]
    return where_rows(
        truncated,
        lambda args: learner.critic_value(params, normalizers, *args),
        (final_obs, hidden),
        jnp.zeros((n,), jnp.float32),
        timeout_rows(n, learner.env.episode_length),
        in_axes=(0, 1),  # recurrent memories are [layers, N, hidden]
    )


def step_keys(learner: RunSpec, keys: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
    """`(sampling keys [N], {part: [k, N] keys})`: per-env keys split for the parts that draw,
    and under `POLICY` for the policy's own draws (estimator replacement masks)."""
    wanted = [(p.name, p.step_keys) for p in learner.parts if p.step_keys]
    if learner.model.draws_anything:
        wanted.append((POLICY, 1))
    if not wanted:
        return keys, {}
    split = jax.vmap(jax.random.split, (0, None), 1)(keys, 1 + sum(k for _, k in wanted))
    out, start = {}, 1
    for name, k in wanted:
        out[name] = split[start : start + k]
        start += k
    return split[0], out


def rollout_step(learner: RunSpec, train_state: TrainState, rs: RolloutState, step_key: jax.Array):
    """One vmapped env step: `(rollout state', transition, step sums)`."""
    cfg = learner.cfg
    params, normalizers = train_state.params, train_state.normalizers
    env_ids = learner.env_ids()
    keys = env_keys(step_key, env_ids)  # per env: the same draws on any number of devices
    sample_keys, part_keys = step_keys(learner, keys)
    draws = learner.model.draw(part_keys[POLICY][0]) if POLICY in part_keys else {}
    mean, std, hidden, estimates = learner.actor.forward(params, normalizers, rs.obs, rs.hidden, draws)
    critic_obs = learner.normalization.groups(normalizers, learner.policy_groups(rs.obs))
    values, hidden = learner.model.value_and_hidden(params, critic_obs, hidden)
    ctx = StepContext(
        obs=rs.obs,
        mean=mean,
        std=std,
        step_key=step_key,
        env_ids=env_ids,
        iteration=train_state.iteration,
        estimates=learner.actor.raw_estimates(normalizers, estimates),
        axis_name=learner.axis_name,
    )
    # st_rl's DeterministicPolicyMixin executes the mean (parts such as TPPO may still replace it)
    dist = learner.model.action_dist
    raw = mean if learner.model.deterministic else jax.vmap(dist.sample)(sample_keys, mean, std)
    actions = dist.postprocess(raw)
    acted = {}
    for p in learner.parts:
        name = p.name
        actions, acted[name] = p.act(
            train_state.parts[name], rs.parts[name], ctx, actions, part_keys.get(name)
        )
    env_state, res = learner.env.step(rs.env_state, actions)
    bootstrap_values = timeout_bootstrap_values(learner, train_state, res, hidden, values)
    done = res.terminated | res.truncated
    env_step = EnvStep(
        obs=res.obs, final_obs=res.final_obs, reward=res.reward, done=done, terminated=res.terminated
    )
    reward, rollout_parts, fields, part_sums = parts_on_step(learner, train_state, rs, ctx, env_step, acted)
    rewards = bootstrap_timeouts(reward, res.truncated, bootstrap_values, cfg.algorithm.gamma)
    stored = raw if dist.squashed else actions  # what the update's log-probability reads
    transition = Transition(
        obs=learner.policy_groups(rs.obs),
        actions=stored,
        log_prob=dist.log_prob(stored, mean, std),
        mean=mean,
        std=std,
        values=values,
        rewards=rewards,
        dones=done.astype(jnp.float32),
        truncated=res.truncated.astype(jnp.float32) if learner.masks_timeouts else None,
        draws=draws,
        parts=fields,
    )
    rs, sums = next_rollout_state(rs, env_state, res, hidden, rollout_parts)
    sums |= {"parts": part_sums}
    return rs, transition, sums


def timeout_bootstrap_values(
    learner: RunSpec, train_state: TrainState, res: Any, hidden: Any, values: jax.Array
):
    """What a time-out step's reward is bootstrapped with (`algorithm.timeout_bootstrap`)."""
    how = learner.cfg.algorithm.timeout_bootstrap
    if how == "final_obs":
        # The critic's memory has seen obs_t; the final observation is its next input.
        params, normalizers = train_state.params, train_state.normalizers
        return timeout_values(learner, params, normalizers, res.final_obs, hidden, res.truncated)
    if how == "rsl_rl":
        return values
    return jnp.zeros_like(values)  # "none": GAE masks the time-out step instead (`compute_gae`'s `masked`)


def parts_on_step(
    learner: RunSpec,
    train_state: TrainState,
    rs: RolloutState,
    ctx: StepContext,
    env_step: EnvStep,
    acted: dict,
) -> tuple[jax.Array, dict, dict, dict]:
    """Each part's `on_step` in order, each seeing the reward the ones before it left:
    `(learning reward, parts' rollout states, stored fields, step sums)`."""
    reward = env_step.reward * learner.cfg.algorithm.reward_scale
    rollout_parts, fields, part_sums = {}, {}, {}
    for p in learner.parts:
        name = p.name
        out = p.on_step(train_state.parts[name], rs.parts[name], ctx, env_step, reward, acted[name])
        reward, rollout_parts[name], fields[name], part_sums[name] = (
            out.reward,
            out.rollout,
            out.fields,
            out.sums,
        )
    return reward, rollout_parts, fields, part_sums


def next_rollout_state(
    rs: RolloutState, env_state: Any, res: Any, hidden: Any, rollout_parts: dict
) -> tuple[RolloutState, dict]:
    """The rollout state after an env step (episode sums restart where an episode ended, memories
    reset there) and the step's sums for the logging window."""
    done = res.terminated | res.truncated
    ep_return, ep_length, ep_metrics = (
        rs.episode_return + res.reward,
        rs.episode_length + 1,
        {k: rs.episode_metrics[k] + res.metrics[k] for k in rs.episode_metrics},
    )
    sums = episode_sums(ep_return, ep_length, ep_metrics, res.reward, done)
    rs = RolloutState(
        env_state=env_state,
        obs=res.obs,
        episode_return=jnp.where(done, 0.0, ep_return),
        episode_length=jnp.where(done, 0, ep_length),
        episode_metrics={k: jnp.where(done, 0.0, v) for k, v in ep_metrics.items()},
        hidden=reset_hidden_groups(hidden, done),
        parts=rollout_parts,
        history=rs.history,
    )
    return rs, sums


def episode_sums(
    ep_return: jax.Array, ep_length: jax.Array, ep_metrics: dict, reward: jax.Array, done: jax.Array
) -> dict:
    """The step's sums for the logging window: finished episodes, their returns, lengths and
    per-step means of the env metrics, and the reward of every env."""
    d = done.astype(jnp.float32)
    return {
        "episodes": d.sum(),
        "return_sum": (ep_return * d).sum(),
        "length_sum": (ep_length * d).sum(),
        "reward_sum": reward.sum(),
        "metrics": {k: (ep_metrics[k] / ep_length * d).sum() for k in ep_metrics},
    }


def rollout(learner: RunSpec, train_state: TrainState, rollout_state: RolloutState, key: jax.Array):
    """`num_steps_per_env` vmapped env steps with the current policy, as a `lax.scan`.

    Returns `(rollout state', transitions [T, N], sums over steps and devices)`; the parts
    choose executed actions, shape rewards and store their fields in the transitions.
    """
    keys = jax.random.split(key, learner.cfg.runner.num_steps_per_env)
    step = functools.partial(rollout_step, learner, train_state)
    _, _, sums_shape = jax.eval_shape(step, rollout_state, keys[0])
    sums0 = jax.tree.map(lambda _: jnp.zeros((), jnp.float32), sums_shape)

    def body(carry, step_key):
        rs, totals = carry
        rs, transition, sums = step(rs, step_key)
        return (rs, jax.tree.map(jnp.add, totals, sums)), transition

    initial_hidden = rollout_state.hidden
    (rollout_state, sums), transitions = jax.lax.scan(body, (rollout_state, sums0), keys)
    sums = psum(sums, learner.axis_name)  # sums over all devices' envs
    return rollout_state, transitions.replace(initial_hidden=initial_hidden), sums


def env_rollout(learner: RunSpec, train_state: TrainState, rollout_state: RolloutState, key: jax.Array):
    """`rollout`, and what the last values bootstrap from: the env's observation and memory."""
    rollout_state, transitions, sums = rollout(learner, train_state, rollout_state, key)
    return rollout_state, transitions, sums, (rollout_state.obs, rollout_state.hidden), {}
