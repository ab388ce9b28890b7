"""One jit-compiled learner iteration: rollout, returns and the whole update, no host round-trip.

The learner is a run's static description (`train_loops.run_spec.RunSpec`: env, policy model,
optimiser, update rule, parts) with the programs that run over it: a rollout from a source
(`train_loops.rollout`: the envs, or `train_loops.dataset_rollout`: a demonstration dataset),
the parts' hooks before and after the update, the update rule (`train_loops.update_rules`:
`PPOUpdate`, i.e. `train_loops.ppo_update` with the loss `agents.ppo.ppo_loss`, or
`BehaviorCloningUpdate`, rsl_rl Distillation's truncated BPTT), the normalisers and the
finiteness checks (`train_loops.finiteness`). It calls each part's hooks in order and never names
one, and calls the rule's `update` without asking which rule it is. Which update and which parts
an algorithm uses is `agents.algorithms.ALGORITHMS`; `runners.learner_builder` builds them.

The runner executes `init` and `iteration` per device under `shard_map` (`runners.devices`):
with `axis_name` set, `env` is the device's share of the envs and every reduction over envs
(advantage statistics, gradients, KL, normalisers, episode sums) spans all devices.
"""

from __future__ import annotations

import functools

import chex
import jax
import jax.numpy as jnp
from flax import struct

from strl_jax.agents.parts import InitContext, UpdateContext
from strl_jax.buffers.history import RolloutHistory, empty_history
from strl_jax.buffers.transitions import Transition
from strl_jax.collectives import pmean, psum
from strl_jax.envs.vec_env import VecEnv
from strl_jax.networks.normalizer import init_normalizer
from strl_jax.train_loops.evaluation import deterministic_episodes
from strl_jax.train_loops.finiteness import NEVER, check_name, finite
from strl_jax.train_loops.ppo_update import raw_batch
from strl_jax.train_loops.rollout import EnvSource, RolloutSource, rollout
from strl_jax.train_loops.run_spec import RunSpec, UpdateOutput
from strl_jax.train_loops.state import RolloutState, TrainState


