"""One jit-compiled PPO iteration: rollout, returns and the whole update, no host round-trip.

TPPO is the same learner with a `TeacherGuidance`: a rollout hook that labels (and sometimes
executes) teacher actions and a `distillation_loss` term. `make_learner` picks the learner for
`algorithm.class_name` (rsl_rl Distillation lives in `train_loops.distillation`).

The runner executes `init` and `iteration` per device under `shard_map` (`train_loops.devices`):
with `axis_name` set, `env` is the device's share of the envs and every reduction over envs
(advantage statistics, gradients, KL, normalisers, episode sums) spans all devices.
"""

from __future__ import annotations

import functools

import chex
import jax
import jax.numpy as jnp
import optax
from flax import struct

from strl_jax.agents.amp import LOSS_LOG_NAMES as AMP_LOG_NAMES
from strl_jax.agents.motion_prior import AMP_GROUP, MotionPrior, make_motion_prior, replay_add, replay_draw
from strl_jax.agents.ppo import (
    PPOBatch,
    adaptive_learning_rate,
    make_optimizer,
    surrogate_loss,
    value_loss,
    weighted_total,
)
from strl_jax.agents.schedules import make_schedule
from strl_jax.agents.teacher import load_teacher
from strl_jax.agents.tppo import TeacherGuidance, distillation_loss
from strl_jax.buffers.gae import bootstrap_timeouts, compute_gae, normalize_advantages
from strl_jax.buffers.minibatch import merge_time_env, minibatch_indices
from strl_jax.buffers.transitions import Transition
from strl_jax.collectives import env_keys, global_env_ids, pmean, psum
from strl_jax.configs.schema import TrainConfig
from strl_jax.envs.brax_env import BraxVecEnv
from strl_jax.masked_rows import reserved_rows, where_rows
from strl_jax.networks.actor_critic import clamp_std
from strl_jax.networks.gaussian import gaussian_entropy, gaussian_kl, gaussian_log_prob, gaussian_sample
from strl_jax.networks.normalizer import init_normalizer, normalize, update_normalizer
from strl_jax.networks.policy import PolicyModel, make_policy_model, reset_hidden_groups
from strl_jax.train_loops.state import RolloutState, TrainState


def timeout_rows(num_envs: int, episode_length: int) -> int:
    """Critic rows per chunk of time-out bootstraps: four times the time-outs of a step when
    episodes are spread evenly over their length, at least 16 (more take several chunks)."""
    return reserved_rows(num_envs, 4 / episode_length)


def normalize_groups(normalizers: dict, obs: dict, enabled: bool) -> dict:
    """Normalise each observation group with its own statistics (identity when disabled)."""
    if not enabled:
        return obs
    return {k: normalize(normalizers[k], v) if k in normalizers else v for k, v in obs.items()}


