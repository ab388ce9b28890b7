"""One jit-compiled PPO iteration: rollout, returns and the whole update, no host round-trip."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import chex
import jax
import jax.numpy as jnp
import optax
from flax import struct

from strl_jax.agents.ppo import (
    PPOBatch,
    adaptive_learning_rate,
    make_optimizer,
    surrogate_loss,
    value_loss,
    weighted_total,
)
from strl_jax.buffers.gae import bootstrap_timeouts, compute_gae, normalize_advantages
from strl_jax.buffers.transitions import Transition
from strl_jax.configs.schema import TrainConfig
from strl_jax.envs.brax_env import BraxVecEnv
from strl_jax.networks.actor_critic import clamp_std
from strl_jax.networks.gaussian import gaussian_entropy, gaussian_kl, gaussian_log_prob, gaussian_sample
from strl_jax.networks.normalizer import init_normalizer, normalize, update_normalizer
from strl_jax.networks.policy import PolicyModel, make_policy_model, reset_hidden_groups
from strl_jax.train_loops.state import RolloutState, TrainState


def normalize_groups(normalizers: dict, obs: dict, enabled: bool) -> dict:
    """Normalise each observation group with its own statistics (identity when disabled)."""
    if not enabled:
        return obs
    return {k: normalize(normalizers[k], v) if k in normalizers else v for k, v in obs.items()}


@struct.dataclass
class PPOLearner:
    """Static description of a PPO run: the env, the network and the config. Not a pytree of arrays."""

    env: BraxVecEnv = struct.field(pytree_node=False)
    model: PolicyModel = struct.field(pytree_node=False)
    cfg: TrainConfig = struct.field(pytree_node=False)
    optimizer: optax.GradientTransformation = struct.field(pytree_node=False)

    @property
    def normalize_obs(self) -> bool:
        return self.cfg.runner.empirical_normalization

    # ---- state -------------------------------------------------------------------------
    def init(self, key: jax.Array) -> tuple[TrainState, RolloutState]:
        """Fresh parameters, optimiser, normalisers and environments for `key`."""
        key, init_key, env_key = jax.random.split(key, 3)
        shapes = self.env.observation_shapes()
        params = self.model.init(init_key, shapes)
        env_state, obs = self.env.reset(env_key)
        metric_names = jax.eval_shape(
            self.env.step, env_state, jnp.zeros((self.env.num_envs, self.env.action_size))
        )
        zeros = jnp.zeros((self.env.num_envs,), jnp.float32)
        train_state = TrainState(
            params=params,
            opt_state=self.optimizer.init(params),
            normalizers={k: init_normalizer(s) for k, s in shapes.items()},
            learning_rate=jnp.asarray(self.cfg.algorithm.learning_rate, jnp.float32),
            key=key,
            iteration=jnp.zeros((), jnp.int32),
        )
        rollout_state = RolloutState(
            env_state=env_state,
            obs=obs,
            episode_return=zeros,
            episode_length=jnp.zeros((self.env.num_envs,), jnp.int32),
            episode_metrics={k: zeros for k in metric_names[1].metrics},
            hidden=self.model.initial_hidden(self.env.num_envs),
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

    def rollout(self, train_state: TrainState, rollout_state: RolloutState, key: jax.Array):
        """`num_steps_per_env` vmapped env steps with the current policy, as a `lax.scan`."""
        cfg = self.cfg
        params, normalizers = train_state.params, train_state.normalizers

        def step(carry, step_key):
            rs, stats = carry
            nobs = normalize_groups(normalizers, rs.obs, self.normalize_obs)
            mean, std, values, hidden = self.model.step(params, nobs, rs.hidden)
            actions = gaussian_sample(step_key, mean, std)
            env_state, res = self.env.step(rs.env_state, actions)
            if cfg.algorithm.timeout_bootstrap == "final_obs":
                # The critic's memory has seen obs_t; the final observation is its next input.
                bootstrap_values = self.critic_value(params, normalizers, res.final_obs, hidden)
            else:
                bootstrap_values = values
            rewards = bootstrap_timeouts(
                res.reward * cfg.algorithm.reward_scale, res.truncated, bootstrap_values, cfg.algorithm.gamma
            )
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
            )
            ep_return = rs.episode_return + res.reward
            ep_length = rs.episode_length + 1
            ep_metrics = {k: rs.episode_metrics[k] + res.metrics[k] for k in rs.episode_metrics}
            d = done.astype(jnp.float32)
            stats = {
                "episodes": stats["episodes"] + d.sum(),
                "return_sum": stats["return_sum"] + (ep_return * d).sum(),
                "length_sum": stats["length_sum"] + (ep_length * d).sum(),
                "reward_sum": stats["reward_sum"] + res.reward.sum(),
                "metrics": {
                    k: stats["metrics"][k] + (ep_metrics[k] / ep_length * d).sum() for k in ep_metrics
                },
            }
            rs = RolloutState(
                env_state=env_state,
                obs=res.obs,
                episode_return=jnp.where(done, 0.0, ep_return),
                episode_length=jnp.where(done, 0, ep_length),
                episode_metrics={k: jnp.where(done, 0.0, v) for k, v in ep_metrics.items()},
                hidden=reset_hidden_groups(hidden, done),
            )
            return (rs, stats), transition

        zero = jnp.zeros((), jnp.float32)
        stats0 = {
            "episodes": zero,
            "return_sum": zero,
            "length_sum": zero,
            "reward_sum": zero,
            "metrics": {k: zero for k in rollout_state.episode_metrics},
        }
        keys = jax.random.split(key, cfg.runner.num_steps_per_env)
        initial_hidden = rollout_state.hidden
        (rollout_state, stats), transitions = jax.lax.scan(step, (rollout_state, stats0), keys)
        return rollout_state, transitions.replace(initial_hidden=initial_hidden), stats

    # ---- learning ----------------------------------------------------------------------
    def loss(self, params, batch: PPOBatch):
        """Weighted PPO loss and its terms for one minibatch of `[T, B]` steps."""
        alg = self.cfg.algorithm
        mean, std, values = self.model.sequence(params, batch.obs, batch.hidden, batch.resets)
        advantages = batch.advantages
        if alg.normalize_advantage_per_mini_batch:
            advantages = normalize_advantages(advantages)
        entropy = gaussian_entropy(std)
        losses = {
            "surrogate_loss": surrogate_loss(
                gaussian_log_prob(batch.actions, mean, std), batch.old_log_prob, advantages, alg.clip_param
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
        return weighted_total(losses, coefs), (losses, mean, std)

    def minibatch_step(self, carry, batch: PPOBatch):
        """Adaptive lr from the KL to the acting policy, then one clipped optimiser step."""
        params, opt_state, lr = carry
        alg = self.cfg.algorithm
        grads, (losses, mean, std) = jax.grad(self.loss, has_aux=True)(params, batch)
        kl_mean = jnp.mean(gaussian_kl(batch.old_mean, batch.old_std, mean, std))
        if alg.schedule == "adaptive":
            lr = adaptive_learning_rate(lr, kl_mean, alg.desired_kl)
        direction, opt_state = self.optimizer.update(grads, opt_state, params)
        params = optax.apply_updates(params, jax.tree.map(lambda u: -lr * u, direction))
        params = clamp_std(params, self.model.noise_std_type, alg.clip_min_std)
        metrics = {
            "surrogate": losses["surrogate_loss"],
            "value_function": losses["value_loss"],
            "entropy": -losses["entropy"],
            "kl": kl_mean,
        }
        return (params, opt_state, lr), metrics

    def make_batch(
        self, train_state: TrainState, transitions: Transition, last_values: jax.Array
    ) -> PPOBatch:
        """Returns, advantages and normalised observations as one `[T, N]` batch.

        Feed-forward batches are flattened to `[1, T * N]`, so every sample can land in any
        minibatch; recurrent ones keep `[T, N]` and are split by environment.
        """
        alg = self.cfg.algorithm
        advantages, returns = compute_gae(
            transitions.rewards, transitions.values, transitions.dones, last_values, alg.gamma, alg.lam
        )
        if not alg.normalize_advantage_per_mini_batch:
            advantages = normalize_advantages(advantages)
        resets = jnp.concatenate([jnp.zeros_like(transitions.dones[:1]), transitions.dones[:-1]], axis=0)
        batch = PPOBatch(
            obs=normalize_groups(train_state.normalizers, transitions.obs, self.normalize_obs),
            hidden=transitions.initial_hidden if self.model.recurrent else {},
            resets=resets,
            actions=transitions.actions,
            old_log_prob=transitions.log_prob,
            old_mean=transitions.mean,
            old_std=transitions.std,
            old_values=transitions.values,
            advantages=advantages,
            returns=returns,
        )
        if self.model.recurrent:
            return batch
        flat = lambda x: x.reshape((1, -1) + x.shape[2:])
        return batch.replace(**{f: jax.tree.map(flat, getattr(batch, f)) for f in PPOBatch.STEP_FIELDS})

    def update(
        self, train_state: TrainState, transitions: Transition, last_values: jax.Array, key: jax.Array
    ):
        """GAE, then `num_learning_epochs` x `num_mini_batches` steps, as nested `lax.scan`s."""
        alg = self.cfg.algorithm
        batch = self.make_batch(train_state, transitions, last_values)
        num_columns = batch.advantages.shape[1]  # samples (feed-forward) or environments (recurrent)

        def epoch(carry, epoch_key):
            # A fresh order each epoch; each minibatch is gathered inside the scan, not materialised.
            order = jax.random.permutation(epoch_key, num_columns).reshape(alg.num_mini_batches, -1)
            return jax.lax.scan(
                lambda c, idx: self.minibatch_step(c, batch.select_columns(idx)), carry, order
            )

        carry = (train_state.params, train_state.opt_state, train_state.learning_rate)
        keys = jax.random.split(key, alg.num_learning_epochs)
        (params, opt_state, lr), metrics = jax.lax.scan(epoch, carry, keys)
        metrics = jax.tree.map(jnp.mean, metrics)
        return params, opt_state, lr, metrics

    def iteration(self, train_state: TrainState, rollout_state: RolloutState):
        """Advance the whole system by one PPO iteration; returns new states and scalar metrics."""
        key, rollout_key, update_key = jax.random.split(train_state.key, 3)
        rollout_state, transitions, stats = self.rollout(train_state, rollout_state, rollout_key)
        chex.assert_shape(transitions.rewards, (self.cfg.runner.num_steps_per_env, self.env.num_envs))
        last_values = self.critic_value(
            train_state.params, train_state.normalizers, rollout_state.obs, rollout_state.hidden
        )
        params, opt_state, lr, metrics = self.update(train_state, transitions, last_values, update_key)
        normalizers = train_state.normalizers
        if self.normalize_obs:
            # After the update, so the first ratio of the next update is exactly 1 (rsl_rl #225).
            until = self.cfg.runner.normalizer_until
            normalizers = {
                k: update_normalizer(normalizers[k], transitions.obs[k], until) for k in normalizers
            }
        new_train_state = TrainState(
            params=params,
            opt_state=opt_state,
            normalizers=normalizers,
            learning_rate=lr,
            key=key,
            iteration=train_state.iteration + 1,
        )
        metrics = {**metrics, **stats, "learning_rate": lr, "mean_noise_std": jnp.mean(transitions.std[-1])}
        return new_train_state, rollout_state, metrics

    # ---- evaluation --------------------------------------------------------------------
    def evaluate(self, eval_env: BraxVecEnv, params, normalizers, key: jax.Array):
        """Deterministic (mean-action) episodes on separate envs: mean return and length."""
        env_state, obs = eval_env.reset(key)
        n = eval_env.num_envs

        def step(carry, _):
            env_state, obs, hidden, alive, ret, length = carry
            mean, _, hidden = self.policy_distribution(params, normalizers, obs, hidden)
            env_state, res = eval_env.step(env_state, mean)
            done = res.terminated | res.truncated
            ret = ret + res.reward * alive
            length = length + alive
            alive = alive * (1.0 - done.astype(jnp.float32))
            return (env_state, res.obs, reset_hidden_groups(hidden, done), alive, ret, length), None

        hidden = self.model.initial_hidden(n)
        init = (env_state, obs, hidden, jnp.ones((n,)), jnp.zeros((n,)), jnp.zeros((n,)))
        (*_, ret, length), _ = jax.lax.scan(step, init, None, length=eval_env.episode_length)
        return {"episode_reward": jnp.mean(ret), "episode_length": jnp.mean(length)}


def make_ppo_learner(env: BraxVecEnv, cfg: TrainConfig) -> PPOLearner:
    """Assemble the learner for an env and a validated config."""
    return PPOLearner(
        env=env,
        model=make_policy_model(env.action_size, cfg.policy),
        cfg=cfg,
        optimizer=make_optimizer(cfg.algorithm.optimizer, cfg.algorithm.max_grad_norm),
    )


def jit_iteration(
    learner: PPOLearner,
) -> Callable[[TrainState, RolloutState], tuple[TrainState, RolloutState, Any]]:
    """The compiled iteration; both states are donated so their buffers are reused in place."""
    return jax.jit(learner.iteration, donate_argnums=(0, 1))


def jit_evaluate(learner: PPOLearner, eval_env: BraxVecEnv):
    """Compiled deterministic evaluation on `eval_env`: `(params, normalizers, key) -> metrics`."""
    return jax.jit(functools.partial(learner.evaluate, eval_env))