@struct.dataclass
class Learner(RunSpec):
    """The run's static description (`RunSpec`) and the compiled programs over it: `init`,
    `iteration` (rollout, parts' hooks, update, normalisers, checks) and `evaluate`."""

    # ---- state -------------------------------------------------------------------------
    def init(self, key: jax.Array) -> tuple[TrainState, RolloutState]:
        """Fresh parameters, optimiser, normalisers, parts and environments for `key`."""
        train_state, rollout_state = self.init_pending(key)
        return train_state, self.start_episodes(self.refresh_pool(rollout_state))

    def init_pending(self, key: jax.Array) -> tuple[TrainState, RolloutState]:
        """`init` with the envs still pending (`VecEnv.pending`): no env reset is traced here, the
        first states come from `refresh_pool` and `start_episodes`, programs of their own that
        the iterations share, so a run compiles the reset once."""
        key, init_key, env_key = jax.random.split(key, 3)
        shapes = self.env.observation_shapes()
        params = self.model.init(init_key, shapes)
        env_ids = self.env_ids()
        ctx = InitContext(
            num_envs=self.env.num_envs, env_ids=env_ids, obs_shapes=shapes, action_size=self.env.action_size
        )
        train_parts, rollout_parts = {}, {}
        for p in self.parts:
            part_key = None
            if p.draws_at_init:
                key, part_key = jax.random.split(key)
            train_parts[p.name], rollout_parts[p.name] = p.init(part_key, ctx)
        train_state = TrainState(
            params=params,
            opt_state=self.init_optimizer(params, train_parts),
            normalizers={k: init_normalizer(s) for k, s in self.policy_groups(shapes).items()},
            learning_rate=self.initial_learning_rate(),
            key=key,
            iteration=jnp.zeros((), jnp.int32),
            parts=train_parts,
        )
        rollout_state = pending_rollout_state(self, env_key, env_ids[0], rollout_parts)
        if self.history_chunks > 1:
            rollout_state = rollout_state.replace(history=zero_history(self, train_state, rollout_state))
        # Donated buffers must be distinct: groups that share an array get their own copy.
        return jax.tree.map(jnp.copy, (train_state, rollout_state))

    # ---- acting ------------------------------------------------------------------------
    def start_episodes(self, rollout_state: RolloutState) -> RolloutState:
        """Every env in its first state, after `init_pending` and `refresh_pool` (`VecEnv.start`)."""
        env_state, obs = self.env.start(rollout_state.env_state)
        return rollout_state.replace(env_state=env_state, obs=obs)

    def refresh_pool(self, rollout_state: RolloutState) -> RolloutState:
        """New initial states for the envs whose pool state the last rollout used (`VecEnv`'s
        `auto_reset="pool"`): compiled apart from the iteration, run before each env iteration."""
        return rollout_state.replace(env_state=self.env.refresh_pool(rollout_state.env_state))

    def rollout(self, train_state: TrainState, rollout_state: RolloutState, key: jax.Array):
        """The env rollout with the current policy (`train_loops.rollout.rollout`)."""
        return rollout(self, train_state, rollout_state, key)

    # ---- the iteration -----------------------------------------------------------------
    def iteration(self, train_state: TrainState, rollout_state: RolloutState):
        """Advance the whole system by one iteration in the envs; returns new states and metrics.

        metrics: `rollout` (episode sums for the host's logging window), `scalars` (everything
        logged as is) and `finite`: per checked quantity (loss terms and gradients of every
        optimiser step, the parameters after the update), the first optimiser step at which it
        was not finite, `NEVER` if it stayed finite; the host stops the run on any failure.
        """
        return self.iterate(train_state, rollout_state, EnvSource())

    def iterate(self, train_state: TrainState, rollout_state: RolloutState, source: RolloutSource):
        """One iteration with the rollout `source` (`train_loops.rollout`: the envs, or
        `train_loops.dataset_rollout`'s replayed dataset): `(train state', rollout state',
        metrics)`. A source's `fixed_rate` (static): every optimiser step takes this rate, the
        adaptive rule and the scheduler do not run, and the train state keeps its rate, so the
        iterations after this one go on from where the schedule was."""
        rule, fixed_rate = self.update_rule, source.fixed_rate
        key, rollout_key, update_key = self.iteration_keys(train_state.key)
        rollout_state, transitions, sums, bootstrap, source_scalars = source(
            self, train_state, rollout_state, rollout_key
        )
        steps = self.cfg.runner.num_steps_per_env
        chex.assert_shape(transitions.rewards, (steps, self.env.num_envs))
        ctx = self.update_context(steps)
        rollout_parts = {
            p.name: p.before_update(
                train_state.parts[p.name], rollout_state.parts[p.name], transitions.parts[p.name], ctx
            )
            for p in self.parts
        }
        rollout_state = rollout_state.replace(parts=rollout_parts)
        if self.normalization.absorbs("before"):
            # brax: the update (last values, batch observations) already sees this rollout's statistics
            train_state = train_state.replace(
                normalizers=self.absorb(train_state.normalizers, transitions.obs)
            )
        stepping = train_state
        if fixed_rate is not None:
            stepping = train_state.replace(learning_rate=jnp.asarray(fixed_rate, jnp.float32))
        update, rollout_state = rule.update(
            self, stepping, rollout_state, transitions, bootstrap, update_key, adapt=fixed_rate is None
        )
        new_train_state = self.after_update(train_state, update, transitions, key, ctx, fixed_rate)
        states = (train_state, new_train_state)
        scalars = iteration_scalars(self, states, update, transitions, sums, source_scalars)
        if fixed_rate is not None:
            scalars["learning_rate"] = update.learning_rate  # the fixed rate the steps took
        checks = update.checks | parameter_checks(update.trainable, rule.optimizer_steps(self.cfg))
        rollout_sums = {k: v for k, v in sums.items() if k != "parts"}
        metrics = {"rollout": rollout_sums, "scalars": scalars, "finite": checks}
        return new_train_state, rollout_state, metrics

    def iteration_keys(self, key: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array | None]:
        """`(the run's next key, the rollout's, the update's or None)`."""
        if self.update_rule.splits_key:
            key, rollout_key, update_key = jax.random.split(key, 3)
            return key, rollout_key, update_key
        key, rollout_key = jax.random.split(key)
        return key, rollout_key, None

    def after_update(
        self,
        train_state: TrainState,
        update: UpdateOutput,
        transitions: Transition,
        key: jax.Array,
        ctx: UpdateContext,
        fixed_rate: float | None,
    ) -> TrainState:
        """The next train state: the update's parameters and optimiser, the normalisers (absorbing
        the rollout after the update, unless they did before it), the rate, the parts'
        `after_update`."""
        normalizers = train_state.normalizers
        if self.normalization.absorbs("after"):
            # After the update, so the first ratio of the next update is exactly 1 (rsl_rl #225).
            normalizers = self.absorb(normalizers, transitions.obs)
        params, train_parts = self.with_trainable(update.trainable, update.parts)
        train_parts = {
            **train_parts,
            **{
                p.name: p.after_update(train_parts[p.name], transitions.parts[p.name], ctx)
                for p in self.parts
            },
        }
        return train_state.replace(
            params=params,
            opt_state=update.opt_state,
            normalizers=normalizers,
            learning_rate=self.rate_after(update.learning_rate, train_state, fixed_rate),
            key=key,
            iteration=train_state.iteration + 1,
            parts=train_parts,
        )

    def rate_after(self, lr: jax.Array, train_state: TrainState, fixed_rate: float | None) -> jax.Array:
        """The train state's rate after an update that left `lr`: one scheduler step on it, or with
        a fixed rate the rate before the update (a fixed-rate stage does not move the schedule)."""
        if fixed_rate is not None:
            return train_state.learning_rate
        if self.lr_scheduler is None:
            return lr
        return self.lr_scheduler.step(lr, train_state.iteration + 1)

    def absorb(self, normalizers: dict, obs: dict) -> dict:
        """The observation normalisers after taking in a rollout's raw observations `[T, N, ...]`."""
        return self.normalization.absorb(normalizers, obs, self.axis_name)

    # ---- evaluation --------------------------------------------------------------------
    def evaluate(self, eval_env: VecEnv, params, normalizers, key: jax.Array):
        """Deterministic (mean-action) episodes on separate envs: mean return and length."""

        def act(obs, hidden):
            return self.actor.act(params, normalizers, obs, hidden)

        return deterministic_episodes(eval_env, act, self.model.initial_hidden(eval_env.num_envs), key)