@struct.dataclass
class PPOLearner:
    """Static description of a PPO (or, with `guidance`, TPPO) run. Not a pytree of arrays."""

    env: BraxVecEnv = struct.field(pytree_node=False)
    model: PolicyModel = struct.field(pytree_node=False)
    cfg: TrainConfig = struct.field(pytree_node=False)
    optimizer: optax.GradientTransformation = struct.field(pytree_node=False)
    guidance: TeacherGuidance | None = struct.field(pytree_node=False, default=None)  # TPPO
    prior: MotionPrior | None = struct.field(pytree_node=False, default=None)  # APPO / ATPPO
    # The mesh axis the envs are sharded over (inside `shard_map`); `env` then holds this
    # device's share of the envs. None: no collectives (one device, unit tests).
    axis_name: str | None = struct.field(pytree_node=False, default=None)

    @property
    def normalize_obs(self) -> bool:
        return self.cfg.runner.empirical_normalization

    @property
    def using_ppo(self) -> bool:
        return self.guidance is None or self.guidance.using_ppo

    def trainable(self, params, amp_state):
        """What the optimiser updates: the policy's params, and with AMP the discriminator's too
        (one optimiser and one gradient clip for both, like st_rl's single module)."""
        if self.prior is None:
            return params
        return {"policy": params, "discriminator": amp_state.params}

    def split_trainable(self, trainable):
        """`(policy params, discriminator params or None)`."""
        if self.prior is None:
            return trainable, None
        return trainable["policy"], trainable["discriminator"]

    def env_ids(self) -> jax.Array:
        """Global indices of this device's environments."""
        return global_env_ids(self.env.num_envs, self.axis_name)

    def shard(self, env: BraxVecEnv, axis_name: str | None) -> PPOLearner:
        """This learner for one device's share `env` of the envs, reducing over `axis_name`."""
        return self.replace(env=env, axis_name=axis_name)

    # ---- state -------------------------------------------------------------------------
    def init(self, key: jax.Array) -> tuple[TrainState, RolloutState]:
        """Fresh parameters, optimiser, normalisers and environments for `key`."""
        key, init_key, env_key = jax.random.split(key, 3)
        shapes = self.env.observation_shapes()
        params = self.model.init(init_key, shapes)
        env_ids = self.env_ids()
        env_state, obs = self.env.reset(env_key, env_ids[0])
        metric_names = jax.eval_shape(
            self.env.step, env_state, jnp.zeros((self.env.num_envs, self.env.action_size))
        )
        zeros = jnp.zeros((self.env.num_envs,), jnp.float32)
        teacher_state = teacher_rollout = amp_state = amp_replay = None
        if self.prior is not None:
            key, amp_key = jax.random.split(key)
            amp_state = self.prior.init(amp_key)
            amp_replay = self.prior.init_replay(self.env.num_envs)
        if self.guidance is not None:
            key, mask_key = jax.random.split(key)
            teacher_state = self.guidance.teacher.initial_state
            teacher_rollout = self.guidance.init_rollout(env_keys(mask_key, env_ids))
        train_state = TrainState(
            params=params,
            opt_state=self.optimizer.init(self.trainable(params, amp_state)),
            normalizers={k: init_normalizer(s) for k, s in shapes.items() if k != AMP_GROUP},
            learning_rate=jnp.asarray(self.cfg.algorithm.learning_rate, jnp.float32),
            key=key,
            iteration=jnp.zeros((), jnp.int32),
            teacher=teacher_state,
            amp=amp_state,
        )
        rollout_state = RolloutState(
            env_state=env_state,
            obs=obs,
            episode_return=zeros,
            episode_length=jnp.zeros((self.env.num_envs,), jnp.int32),
            episode_metrics={k: zeros for k in metric_names[1].metrics},
            hidden=self.model.initial_hidden(self.env.num_envs),
            teacher=teacher_rollout,
            amp_replay=amp_replay,
        )
        # Donated buffers must be distinct: groups that share an array get their own copy.
        return jax.tree.map(jnp.copy, (train_state, rollout_state))

    # ---- acting ------------------------------------------------------------------------
    def policy_distribution(self, params, normalizers, obs, hidden):
        """`(mean, std, hidden')` for raw observations."""
        nobs = normalize_groups(normalizers, obs, self.normalize_obs)
        return self.model.distribution(params, nobs, hidden)

    def critic_value(self, params, normalizers, obs, hidden):
        """Value of raw observations, without advancing the hidden state."""
        nobs = normalize_groups(normalizers, obs, self.normalize_obs)
        return self.model.value(params, nobs, hidden)

    def timeout_values(self, params, normalizers, final_obs, hidden, truncated: jax.Array) -> jax.Array:
        """V(final observation) of the envs whose episode was truncated this step, 0 elsewhere.

        Only those values enter the returns (`bootstrap_timeouts`), and time-outs are rare (about
        `N / episode_length` a step when episodes are spread out): the critic sees only the
        truncated envs' rows (`where_rows`), not a second pass over every env.
        """
        n = truncated.shape[0]
        return where_rows(
            truncated,
            lambda args: self.critic_value(params, normalizers, *args),
            (final_obs, hidden),
            jnp.zeros((n,), jnp.float32),
            timeout_rows(n, self.env.episode_length),
            in_axes=(0, 1),  # recurrent memories are [layers, N, hidden]
        )

    def rollout(self, train_state: TrainState, rollout_state: RolloutState, key: jax.Array):
        """`num_steps_per_env` vmapped env steps with the current policy, as a `lax.scan`.

        With a teacher, its label is stored for every step and executed where the env's mask is
        set; `log_prob` is the student's log-probability of the executed action either way.
        """
        cfg = self.cfg
        params, normalizers = train_state.params, train_state.normalizers
        guidance = self.guidance
        if guidance is not None:
            act_prob = guidance.act_prob(train_state.iteration)
        env_ids = self.env_ids()

        def step(carry, step_key):
            rs, stats = carry
            nobs = normalize_groups(normalizers, rs.obs, self.normalize_obs)
            mean, std, values, hidden = self.model.step(params, nobs, rs.hidden)
            keys = env_keys(step_key, env_ids)  # per env: the same draws on any number of devices
            if guidance is None:
                actions = jax.vmap(gaussian_sample)(keys, mean, std)
                labels, teacher = None, None
            else:
                sample_keys, label_keys, mask_keys = jax.vmap(jax.random.split, (0, None), 1)(keys, 3)
                actions, labels, teacher_hidden = guidance.act(
                    train_state.teacher,
                    rs.teacher,
                    rs.obs,
                    jax.vmap(gaussian_sample)(sample_keys, mean, std),
                    label_keys,
                )
            env_state, res = self.env.step(rs.env_state, actions)
            if cfg.algorithm.timeout_bootstrap == "final_obs":
                # The critic's memory has seen obs_t; the final observation is its next input.
                bootstrap_values = self.timeout_values(
                    params, normalizers, res.final_obs, hidden, res.truncated
                )
            else:
                bootstrap_values = values
            reward = res.reward * cfg.algorithm.reward_scale
            amp = None
            if self.prior is not None:
                amp_keys = env_keys(jax.random.fold_in(step_key, 1), env_ids)
                reward, amp = self.prior.step(train_state.amp, rs.obs, res.final_obs, reward, amp_keys)
            rewards = bootstrap_timeouts(reward, res.truncated, bootstrap_values, cfg.algorithm.gamma)
            done = res.terminated | res.truncated
            transition = Transition(
                obs=rs.obs,
                actions=actions,
                log_prob=gaussian_log_prob(actions, mean, std),
                mean=mean,
                std=std,
                values=values,
                rewards=rewards,
                dones=done.astype(jnp.float32),
                action_labels=labels,
                amp_policy=None if amp is None else amp["policy"],
                amp_expert=None if amp is None else amp["expert"],
            )
            if guidance is not None:
                teacher = guidance.after_step(rs.teacher, teacher_hidden, done, act_prob, mask_keys)
            ep_return = rs.episode_return + res.reward
            ep_length = rs.episode_length + 1
            ep_metrics = {k: rs.episode_metrics[k] + res.metrics[k] for k in rs.episode_metrics}
            d = done.astype(jnp.float32)
            totals = {
                "episodes": stats["episodes"] + d.sum(),
                "return_sum": stats["return_sum"] + (ep_return * d).sum(),
                "length_sum": stats["length_sum"] + (ep_length * d).sum(),
                "reward_sum": stats["reward_sum"] + res.reward.sum(),
                "metrics": {
                    k: stats["metrics"][k] + (ep_metrics[k] / ep_length * d).sum() for k in ep_metrics
                },
            }
            if amp is not None:
                totals["style_reward_sum"] = stats["style_reward_sum"] + amp["style"].sum()
            if guidance is not None:
                totals["teacher_steps"] = stats["teacher_steps"] + rs.teacher.mask.sum()
                error = jnp.linalg.norm(mean - labels, axis=-1).sum()
                totals["action_error_sum"] = stats["action_error_sum"] + error
            rs = RolloutState(
                env_state=env_state,
                obs=res.obs,
                episode_return=jnp.where(done, 0.0, ep_return),
                episode_length=jnp.where(done, 0, ep_length),
                episode_metrics={k: jnp.where(done, 0.0, v) for k, v in ep_metrics.items()},
                hidden=reset_hidden_groups(hidden, done),
                teacher=teacher,
                amp_replay=rs.amp_replay,  # filled from the whole rollout afterwards
            )
            return (rs, totals), transition

        zero = jnp.zeros((), jnp.float32)
        stats0 = {
            "episodes": zero,
            "return_sum": zero,
            "length_sum": zero,
            "reward_sum": zero,
            "metrics": {k: zero for k in rollout_state.episode_metrics},
        }
        if guidance is not None:
            stats0 |= {"teacher_steps": zero, "action_error_sum": zero}
        if self.prior is not None:
            stats0["style_reward_sum"] = zero
        keys = jax.random.split(key, cfg.runner.num_steps_per_env)
        initial_hidden = rollout_state.hidden
        (rollout_state, stats), transitions = jax.lax.scan(step, (rollout_state, stats0), keys)
        stats = psum(stats, self.axis_name)  # sums over all devices' envs
        return rollout_state, transitions.replace(initial_hidden=initial_hidden), stats

    # ---- learning ----------------------------------------------------------------------
    def loss(self, trainable, batch: PPOBatch, iteration: jax.Array | None = None, amp=None):
        """Weighted loss and its terms for one minibatch of `[T, B]` steps.

        PPO's terms unless `using_ppo` is off, plus TPPO's `distillation_loss` (its coefficient
        may follow a schedule of `iteration`), plus AMP's discriminator terms with `amp =
        (AMP normalisers, replay draws [T, B, D])`.
        """
        alg = self.cfg.algorithm
        params, disc_params = self.split_trainable(trainable)
        mean, std, values = self.model.sequence(params, batch.obs, batch.hidden, batch.resets)
        losses, coefs, extra = {}, {}, {}
        if self.using_ppo:
            advantages = batch.advantages
            if alg.normalize_advantage_per_mini_batch:
                advantages = normalize_advantages(advantages, self.axis_name)
            entropy = gaussian_entropy(std)
            losses = {
                "surrogate_loss": surrogate_loss(
                    gaussian_log_prob(batch.actions, mean, std),
                    batch.old_log_prob,
                    advantages,
                    alg.clip_param,
                ),
                "value_loss": value_loss(
                    values, batch.old_values, batch.returns, alg.clip_param, alg.use_clipped_value_loss
                ),
                "entropy": -jnp.mean(entropy),
            }
            coefs = {
                "surrogate_loss": alg.surrogate_loss_coef,
                "value_loss": alg.value_loss_coef,
                "entropy": alg.entropy_coef,
            }
        if self.guidance is not None:
            g = self.guidance
            losses["distillation_loss"] = distillation_loss(g.target, mean, std, batch.action_labels)
            coefs["distillation_loss"] = g.loss_coef(
                jnp.zeros((), jnp.int32) if iteration is None else iteration
            )
        if self.prior is not None:
            amp_normalizers, replay_draws = amp
            amp_losses, amp_coefs, extra = self.prior.loss_terms(
                disc_params,
                amp_normalizers,
                replay_draws,
                batch.amp_expert,
                batch.amp_policy,
                mean,
                batch.action_labels if batch.action_labels is not None else batch.actions,
            )
            losses |= amp_losses
            coefs |= amp_coefs
        return weighted_total(losses, coefs), (losses, extra, mean, std)

    def minibatch_step(self, carry, batch: PPOBatch, iteration: jax.Array | None = None, amp=None):
        """Adaptive lr from the KL to the acting policy, then one clipped optimiser step.

        Gradients, KL and loss terms are averaged over devices (equal shares of the minibatch),
        so every device takes the same step and the params stay replicated.
        """
        trainable, opt_state, lr = carry
        alg = self.cfg.algorithm
        grad_fn = jax.grad(self.loss, has_aux=True)
        grads, (losses, extra, mean, std) = grad_fn(trainable, batch, iteration, amp)
        kl_mean = jnp.mean(gaussian_kl(batch.old_mean, batch.old_std, mean, std))
        grads, kl_mean, losses, extra = pmean((grads, kl_mean, losses, extra), self.axis_name)
        if alg.schedule == "adaptive":
            lr = adaptive_learning_rate(lr, kl_mean, alg.desired_kl)
        direction, opt_state = self.optimizer.update(grads, opt_state, trainable)
        trainable = optax.apply_updates(trainable, jax.tree.map(lambda u: -lr * u, direction))
        params, disc_params = self.split_trainable(trainable)
        params = clamp_std(params, self.model.noise_std_type, alg.clip_min_std)
        trainable = params if disc_params is None else {"policy": params, "discriminator": disc_params}
        names = {
            "surrogate_loss": "surrogate",
            "value_loss": "value_function",
            "entropy": "entropy",
            "distillation_loss": "distillation",
            **AMP_LOG_NAMES,
        }
        metrics = {names[k]: v for k, v in losses.items()}
        if "entropy" in metrics:
            metrics["entropy"] = -metrics["entropy"]
        metrics["kl"] = kl_mean
        metrics |= {k: v for k, v in extra.items() if k.startswith("discriminator_accuracy")}
        return (trainable, opt_state, lr), metrics

    def make_batch(
        self, train_state: TrainState, transitions: Transition, last_values: jax.Array
    ) -> PPOBatch:
        """Returns, advantages and normalised observations as one `[T, N]` batch.

        Feed-forward batches are flattened to `[1, T * N]`, so every sample can land in any
        minibatch; recurrent ones keep `[T, N]` and are split by environment.
        """
        alg = self.cfg.algorithm
        if self.using_ppo:
            advantages, returns = compute_gae(
                transitions.rewards, transitions.values, transitions.dones, last_values, alg.gamma, alg.lam
            )
            if not alg.normalize_advantage_per_mini_batch:
                advantages = normalize_advantages(advantages, self.axis_name)
        else:  # DAgger: no returns
            advantages = returns = jnp.zeros_like(transitions.rewards)
        resets = jnp.concatenate([jnp.zeros_like(transitions.dones[:1]), transitions.dones[:-1]], axis=0)
        obs = {k: v for k, v in transitions.obs.items() if k != AMP_GROUP}  # AMP reads its own fields
        batch = PPOBatch(
            obs=normalize_groups(train_state.normalizers, obs, self.normalize_obs),
            hidden=transitions.initial_hidden if self.model.recurrent else {},
            resets=resets,
            actions=transitions.actions,
            old_log_prob=transitions.log_prob,
            old_mean=transitions.mean,
            old_std=transitions.std,
            old_values=transitions.values,
            advantages=advantages,
            returns=returns,
            action_labels=transitions.action_labels,
            amp_policy=transitions.amp_policy,
            amp_expert=transitions.amp_expert,
        )
        if self.model.recurrent:
            return batch
        return batch.replace(**{f: merge_time_env(getattr(batch, f)) for f in PPOBatch.STEP_FIELDS})

    def replay_draws(self, replay, key: jax.Array, idx: jax.Array, steps: int) -> jax.Array:
        """One policy AMP observation per sample of the minibatch `idx`, from the ring of the
        sample's env, keyed by (global env, step): `[T', B', D]` like the minibatch."""
        n = self.env.num_envs
        if self.model.recurrent:  # idx: envs; every step of each
            env = jnp.broadcast_to(idx[None, :], (steps, idx.shape[0]))
            step = jnp.broadcast_to(jnp.arange(steps)[:, None], env.shape)
        else:  # idx: time-major columns t * N + n
            env, step = (idx % n)[None, :], (idx // n)[None, :]
        global_env = self.env_ids()[0] + env
        keys = jax.vmap(lambda e, t: jax.random.fold_in(jax.random.fold_in(key, e), t))(
            global_env.reshape(-1), step.reshape(-1)
        )
        draws = replay_draw(replay, keys, env.reshape(-1))
        return draws.reshape(env.shape + draws.shape[-1:])

    def update(
        self,
        train_state: TrainState,
        transitions: Transition,
        last_values: jax.Array,
        key: jax.Array,
        replay=None,
    ):
        """GAE, then `num_learning_epochs` x `num_mini_batches` steps, as nested `lax.scan`s.

        Returns `(params, opt_state, lr, metrics, discriminator params or None)`.
        """
        iteration = train_state.iteration
        alg = self.cfg.algorithm
        batch = self.make_batch(train_state, transitions, last_values)
        # Columns: every sample (feed-forward) or whole environments (recurrent).
        steps = transitions.rewards.shape[0]
        steps_per_env = 1 if self.model.recurrent else steps
        first_env = self.env_ids()[0]
        replay_root = jax.random.fold_in(key, 1)

        def minibatch(carry, xs):
            idx, replay_key = xs
            mb = batch.select_columns(idx)
            amp = None
            if self.prior is not None:
                amp = (train_state.amp.normalizers, self.replay_draws(replay, replay_key, idx, steps))
            return self.minibatch_step(carry, mb, iteration, amp)

        def epoch(carry, xs):
            epoch_key, epoch_index = xs
            # A fresh order each epoch; each minibatch is gathered inside the scan, not materialised.
            order = minibatch_indices(
                epoch_key, self.env.num_envs, steps_per_env, alg.num_mini_batches, first_env
            )
            replay_keys = jax.random.split(jax.random.fold_in(replay_root, epoch_index), alg.num_mini_batches)
            return jax.lax.scan(minibatch, carry, (order, replay_keys))

        trainable = self.trainable(train_state.params, train_state.amp)
        carry = (trainable, train_state.opt_state, train_state.learning_rate)
        keys = jax.random.split(key, alg.num_learning_epochs)
        epochs = jnp.arange(alg.num_learning_epochs, dtype=jnp.int32)
        (trainable, opt_state, lr), metrics = jax.lax.scan(epoch, carry, (keys, epochs))
        metrics = jax.tree.map(jnp.mean, metrics)
        params, disc_params = self.split_trainable(trainable)
        return params, opt_state, lr, metrics, disc_params

    def iteration(self, train_state: TrainState, rollout_state: RolloutState):
        """Advance the whole system by one PPO iteration; returns new states and scalar metrics."""
        key, rollout_key, update_key = jax.random.split(train_state.key, 3)
        rollout_state, transitions, stats = self.rollout(train_state, rollout_state, rollout_key)
        chex.assert_shape(transitions.rewards, (self.cfg.runner.num_steps_per_env, self.env.num_envs))
        last_values = self.critic_value(
            train_state.params, train_state.normalizers, rollout_state.obs, rollout_state.hidden
        )
        replay = amp_state = None
        if self.prior is not None:
            # The rollout joins the replay first: the discriminator sees the newest behaviour too.
            replay = replay_add(rollout_state.amp_replay, transitions.amp_policy)
            rollout_state = rollout_state.replace(amp_replay=replay)
        params, opt_state, lr, metrics, disc_params = self.update(
            train_state, transitions, last_values, update_key, replay
        )
        normalizers = train_state.normalizers
        if self.normalize_obs:
            # After the update, so the first ratio of the next update is exactly 1 (rsl_rl #225).
            until = self.cfg.runner.normalizer_until
            normalizers = {
                k: update_normalizer(normalizers[k], transitions.obs[k], until, self.axis_name)
                for k in normalizers
            }
        if self.prior is not None:
            amp_state = self.prior.update_normalizers(
                train_state.amp.replace(params=disc_params),
                transitions.amp_policy,
                transitions.amp_expert,
                self.axis_name,
            )
        new_train_state = train_state.replace(
            params=params,
            opt_state=opt_state,
            normalizers=normalizers,
            learning_rate=lr,
            key=key,
            iteration=train_state.iteration + 1,
            amp=amp_state,
        )
        stats, teacher = split_teacher_stats(stats, self.num_samples(transitions))
        if self.guidance is not None:
            teacher["teacher_act_prob"] = self.guidance.act_prob(train_state.iteration)
        if "style_reward_sum" in stats:
            stats = dict(stats)
            stats["mean_style_reward"] = stats.pop("style_reward_sum") / self.num_samples(transitions)
            stats["mean_task_reward"] = stats["reward_sum"] / self.num_samples(transitions)
        metrics = {
            **metrics,
            **stats,
            **teacher,
            "learning_rate": lr,
            "mean_noise_std": pmean(jnp.mean(transitions.std[-1]), self.axis_name),
        }
        return new_train_state, rollout_state, metrics

    def num_samples(self, transitions: Transition) -> jax.Array:
        """Steps collected this iteration on all devices."""
        return psum(jnp.asarray(transitions.rewards.size, jnp.float32), self.axis_name)

    # ---- evaluation --------------------------------------------------------------------
    def evaluate(self, eval_env: BraxVecEnv, params, normalizers, key: jax.Array):
        """Deterministic (mean-action) episodes on separate envs: mean return and length."""

        def act(obs, hidden):
            mean, _, hidden = self.policy_distribution(params, normalizers, obs, hidden)
            return mean, hidden

        return deterministic_episodes(eval_env, act, self.model.initial_hidden(eval_env.num_envs), key)

    def evaluate_teacher(self, eval_env: BraxVecEnv, teacher_state, key: jax.Array):
        """The teacher's deterministic episodes on the student's env (the number students aim at)."""
        teacher = self.guidance.teacher

        def act(obs, hidden):
            mean, _, hidden = teacher.distribution(teacher_state, obs, hidden)
            return mean, hidden

        return deterministic_episodes(eval_env, act, teacher.initial_hidden(eval_env.num_envs), key)


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


def split_teacher_stats(stats: dict, num_samples: int) -> tuple[dict, dict]:
    """Rollout sums -> `(episode stats, {teacher_act_fraction, action_error})` (empty without a teacher).

    `action_error` is the mean L2 distance between the student's action mean and the teacher's
    label over the rollout, before the update.
    """
    if "teacher_steps" not in stats:
        return stats, {}
    stats = dict(stats)
    teacher = {
        "teacher_act_fraction": stats.pop("teacher_steps") / num_samples,
        "action_error": stats.pop("action_error_sum") / num_samples,
    }
    return stats, teacher


def make_ppo_learner(env: BraxVecEnv, cfg: TrainConfig) -> PPOLearner:
    """Assemble the PPO learner for an env and a validated config (any class_name: no teacher)."""
    return PPOLearner(
        env=env,
        model=make_policy_model(env.action_size, cfg.policy),
        cfg=cfg,
        optimizer=make_optimizer(cfg.algorithm.optimizer, cfg.algorithm.max_grad_norm),
    )


def make_teacher_guidance(env: BraxVecEnv, cfg: TrainConfig) -> TeacherGuidance:
    """Load the teacher and its schedules; Distillation's teacher labels but never acts."""
    alg = cfg.algorithm
    teacher = load_teacher(cfg, env.observation_shapes(), env.action_size)
    if alg.class_name == "Distillation":
        return TeacherGuidance(teacher, act_prob=make_schedule(0.0, 1.0), loss_coef=make_schedule(1.0, 1.0))
    return TeacherGuidance(
        teacher,
        act_prob=make_schedule(alg.teacher_act_prob, alg.update_times_scale),
        loss_coef=make_schedule(alg.distillation_loss_coef, alg.update_times_scale),
        target=alg.distill_target,
        using_ppo=alg.using_ppo,
    )


def make_learner(env: BraxVecEnv, cfg: TrainConfig):
    """The learner for `algorithm.class_name`: PPO, TPPO (PPO + teacher guidance) or Distillation.

    APPO and ATPPO are PPO and TPPO with a `MotionPrior`. Each has `init`, `iteration`,
    `evaluate` and `optimizer`; a teacher and motion files are loaded (and checked against the
    env) here, before anything is compiled.
    """
    name = cfg.algorithm.class_name
    prior = make_motion_prior(env, cfg) if name in ("APPO", "ATPPO") else None
    if name in ("PPO", "APPO"):
        return make_ppo_learner(env, cfg).replace(prior=prior)
    guidance = make_teacher_guidance(env, cfg)
    if name in ("TPPO", "ATPPO"):
        return make_ppo_learner(env, cfg).replace(guidance=guidance, prior=prior)
    if name == "Distillation":
        from strl_jax.train_loops.distillation import make_distillation_learner  # it builds on this module

        return make_distillation_learner(env, cfg, guidance)
    raise ValueError(
        f"unknown algorithm.class_name {name!r}; valid choices: PPO, TPPO, Distillation, APPO, ATPPO"
    )


def jit_evaluate(learner: PPOLearner, eval_env: BraxVecEnv):
    """Compiled deterministic evaluation on `eval_env`: `(params, normalizers, key) -> metrics`."""
    return jax.jit(functools.partial(learner.evaluate, eval_env))
