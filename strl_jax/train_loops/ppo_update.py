"""PPO's update on one rollout: GAE, then `num_learning_epochs` x `num_mini_batches` optimiser
steps of `agents.ppo.ppo_loss`, each with the adaptive learning rate from the KL to the acting
policy, as nested `lax.scan`s (`update_rules.PPOUpdate` runs it).

Parts join each minibatch through their hooks (`Part.minibatch_inputs`, and
`Part.minibatch_update` for a part with an optimiser of its own, e.g. RND's predictor); the update
never names a part. `learner` is the static `train_loops.run_spec.RunSpec` it serves.
"""

from __future__ import annotations

import functools
from typing import Any

import chex
import jax
import jax.numpy as jnp
import optax
from flax import struct

from strl_jax.agents.parts import Part, UpdateContext
from strl_jax.agents.ppo import (
    POLICY,
    MinibatchInputs,
    PPOBatch,
    PPOLossSettings,
    adaptive_learning_rate,
    ppo_loss,
)
from strl_jax.buffers.gae import compute_gae, normalize_advantages
from strl_jax.buffers.history import RolloutHistory, with_history
from strl_jax.buffers.minibatch import merge_time_env, minibatch_indices
from strl_jax.buffers.transitions import Transition
from strl_jax.collectives import pmean
from strl_jax.networks.actor_critic import clamp_std, std_floor
from strl_jax.train_loops.finiteness import check_name, finite, first_failure
from strl_jax.train_loops.run_spec import RunSpec, UpdateOutput
from strl_jax.train_loops.state import TrainState

RESAMPLE_STREAM = 0x5E5A  # folded into a minibatch's key for `hidden_state_resample_prob`
ENTROPY_STREAM = 0xE7A0  # ... for the entropy estimate of a squashed distribution


def loss_settings(learner: RunSpec) -> PPOLossSettings:
    """The static side of `agents.ppo.ppo_loss` for this learner."""
    return PPOLossSettings(
        model=learner.model,
        parts=learner.parts,
        alg=learner.cfg.algorithm,
        ppo_terms=learner.update_rule.ppo_terms,
        gae_horizon=learner.cfg.algorithm.gae_horizon or learner.cfg.runner.num_steps_per_env,
        normalization=learner.normalization,
        axis_name=learner.axis_name,
    )


def minibatch_step(learner: RunSpec, carry, inputs: MinibatchInputs, adapt: bool = True):
    """Adaptive lr from the KL to the acting policy, then one clipped optimiser step.
    `adapt=False`: the step takes the carried rate as it is (a fixed rate, a replayed dataset's).

    Gradients, KL and loss terms are averaged over devices (equal shares of the minibatch),
    so every device takes the same step and the params stay replicated.
    """
    trainable, opt_state, lr = carry
    alg = learner.cfg.algorithm
    loss = functools.partial(ppo_loss, settings=loss_settings(learner))
    grads, (losses, metrics, mean, std) = jax.grad(loss, has_aux=True)(trainable, inputs)
    batch = inputs.batch
    kl = learner.model.action_dist.kl(batch.old_mean, batch.old_std, mean, std, alg.kl_epsilon)
    kl_mean = jnp.mean(kl)
    grads, kl_mean, losses, metrics = pmean((grads, kl_mean, losses, metrics), learner.axis_name)
    if adapt and alg.schedule == "adaptive":
        lr = adaptive_learning_rate(lr, kl_mean, alg.desired_kl)
    direction, opt_state = learner.optimizer.update(grads, opt_state, trainable)
    trainable = optax.apply_updates(trainable, jax.tree.map(lambda u: -lr * u, direction))
    floor = std_floor(alg.clip_min_std, alg.clip_min_std_schedule, inputs.iteration)
    policy = clamp_std(trainable[POLICY], learner.model.noise_std_type, floor)
    trainable = {**trainable, POLICY: policy}
    checks = {
        **{check_name(1, f"loss term {k}"): jnp.isfinite(v) for k, v in losses.items()},
        **{check_name(2, f"gradient of {k}"): finite(g) for k, g in grads.items()},
    }
    return (trainable, opt_state, lr), ({**metrics, "kl": kl_mean, "learning_rate": lr}, checks)


