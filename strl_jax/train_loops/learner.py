"""One jit-compiled learner iteration: rollout, returns and the whole update, no host round-trip.

The learner is PPO's core (returns, minibatches, adaptive KL; the rollout and its sources are
`train_loops.rollout`, the loss `agents.ppo.ppo_loss`) plus a tuple of parts (`agents.parts`): it
calls each part's hooks in order and never names one. `update_rule` (`train_loops.update_rules`)
is the optimisation, `PPOUpdate` (minibatch epochs over the rollout) or `BehaviorCloningUpdate`
(rsl_rl Distillation's truncated BPTT); the learner calls its `update` without asking which it
is. Which update and which parts an algorithm uses is `agents.algorithms.ALGORITHMS`;
`train_loops.learner_builder` builds them.

The runner executes `init` and `iteration` per device under `shard_map` (`train_loops.devices`):
with `axis_name` set, `env` is the device's share of the envs and every reduction over envs
(advantage statistics, gradients, KL, normalisers, episode sums) spans all devices.
"""

from __future__ import annotations

import functools
from typing import Any

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from strl_jax.agents.distillation import DistillationBatch, bptt_update, step_order
from strl_jax.agents.lr_schedulers import LrScheduler
from strl_jax.agents.parts import InitContext, Part, UpdateContext
from strl_jax.agents.ppo import (
    POLICY,
    MinibatchInputs,
    PPOBatch,
    PPOLossSettings,
    adaptive_learning_rate,
    ppo_loss,
)
from strl_jax.buffers.gae import compute_gae, normalize_advantages
from strl_jax.buffers.history import RolloutHistory, empty_history, with_history
from strl_jax.buffers.minibatch import merge_time_env, minibatch_indices
from strl_jax.buffers.rollout_dataset import (
    DatasetArrays,
    init_cursor,
    pretrain_settings,
)
from strl_jax.buffers.transitions import Transition
from strl_jax.collectives import global_env_ids, pmean, psum
from strl_jax.configs.schema import TrainConfig
from strl_jax.envs.vec_env import VecEnv
from strl_jax.networks.acting import Actor
from strl_jax.networks.actor_critic import clamp_std
from strl_jax.networks.normalizer import init_normalizer, normalize_groups, update_normalizer
from strl_jax.networks.policy import PolicyModel, reset_hidden_groups
from strl_jax.train_loops.evaluation import deterministic_episodes
from strl_jax.train_loops.rollout import DatasetSource, EnvSource, RolloutSource, rollout
from strl_jax.train_loops.state import RolloutState, TrainState
from strl_jax.train_loops.update_rules import UpdateRule

RESAMPLE_STREAM = 0x5E5A  # folded into a minibatch's key for `hidden_state_resample_prob`
ENTROPY_STREAM = 0xE7A0  # ... for the entropy estimate of a squashed distribution


def finite(tree: Any) -> jax.Array:
    """True when every element of every leaf is finite (a scalar bool)."""
    leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.asarray(True)