def parameter_checks(trainable: dict, optimizer_steps: int) -> dict:
    """Per optimised network: the step after the update's last (`optimizer_steps`) if its
    parameters are not finite, else `NEVER`."""
    after = jnp.asarray(optimizer_steps, jnp.int32)
    return {
        check_name(3, f"parameters of {k}"): jnp.where(finite(v), NEVER, after) for k, v in trainable.items()
    }


def iteration_scalars(
    learner: Learner,
    states: tuple[TrainState, TrainState],
    update: UpdateOutput,
    transitions: Transition,
    sums: dict,
    source_scalars: dict,
) -> dict:
    """Means over the optimiser steps, the source's scalars, the parts' iteration metrics, the
    learning rate the update leaves and the action std; `states`: the train state before and after."""
    train_state, new_train_state = states
    update_metrics = update.metrics
    train_parts = new_train_state.parts
    num_samples = psum(jnp.asarray(transitions.rewards.size, jnp.float32), learner.axis_name)
    scalars = dict(jax.tree.map(jnp.mean, update_metrics)) | source_scalars
    for p in learner.parts:
        scalars |= p.iteration_metrics(
            train_parts[p.name], sums["parts"][p.name], num_samples, train_state.iteration
        )
    return scalars | {
        "learning_rate": new_train_state.learning_rate,
        "mean_noise_std": pmean(jnp.mean(transitions.std[-1]), learner.axis_name),
    }


def zero_history(learner: Learner, train_state: TrainState, rollout_state: RolloutState) -> RolloutHistory:
    """Zeros shaped like the rollouts the update will keep (traced, not run)."""
    abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), (train_state, rollout_state))
    _, transitions, _ = jax.eval_shape(learner.rollout, *abstract, jax.random.PRNGKey(0))
    values = jax.ShapeDtypeStruct(transitions.rewards.shape[1:], jnp.float32)
    batch = jax.eval_shape(functools.partial(raw_batch, learner), transitions, values)
    return empty_history(batch, learner.history_chunks)


def metric_sections(learner: Learner) -> dict[str, str]:
    """TensorBoard section of each scalar this learner logs (rsl_rl's names for the core)."""
    sections = {
        "surrogate": "Loss",
        "value_function": "Loss",
        "entropy": "Loss",
        "kl": "Loss",
        "learning_rate": "Loss",
        "mean_noise_std": "Policy",
    }
    for p in learner.parts:
        sections |= p.sections
    return sections


def pending_rollout_state(
    learner: Learner, env_key: jax.Array, first_env: jax.Array, parts: dict
) -> RolloutState:
    """The rollout state of pending envs (`VecEnv.pending`, optionally at random episode steps),
    with zero episode sums, fresh memories and the parts' rollout states."""
    env = learner.env
    env_state = env.pending(env_key, first_env)
    obs = env.observe(env_state.brax_state)
    if learner.cfg.runner.init_at_random_ep_len:
        env_state = env.random_episode_starts(env_state, env_key, first_env)
    metric_names = jax.eval_shape(env.step, env_state, jnp.zeros((env.num_envs, env.action_size)))
    zeros = jnp.zeros((env.num_envs,), jnp.float32)
    return RolloutState(
        env_state=env_state,
        obs=obs,
        episode_return=zeros,
        episode_length=jnp.zeros((env.num_envs,), jnp.int32),
        episode_metrics={k: zeros for k in metric_names[1].metrics},
        hidden=learner.model.initial_hidden(env.num_envs),
        parts=parts,
    )