def make_batch(
    learner: RunSpec,
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
    batch = raw_batch(learner, transitions, last_values)
    if history is not None:
        batch, history = with_history(batch, history)
    normalize = functools.partial(learner.normalization.groups, train_state.normalizers)
    if learner.cfg.algorithm.recompute_advantages:
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
    if learner.model.recurrent:
        return batch, history
    steps = {f: merge_time_env(getattr(batch, f)) for f in PPOBatch.STEP_FIELDS}
    return batch.replace(**steps), history


def raw_batch(learner: RunSpec, transitions: Transition, last_values: jax.Array) -> PPOBatch:
    """Returns and advantages of one rollout, its observations still raw, `[T, N]`."""
    alg = learner.cfg.algorithm
    if learner.update_rule.ppo_terms:
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
            advantages = normalize_advantages(advantages, learner.axis_name)
    else:  # DAgger: no returns
        advantages = returns = jnp.zeros_like(transitions.rewards)
    resets = jnp.concatenate([jnp.zeros_like(transitions.dones[:1]), transitions.dones[:-1]], axis=0)
    return PPOBatch(
        obs=transitions.obs,
        hidden=transitions.initial_hidden if learner.model.recurrent else {},
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


@struct.dataclass
class ColumnLayout:
    """How an update's batch splits into minibatch columns: every sample (feed-forward) or whole
    environments (recurrent); with a history each env gives one column per stored rollout (global
    index env * chunks + k); `trajectory` minibatches keep gae_horizon-step segments of one env."""

    num_columns: int = struct.field(pytree_node=False)
    steps_per_env: int = struct.field(pytree_node=False)
    segment: int = struct.field(pytree_node=False)
    first_env: jax.Array


def column_layout(learner: RunSpec, steps: int) -> ColumnLayout:
    alg = learner.cfg.algorithm
    trajectories = alg.minibatch_unit == "trajectory" and not learner.model.recurrent
    chunks = learner.history_chunks
    return ColumnLayout(
        num_columns=learner.env.num_envs * chunks,
        steps_per_env=1 if learner.model.recurrent else steps,
        segment=(alg.gae_horizon or steps) if trajectories else 1,
        first_env=learner.env_ids()[0] * chunks,
    )


def minibatch_update_fn(
    learner: RunSpec,
    train_state: TrainState,
    rollout_parts: dict,
    batch: PPOBatch,
    ctx: UpdateContext,
    adapt: bool,
):
    """The scanned body of one minibatch: `(carry, (column indices, key)) -> (carry, (metrics,
    finiteness per check))`, carry = (core, own states, whether `algorithm.target_kl` has stopped
    the update), core = (trainable, opt_state, lr)."""
    resample_prob = learner.cfg.algorithm.hidden_state_resample_prob
    statistics = learner.normalization.statistics(train_state.normalizers)
    units = learner.model.units(statistics)

    def minibatch(carry, xs):
        core, own, stopped = carry
        idx, part_key = xs
        chex.assert_rank(idx, 1)
        inputs = {
            p.name: p.minibatch_inputs(train_state.parts[p.name], rollout_parts[p.name], idx, part_key, ctx)
            for p in learner.parts
        }
        selected = batch.select_columns(idx)
        minibatch_inputs = MinibatchInputs(
            batch=selected,
            iteration=train_state.iteration,
            train_parts=train_state.parts,
            part_inputs=inputs,
            units=units,
            normalizers=statistics,
            entropy_key=jax.random.fold_in(part_key, ENTROPY_STREAM),
            resample_key=jax.random.fold_in(part_key, RESAMPLE_STREAM) if resample_prob > 0 else None,
            resample_prob=resample_prob,
        )
        stepped, (metrics, checks) = minibatch_step(learner, core, minibatch_inputs, adapt)
        core, stopped, metrics = early_stop(learner.cfg.algorithm.target_kl, core, stepped, stopped, metrics)
        own, own_metrics = own_updates(learner, own, selected, ctx)
        checks |= {check_name(1, f"loss term {k}"): jnp.isfinite(v) for k, v in own_metrics.items()}
        return (core, own, stopped), ({**metrics, **own_metrics}, checks)

    return minibatch


def early_stop(target_kl: float | None, before, after, stopped: jax.Array, metrics: dict):
    """`(core, stopped, metrics)` after one minibatch under `algorithm.target_kl`, core =
    (trainable, opt_state, lr): steps are taken until a minibatch's KL (to the acting policy,
    before its step) passes 1.5 x target_kl; that step and every later one of the update are
    skipped (stable-baselines3's early stop), and the skipped share of the update's steps is the
    `kl_stopped` metric.

    Only the parameter steps are skipped: the rate follows the adaptive schedule on every
    minibatch's measured KL, as rsl_rl's would (a large KL lowers it on each minibatch left).
    Restored with the parameters, a rate far too large would stay: the rule raises it on an
    update's first minibatches (KL about zero), and its decreases come on the minibatches the stop
    skips."""
    if target_kl is None:
        return after, stopped, metrics
    stopped = stopped | (metrics["kl"] > 1.5 * target_kl)
    (*kept_before, _), (*kept_after, rate) = before, after
    kept = jax.tree.map(lambda old, new: jnp.where(stopped, old, new), kept_before, kept_after)
    return (*kept, rate), stopped, {**metrics, "kl_stopped": stopped.astype(jnp.float32)}


def ppo_update(
    learner: RunSpec,
    train_state: TrainState,
    rollout_parts: dict,
    transitions: Transition,
    last_values: jax.Array,
    key: jax.Array,
    history: RolloutHistory | None = None,
    bootstrap_obs: dict | None = None,
    orders: Any = None,
    adapt: bool = True,
):
    """GAE, then `num_learning_epochs` x `num_mini_batches` steps, as nested `lax.scan`s.

    Returns the `UpdateOutput` and the rollout history; its `metrics` hold one value per
    optimiser step, `[epochs, minibatches]` (the `learning_rate` each step applied among them).
    `bootstrap_obs`: the observation after the rollout (recomputed advantages). `orders`
    `[epochs, minibatches, size]`: the columns of every minibatch in place of the drawn ones, e.g.
    rsl_rl's (the parity tests' seam).
    `adapt=False`: every step takes the train state's rate, which the adaptive rule leaves.
    """
    alg = learner.cfg.algorithm
    batch, history = make_batch(learner, train_state, transitions, last_values, history, bootstrap_obs)
    steps = transitions.rewards.shape[0]
    layout = column_layout(learner, steps)
    part_root = jax.random.fold_in(key, 1)
    ctx = learner.update_context(steps)
    minibatch = minibatch_update_fn(learner, train_state, rollout_parts, batch, ctx, adapt)

    def epoch(carry, xs):
        epoch_key, epoch_index, given = xs
        # A fresh order each epoch; each minibatch is gathered inside the scan, not materialised.
        order = given
        if order is None:
            order = minibatch_indices(
                epoch_key,
                layout.num_columns,
                layout.steps_per_env,
                alg.num_mini_batches,
                layout.first_env,
                layout.segment,
            )
        part_keys = jax.random.split(jax.random.fold_in(part_root, epoch_index), alg.num_mini_batches)
        return jax.lax.scan(minibatch, carry, (order, part_keys))

    trainable = learner.trainable(train_state.params, train_state.parts)
    own = {name: train_state.parts[name] for name in own_optimizer_parts(learner)}
    carry = ((trainable, train_state.opt_state, train_state.learning_rate), own, jnp.zeros((), bool))
    keys = jax.random.split(key, alg.num_learning_epochs)
    epochs = jnp.arange(alg.num_learning_epochs, dtype=jnp.int32)
    if orders is not None:
        orders = jnp.asarray(orders, jnp.int32)
        chex.assert_shape(orders, (alg.num_learning_epochs, alg.num_mini_batches, None))
    xs = (keys, epochs, orders)
    ((trainable, opt_state, lr), own, _), (metrics, checks) = jax.lax.scan(epoch, carry, xs)
    failures = jax.tree.map(lambda ok: first_failure(ok.reshape(-1)), checks)
    return UpdateOutput(trainable, opt_state, lr, metrics, failures, {**train_state.parts, **own}), history


def own_optimizer_parts(learner: RunSpec) -> tuple[str, ...]:
    """The parts that override `Part.minibatch_update` (only their states ride the update's loop)."""
    return tuple(p.name for p in learner.parts if type(p).minibatch_update is not Part.minibatch_update)


def own_updates(learner: RunSpec, own: dict, batch: PPOBatch, ctx: UpdateContext) -> tuple[dict, dict]:
    """Each such part's own optimiser step on one minibatch: `(their train states, metrics)`."""
    own, metrics = dict(own), {}
    for p in learner.parts:
        if p.name in own:
            own[p.name], part_metrics = p.minibatch_update(own[p.name], batch, ctx)
            metrics |= part_metrics
    return own, metrics
