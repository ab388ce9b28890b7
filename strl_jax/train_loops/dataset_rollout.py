"""A demonstration dataset replayed as the rollout (st_rl's TwoStageRunner's first stage): each of
the run's envs plays the dataset's trajectories (`buffers.rollout_dataset`), and the iteration
learns from them as from the envs' steps; the envs do not move.

Where each virtual env is in the dataset is the rollout state of the dataset's part
(`agents.demonstrations.DatasetPart`), which also holds the imitation term of the replayed steps.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from strl_jax.agents.demonstrations import DATASET_PART
from strl_jax.buffers.gae import bootstrap_timeouts
from strl_jax.buffers.rollout_dataset import DatasetArrays, advance, envs_used_up, step_index
from strl_jax.buffers.transitions import Transition
from strl_jax.collectives import pmean, psum
from strl_jax.networks.gaussian import gaussian_log_prob
from strl_jax.train_loops.rollout import RolloutOutput, episode_sums
from strl_jax.train_loops.run_spec import RunSpec
from strl_jax.train_loops.state import RolloutState, TrainState


@struct.dataclass
class DatasetSource:
    """Demonstration trajectories replayed as rollouts (`dataset`: every step of every trajectory,
    replicated on every device); the envs do not move."""

    dataset: DatasetArrays
    # the rate of every optimiser step of a replayed iteration (None: the algorithm's schedule)
    fixed_rate: float | None = struct.field(pytree_node=False, default=None)

    def __call__(
        self, learner: RunSpec, train_state: TrainState, rollout_state: RolloutState, key: jax.Array
    ) -> RolloutOutput:
        return dataset_rollout(learner, self.dataset, train_state, rollout_state, key)


def dataset_rollout(
    learner: RunSpec,
    dataset: DatasetArrays,
    train_state: TrainState,
    rollout_state: RolloutState,
    key: jax.Array,
) -> RolloutOutput:
    """`num_steps_per_env` replayed steps per virtual env: the dataset's observations, actions,
    rewards and dones, with the current policy's values, log-probabilities, mean and std of
    those actions (st_rl's `collect_transition_from_dataset`), and what each part stores of a
    replayed step (`Part.on_replayed_step`: the dataset part its imitation labels). Time-outs
    bootstrap from the value of the last observation (the datasets hold no final observation)."""
    del key  # nothing is drawn: the actions are the dataset's
    alg = learner.cfg.algorithm
    params, normalizers = train_state.params, train_state.normalizers
    hidden = learner.model.initial_hidden(learner.env.num_envs)
    no_sums = {p.name: {} for p in learner.parts}

    def step(cursor, _):
        index = step_index(dataset, cursor)
        obs = {k: v[index] for k, v in dataset.obs.items()}
        mean, std, _, _ = learner.actor.forward(params, normalizers, obs, hidden, {})
        values = learner.model.value(params, learner.normalization.groups(normalizers, obs), hidden)
        actions, done = dataset.actions[index], dataset.dones[index]
        reward = dataset.rewards[index]
        truncated = (dataset.timeouts[index] * done) > 0
        transition = Transition(
            obs=obs,
            actions=actions,
            log_prob=gaussian_log_prob(actions, mean, std),
            mean=mean,
            std=std,
            values=values,
            rewards=bootstrap_timeouts(reward * alg.reward_scale, truncated, values, alg.gamma),
            dones=done,
            parts={p.name: p.on_replayed_step(dataset.labels[index]) for p in learner.parts},
        )
        sums = episode_sums(cursor.episode_return + reward, cursor.episode_length + 1, {}, reward, done)
        sums |= {"parts": no_sums}
        return advance(dataset, cursor, index, learner.cfg.env.num_envs), (transition, sums)

    cursor, (transitions, step_sums) = jax.lax.scan(
        step, rollout_state.parts[DATASET_PART], None, length=learner.cfg.runner.num_steps_per_env
    )
    sums = psum(jax.tree.map(lambda x: x.sum(0), step_sums), learner.axis_name)
    rollout_state = rollout_state.replace(parts={**rollout_state.parts, DATASET_PART: cursor})
    last_obs = {k: v[step_index(dataset, cursor)] for k, v in dataset.obs.items()}
    used_up = psum(envs_used_up(dataset, cursor), learner.axis_name)
    scalars = {
        "dataset_used_up": (used_up >= learner.cfg.env.num_envs).astype(jnp.float32),
        "dataset_passes": pmean(jnp.mean(cursor.position / dataset.num_trajectories), learner.axis_name),
    }
    return rollout_state, transitions.replace(initial_hidden=hidden), sums, (last_obs, hidden), scalars