@struct.dataclass
class Learner:
    """Static description of a run: env, policy, optimiser, update and parts. Not a pytree of arrays."""

    env: VecEnv = struct.field(pytree_node=False)
    model: PolicyModel = struct.field(pytree_node=False)
    actor: Actor = struct.field(pytree_node=False)
    cfg: TrainConfig = struct.field(pytree_node=False)
    optimizer: optax.GradientTransformation = struct.field(pytree_node=False)
    update_rule: UpdateRule = struct.field(pytree_node=False)
    parts: tuple[Part, ...] = struct.field(pytree_node=False, default=())
    # The mesh axis the envs are sharded over (inside `shard_map`); `env` then holds this
    # device's share of the envs. None: no collectives (one device, unit tests).
    axis_name: str | None = struct.field(pytree_node=False, default=None)
    # st_rl's `lr_scheduler_class_name`: stepped once per iteration, after the update (which may
    # itself change the rate: the adaptive schedule), on the rate in the train state.
    lr_scheduler: LrScheduler | None = struct.field(pytree_node=False, default=None)

    @property
    def normalize_obs(self) -> bool:
        return self.cfg.runner.empirical_normalization

    @property
    def masks_timeouts(self) -> bool:
        """brax's `bootstrap_on_timeout=False`: time-out steps are masked out of GAE."""
        return self.cfg.algorithm.timeout_bootstrap == "none"

    def env_ids(self) -> jax.Array:
        """Global indices of this device's environments."""
        return global_env_ids(self.env.num_envs, self.axis_name)

    def shard(self, env: VecEnv, axis_name: str | None) -> Learner:
        """This learner for one device's share `env` of the envs, reducing over `axis_name`."""
        return self.replace(env=env, axis_name=axis_name)

    def policy_groups(self, obs: dict) -> dict:
        """The observation groups the policy's normalisers and networks see (parts keep theirs)."""
        owned = {g for p in self.parts for g in p.obs_groups}
        return {k: v for k, v in obs.items() if k not in owned}

    def update_context(self, steps: int) -> UpdateContext:
        return UpdateContext(
            axis_name=self.axis_name,
            num_envs=self.env.num_envs,
            env_ids=self.env_ids(),
            recurrent=self.model.recurrent,
            steps=steps,
        )

    # ---- trainable parameters ------------------------------------------------------------
    def trainable(self, params: Any, parts: dict) -> dict:
        """What the optimiser updates: `{"policy": ..., <part>: ...}` (one optimiser, one clip)."""
        out = {POLICY: params}
        for p in self.parts:
            own = p.trainable(parts[p.name])
            if own is not None:
                out[p.name] = own
        return out

    def with_trainable(self, trainable: dict, parts: dict) -> tuple[Any, dict]:
        """`(policy params, parts' train states)` with the optimised parameters put back."""
        parts = dict(parts)
        for p in self.parts:
            if p.name in trainable:
                parts[p.name] = p.with_trainable(parts[p.name], trainable[p.name])
        return trainable[POLICY], parts

    def init_optimizer(self, params: Any, parts: dict) -> Any:
        """A fresh optimiser state for these parameters (also used to warm-start from a checkpoint)."""
        return self.optimizer.init(self.trainable(params, parts))

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
        env_state = self.env.pending(env_key, env_ids[0])
        obs = self.env.observe(env_state.brax_state)
        if self.cfg.runner.init_at_random_ep_len:
            env_state = self.env.random_episode_starts(env_state, env_key, env_ids[0])
        metric_names = jax.eval_shape(
            self.env.step, env_state, jnp.zeros((self.env.num_envs, self.env.action_size))
        )
        zeros = jnp.zeros((self.env.num_envs,), jnp.float32)
        ctx = InitContext(
            num_envs=self.env.num_envs, env_ids=env_ids, obs_shapes=shapes, action_size=self.env.action_size
        )
        train_parts, rollout_parts = {}, {}
        for p in self.parts:
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
        rollout_state = RolloutState(
            env_state=env_state,
            obs=obs,
            episode_return=zeros,
            episode_length=jnp.zeros((self.env.num_envs,), jnp.int32),
            episode_metrics={k: zeros for k in metric_names[1].metrics},
            hidden=self.model.initial_hidden(self.env.num_envs),
            parts=rollout_parts,
        )
        if self.history_chunks > 1:
            rollout_state = rollout_state.replace(history=self.empty_history(train_state, rollout_state))
        if self.cfg.runner.pretrain_iterations > 0:
            rollout_state = rollout_state.replace(dataset=init_cursor(env_ids))
        # Donated buffers must be distinct: groups that share an array get their own copy.
        return jax.tree.map(jnp.copy, (train_state, rollout_state))

    @property
    def history_chunks(self) -> int:
        """Rollouts in each update's batch (st_rl's `buffer_dilation_ratio`)."""
        return int(self.cfg.algorithm.buffer_dilation_ratio)

    def empty_history(self, train_state: TrainState, rollout_state: RolloutState) -> RolloutHistory:
        """Zeros shaped like the rollouts the update will keep (traced, not run)."""
        abstract = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), (train_state, rollout_state)
        )
        _, transitions, _ = jax.eval_shape(self.rollout, *abstract, jax.random.PRNGKey(0))
        values = jax.ShapeDtypeStruct(transitions.rewards.shape[1:], jnp.float32)
        batch = jax.eval_shape(self.raw_batch, transitions, values)
        return empty_history(batch, self.history_chunks)

    def initial_learning_rate(self) -> jax.Array:
        lr = jnp.asarray(self.cfg.algorithm.learning_rate, jnp.float32)
        return lr if self.lr_scheduler is None else self.lr_scheduler.initial(lr)

    # ---- acting ------------------------------------------------------------------------
    def critic_value(self, params, normalizers, obs, hidden):
        """Value of raw observations, without advancing the hidden state."""
        nobs = normalize_groups(normalizers, obs, self.normalize_obs)
        return self.model.value(params, nobs, hidden)

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

    # ---- PPO update --------------------------------------------------------------------
    @property
    def loss_settings(self) -> PPOLossSettings:
        """The static side of `agents.ppo.ppo_loss` for this learner."""
        return PPOLossSettings(
            model=self.model,
            parts=self.parts,
            alg=self.cfg.algorithm,
            ppo_terms=self.update_rule.ppo_terms,
            gae_horizon=self.cfg.algorithm.gae_horizon or self.cfg.runner.num_steps_per_env,
            imitation_coef=self.pretrain_imitation if self.cfg.runner.pretrain_iterations > 0 else 0.0,
            axis_name=self.axis_name,
        )

    def minibatch_step(self, carry, inputs: MinibatchInputs, adapt: bool = True):
        """Adaptive lr from the KL to the acting policy, then one clipped optimiser step.
        `adapt=False`: the step takes the carried rate as it is (a fixed rate, pretraining's).

        Gradients, KL and loss terms are averaged over devices (equal shares of the minibatch),
        so every device takes the same step and the params stay replicated.
        """
        trainable, opt_state, lr = carry
        alg = self.cfg.algorithm
        loss = functools.partial(ppo_loss, settings=self.loss_settings)
        grads, (losses, metrics, mean, std) = jax.grad(loss, has_aux=True)(trainable, inputs)
        batch = inputs.batch
        kl = self.model.action_dist.kl(batch.old_mean, batch.old_std, mean, std, alg.kl_epsilon)
        kl_mean = jnp.mean(kl)
        grads, kl_mean, losses, metrics = pmean((grads, kl_mean, losses, metrics), self.axis_name)
        if adapt and alg.schedule == "adaptive":
            lr = adaptive_learning_rate(lr, kl_mean, alg.desired_kl)
        direction, opt_state = self.optimizer.update(grads, opt_state, trainable)
        trainable = optax.apply_updates(trainable, jax.tree.map(lambda u: -lr * u, direction))
        policy = clamp_std(trainable[POLICY], self.model.noise_std_type, alg.clip_min_std)
        trainable = {**trainable, POLICY: policy}
        checks = {
            **{check_name(1, f"loss term {k}"): jnp.isfinite(v) for k, v in losses.items()},
            **{check_name(2, f"gradient of {k}"): finite(g) for k, g in grads.items()},
        }
        return (trainable, opt_state, lr), ({**metrics, "kl": kl_mean, "learning_rate": lr}, checks)

    def make_batch(
        self,
        train_state: TrainState,
        transitions: Transition,
        last_values: jax.Array,
        history=None,
        bootstrap_obs: dict | None = None,
    ) -> tuple[PPOBatch, RolloutHistory | None]:
        """Returns, advantages and normalised observations as one `[T, N]` batch (`[T, N * chunks]`
        with the stored rollouts of `history`), and the history for the next update.

        Feed-forward batches are flattened to `[1, T * N]`, so every sample can land in any
        minibatch; recurrent ones keep `[T, N]` and are split by environment.
        `bootstrap_obs`: the observation after the rollout, which recomputed advantages need.
        """
        batch = self.raw_batch(transitions, last_values)
        if history is not None:
            batch, history = with_history(batch, history)
        normalize = functools.partial(normalize_groups, train_state.normalizers, enabled=self.normalize_obs)
        if self.cfg.algorithm.recompute_advantages:
            # only the critic's group: the bootstrap values are all that is recomputed from it
            next_obs = {
                k: jnp.concatenate([batch.obs[k][1:], bootstrap_obs[k][None]], axis=0) for k in ("critic",)
            }
            inputs = {
                "rewards": transitions.rewards,
                "dones": transitions.dones,
                "next_obs": normalize(next_obs),
            }
            if transitions.truncated is not None:
                inputs["masked"] = transitions.truncated
            batch = batch.replace(gae_inputs=inputs)
        batch = batch.replace(obs=normalize(batch.obs))
        if self.model.recurrent:
            return batch, history
        steps = {f: merge_time_env(getattr(batch, f)) for f in PPOBatch.STEP_FIELDS}
        return batch.replace(**steps), history

    def raw_batch(self, transitions: Transition, last_values: jax.Array) -> PPOBatch:
        """Returns and advantages of one rollout, its observations still raw, `[T, N]`."""
        alg = self.cfg.algorithm
        if self.update_rule.ppo_terms:
            advantages, returns = compute_gae(
                transitions.rewards,
                transitions.values,
                transitions.dones,
                last_values,
                alg.gamma,
                alg.lam,
                alg.gae_horizon,
                transitions.truncated,
                alg.advantage_estimator,
            )
            if not alg.normalize_advantage_per_mini_batch:
                advantages = normalize_advantages(advantages, self.axis_name)
        else:  # DAgger: no returns
            advantages = returns = jnp.zeros_like(transitions.rewards)
        resets = jnp.concatenate([jnp.zeros_like(transitions.dones[:1]), transitions.dones[:-1]], axis=0)
        return PPOBatch(
            obs=transitions.obs,
            hidden=transitions.initial_hidden if self.model.recurrent else {},
            resets=resets,
            actions=transitions.actions,
            old_log_prob=transitions.log_prob,
            old_mean=transitions.mean,
            old_std=transitions.std,
            old_values=transitions.values,
            advantages=advantages,
            returns=returns,
            parts=transitions.parts,
            draws=transitions.draws,
        )

    def ppo_update(
        self,
        train_state,
        rollout_parts,
        transitions,
        last_values,
        key,
        history=None,
        bootstrap_obs=None,
        orders=None,
        adapt: bool = True,
    ):
        """GAE, then `num_learning_epochs` x `num_mini_batches` steps, as nested `lax.scan`s.

        Returns `(trainable, opt_state, lr, metrics, checks, parts' train states)` and the rollout
        history; `metrics` hold one value per optimiser step, `[epochs, minibatches]` (the
        `learning_rate` each step applied among them). `bootstrap_obs`: the observation after the
        rollout (recomputed advantages). `orders` `[epochs, minibatches, size]`: the columns of
        every minibatch in place of the drawn ones, e.g. rsl_rl's (the parity tests' seam).
        `adapt=False`: every step takes the train state's rate, which the adaptive rule leaves.
        """
        iteration = train_state.iteration
        alg = self.cfg.algorithm
        batch, history = self.make_batch(train_state, transitions, last_values, history, bootstrap_obs)
        # Columns: every sample (feed-forward) or whole environments (recurrent); with a history,
        # each env contributes one column per stored rollout (global index env * chunks + k).
        steps = transitions.rewards.shape[0]
        steps_per_env = 1 if self.model.recurrent else steps
        # `trajectory`: whole gae_horizon-step segments of one env share a minibatch
        trajectories = alg.minibatch_unit == "trajectory" and not self.model.recurrent
        segment = (alg.gae_horizon or steps) if trajectories else 1
        chunks = self.history_chunks
        first_env = self.env_ids()[0] * chunks
        resample_prob = alg.hidden_state_resample_prob
        part_root = jax.random.fold_in(key, 1)
        ctx = self.update_context(steps)
        units = self.model.units(train_state.normalizers, self.normalize_obs)

        def minibatch(carry, xs):
            core, own = carry
            idx, part_key = xs
            chex.assert_rank(idx, 1)
            inputs = {
                p.name: p.minibatch_inputs(
                    train_state.parts[p.name], rollout_parts[p.name], idx, part_key, ctx
                )
                for p in self.parts
            }
            selected = batch.select_columns(idx)
            minibatch_inputs = MinibatchInputs(
                batch=selected,
                iteration=iteration,
                train_parts=train_state.parts,
                part_inputs=inputs,
                units=units,
                normalizers=train_state.normalizers if self.normalize_obs else None,
                entropy_key=jax.random.fold_in(part_key, ENTROPY_STREAM),
                resample_key=jax.random.fold_in(part_key, RESAMPLE_STREAM) if resample_prob > 0 else None,
                resample_prob=resample_prob,
            )
            core, (metrics, checks) = self.minibatch_step(core, minibatch_inputs, adapt)
            own, own_metrics = self.own_updates(own, selected, ctx)
            checks |= {check_name(1, f"loss term {k}"): jnp.isfinite(v) for k, v in own_metrics.items()}
            return (core, own), ({**metrics, **own_metrics}, checks)

        def epoch(carry, xs):
            epoch_key, epoch_index, given = xs
            # A fresh order each epoch; each minibatch is gathered inside the scan, not materialised.
            order = given
            if order is None:
                order = minibatch_indices(
                    epoch_key,
                    self.env.num_envs * chunks,
                    steps_per_env,
                    alg.num_mini_batches,
                    first_env,
                    segment,
                )
            part_keys = jax.random.split(jax.random.fold_in(part_root, epoch_index), alg.num_mini_batches)
            return jax.lax.scan(minibatch, carry, (order, part_keys))

        trainable = self.trainable(train_state.params, train_state.parts)
        own = {name: train_state.parts[name] for name in self.own_optimizer_parts()}
        carry = ((trainable, train_state.opt_state, train_state.learning_rate), own)
        keys = jax.random.split(key, alg.num_learning_epochs)
        epochs = jnp.arange(alg.num_learning_epochs, dtype=jnp.int32)
        if orders is not None:
            orders = jnp.asarray(orders, jnp.int32)
            chex.assert_shape(orders, (alg.num_learning_epochs, alg.num_mini_batches, None))
        xs = (keys, epochs, orders)
        ((trainable, opt_state, lr), own), (metrics, checks) = jax.lax.scan(epoch, carry, xs)
        failures = jax.tree.map(lambda ok: first_failure(ok.reshape(-1)), checks)
        parts = {**train_state.parts, **own}
        return (trainable, opt_state, lr, metrics, failures, parts), history

    def own_optimizer_parts(self) -> tuple[str, ...]:
        """The parts that override `Part.minibatch_update` (only their states ride the update's loop)."""
        return tuple(p.name for p in self.parts if type(p).minibatch_update is not Part.minibatch_update)

    def own_updates(self, own: dict, batch: PPOBatch, ctx: UpdateContext) -> tuple[dict, dict]:
        """Each such part's own optimiser step on one minibatch: `(their train states, metrics)`."""
        own, metrics = dict(own), {}
        for p in self.parts:
            if p.name in own:
                own[p.name], part_metrics = p.minibatch_update(own[p.name], batch, ctx)
                metrics |= part_metrics
        return own, metrics

    # ---- behaviour-cloning update --------------------------------------------------------
    def cloning_update(self, train_state, transitions):
        """rsl_rl's Distillation update: `(trainable, opt_state, lr, metrics, checks, parts)`."""
        rule = self.update_rule
        alg = self.cfg.algorithm
        batch = DistillationBatch(
            obs=normalize_groups(train_state.normalizers, transitions.obs, self.normalize_obs),
            labels=transitions.parts[rule.labels_from]["action_labels"],
            dones=transitions.dones,
            hidden0=transitions.initial_hidden if self.model.recurrent else {},
        )
        windows, rest = step_order(transitions.dones.shape[0], alg.num_learning_epochs, rule.gradient_length)

        def act(trainable, obs_t, hidden):
            mean, _, hidden = self.model.distribution(trainable[POLICY], obs_t, hidden)
            return mean, hidden

        trainable, opt_state, losses = bptt_update(
            act,
            reset_hidden_groups,
            self.optimizer,
            rule.loss_type,
            self.trainable(train_state.params, train_state.parts),
            train_state.opt_state,
            train_state.learning_rate,
            batch,
            windows,
            rest,
            self.axis_name,
        )
        policy = clamp_std(trainable[POLICY], self.model.noise_std_type, alg.clip_min_std)
        loss = jnp.mean(losses)
        step = first_failure(jnp.isfinite(losses))  # losses are per rollout step; report the window
        step = jnp.where(step == NEVER, NEVER, step // rule.gradient_length)
        checks = {check_name(1, "loss term behavior_loss"): step}
        return (
            {**trainable, POLICY: policy},
            opt_state,
            train_state.learning_rate,
            {"distillation": loss},
            checks,
            train_state.parts,
        )

    # ---- the iteration -----------------------------------------------------------------
    def iteration(self, train_state: TrainState, rollout_state: RolloutState):
        """Advance the whole system by one iteration; returns new states and metrics.

        metrics: `rollout` (episode sums for the host's logging window), `scalars` (everything
        logged as is) and `finite`: per checked quantity (loss terms and gradients of every
        optimiser step, the parameters after the update), the first optimiser step at which it
        was not finite, `NEVER` if it stayed finite; the host stops the run on any failure.
        """
        return self.iterate(train_state, rollout_state, EnvSource(self))

    def pretrain_iteration(
        self, train_state: TrainState, rollout_state: RolloutState, dataset: DatasetArrays
    ):
        """An iteration whose rollout replays demonstration trajectories instead of stepping the
        env (st_rl's TwoStageRunner pretraining); the envs do not move. Its steps take the
        dataset settings' fixed `learning_rate` where one is set."""
        source = DatasetSource(self, dataset)
        return self.iterate(train_state, rollout_state, source, fixed_rate=self.pretrain_learning_rate)

    @property
    def pretrain_imitation(self) -> float:
        """Weight of the pull of the action mean towards the dataset's actions while pretraining."""
        return float(pretrain_settings(self.cfg.runner.pretrain_dataset)["imitation_loss_coef"])

    @property
    def pretrain_learning_rate(self) -> float | None:
        """The fixed rate of the pretraining steps, or None for the algorithm's schedule: the
        adaptive rule reads the imitation pull as a too-large step and shrinks the rate to its floor."""
        return pretrain_settings(self.cfg.runner.pretrain_dataset)["learning_rate"]

    def iterate(
        self,
        train_state: TrainState,
        rollout_state: RolloutState,
        source: RolloutSource,
        fixed_rate: float | None = None,
    ):
        """One iteration with the rollout `source` (`train_loops.rollout`): `(train state',
        rollout state', metrics)`. `fixed_rate` (static): every optimiser step takes this rate,
        the adaptive rule and the scheduler do not run, and the train state keeps its rate, so
        the iterations after this one go on from where the schedule was."""
        rule = self.update_rule
        update_key = None
        if rule.splits_key:
            key, rollout_key, update_key = jax.random.split(train_state.key, 3)
        else:
            key, rollout_key = jax.random.split(train_state.key)
        rollout_state, transitions, sums, (last_obs, last_hidden), source_scalars = source(
            train_state, rollout_state, rollout_key
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
        if self.normalize_obs and self.cfg.runner.normalizer_update == "before":
            # brax: the update (last values, batch observations) already sees this rollout's statistics
            train_state = train_state.replace(
                normalizers=self.absorb(train_state.normalizers, transitions.obs)
            )
        stepping = train_state
        if fixed_rate is not None:
            stepping = train_state.replace(learning_rate=jnp.asarray(fixed_rate, jnp.float32))
        bootstrap = (last_obs, last_hidden)
        update, rollout_state = rule.update(
            self, stepping, rollout_state, transitions, bootstrap, update_key, adapt=fixed_rate is None
        )
        trainable, opt_state, lr, update_metrics, checks, train_parts = update
        next_lr = self.rate_after(lr, train_state, fixed_rate)
        normalizers = train_state.normalizers
        if self.normalize_obs and self.cfg.runner.normalizer_update == "after":
            # After the update, so the first ratio of the next update is exactly 1 (rsl_rl #225).
            normalizers = self.absorb(normalizers, transitions.obs)
        params, train_parts = self.with_trainable(trainable, train_parts)
        train_parts = {
            **train_parts,
            **{
                p.name: p.after_update(train_parts[p.name], transitions.parts[p.name], ctx)
                for p in self.parts
            },
        }
        new_train_state = train_state.replace(
            params=params,
            opt_state=opt_state,
            normalizers=normalizers,
            learning_rate=next_lr,
            key=key,
            iteration=train_state.iteration + 1,
            parts=train_parts,
        )
        num_samples = psum(jnp.asarray(transitions.rewards.size, jnp.float32), self.axis_name)
        # means over the optimiser steps; the logged learning rate is the one the update leaves
        # (a fixed rate: the one it stepped at)
        scalars = dict(jax.tree.map(jnp.mean, update_metrics)) | source_scalars
        for p in self.parts:
            scalars |= p.iteration_metrics(
                train_parts[p.name], sums["parts"][p.name], num_samples, train_state.iteration
            )
        scalars |= {
            "learning_rate": next_lr if fixed_rate is None else lr,
            "mean_noise_std": pmean(jnp.mean(transitions.std[-1]), self.axis_name),
        }
        after = jnp.asarray(rule.optimizer_steps(self.cfg), jnp.int32)  # the parameters the update left
        checks |= {
            check_name(3, f"parameters of {k}"): jnp.where(finite(v), NEVER, after)
            for k, v in trainable.items()
        }
        rollout_sums = {k: v for k, v in sums.items() if k != "parts"}
        metrics = {"rollout": rollout_sums, "scalars": scalars, "finite": checks}
        return new_train_state, rollout_state, metrics

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
        until = self.cfg.runner.normalizer_until
        return {k: update_normalizer(normalizers[k], obs[k], until, self.axis_name) for k in normalizers}

    def metric_sections(self) -> dict[str, str]:
        """TensorBoard section of each scalar this learner logs (rsl_rl's names for the core)."""
        sections = {
            "surrogate": "Loss",
            "value_function": "Loss",
            "entropy": "Loss",
            "kl": "Loss",
            "learning_rate": "Loss",
            "mean_noise_std": "Policy",
            "dataset_used_up": "Perf",  # pretraining on a dataset (st_rl's Perf/dataset_*)
            "dataset_passes": "Perf",
            "pretraining": "Perf",
            "imitation": "Loss",
        }
        for p in self.parts:
            sections |= p.sections
        return sections

    # ---- evaluation --------------------------------------------------------------------
    def evaluate(self, eval_env: VecEnv, params, normalizers, key: jax.Array):
        """Deterministic (mean-action) episodes on separate envs: mean return and length."""

        def act(obs, hidden):
            return self.actor.act(params, normalizers, obs, hidden)

        return deterministic_episodes(eval_env, act, self.model.initial_hidden(eval_env.num_envs), key)


NEVER = np.iinfo(np.int32).max  # a finiteness check that never failed


def first_failure(ok: jax.Array) -> jax.Array:
    """Index of the first False of a `[steps]` bool array (the optimiser step), or `NEVER`."""
    return jnp.where(jnp.all(ok), NEVER, jnp.argmin(ok)).astype(jnp.int32)


def check_name(stage: int, quantity: str) -> str:
    """`"<stage>:<quantity>"`: within one optimiser step, loss terms (1) come before gradients (2)
    and parameters (3); the prefix keeps that order when the names are sorted on the host."""
    return f"{stage}:{quantity}"


def first_non_finite(checks: dict) -> list[str]:
    """The quantities that stopped being finite, the earliest first: by optimiser step, then by
    stage (host side). A NaN spreads to everything after it; the first name is the cause."""
    failed = sorted((int(step), name) for name, step in checks.items() if int(step) != NEVER)
    return [name.split(":", 1)[1] for _, name in failed]
