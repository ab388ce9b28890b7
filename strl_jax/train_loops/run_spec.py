"""The static description of a run and the contract of its update rule: what the rollout and the
updates read (env, policy, optimiser, parts and the small helpers over them), below the learner's
iteration (`train_loops.learner`) that runs them.
"""

from __future__ import annotations

from typing import Any, Protocol

import jax
import jax.numpy as jnp
import optax
from flax import struct

from strl_jax.agents.lr_schedulers import LrScheduler
from strl_jax.agents.parts import Part, UpdateContext
from strl_jax.agents.ppo import POLICY
from strl_jax.buffers.transitions import Transition
from strl_jax.collectives import global_env_ids
from strl_jax.configs.schema import TrainConfig
from strl_jax.envs.vec_env import VecEnv
from strl_jax.networks.acting import Actor
from strl_jax.networks.normalizer import InputNormalization
from strl_jax.networks.policy import PolicyModel
from strl_jax.train_loops.state import RolloutState, TrainState


@struct.dataclass
class UpdateOutput:
    """What an update rule leaves: the optimised parameters (`{"policy": ..., <part>: ...}`), the
    optimiser state, the rate the last step took, the metrics (one value per optimiser step), the
    finiteness checks (`train_loops.finiteness`) and the parts' train states."""

    trainable: dict
    opt_state: Any
    learning_rate: jax.Array
    metrics: dict
    checks: dict
    parts: dict


class UpdateRule(Protocol):
    """What the learner asks of an update rule."""

    splits_key: bool  # the update draws from its own key (one more split of the run key)

    def update(
        self,
        learner: RunSpec,
        train_state: TrainState,
        rollout_state: RolloutState,
        transitions: Transition,
        bootstrap: tuple[dict, Any],
        key: jax.Array | None,
        adapt: bool = True,
    ) -> tuple[UpdateOutput, RolloutState]:
        """The update on one rollout; `bootstrap`: the observation and memory after it.
        `adapt=False`: the steps take the train state's rate as it is (a fixed rate)."""
        ...

    def optimizer_steps(self, cfg: TrainConfig) -> int:
        """Optimiser steps per update (the step index the parameter checks report)."""
        ...


@struct.dataclass
class RunSpec:
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
    def normalization(self) -> InputNormalization:
        """The run's one normalisation point (the actor's: acting and learning read alike)."""
        return self.actor.normalization

    @property
    def masks_timeouts(self) -> bool:
        """brax's `bootstrap_on_timeout=False`: time-out steps are masked out of GAE."""
        return self.cfg.algorithm.timeout_bootstrap == "none"

    @property
    def history_chunks(self) -> int:
        """Rollouts in each update's batch (st_rl's `buffer_dilation_ratio`)."""
        return int(self.cfg.algorithm.buffer_dilation_ratio)

    def env_ids(self) -> jax.Array:
        """Global indices of this device's environments."""
        return global_env_ids(self.env.num_envs, self.axis_name)

    def shard(self, env: VecEnv, axis_name: str | None) -> Any:
        """This description for one device's share `env` of the envs, reducing over `axis_name`."""
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

    def initial_learning_rate(self) -> jax.Array:
        lr = jnp.asarray(self.cfg.algorithm.learning_rate, jnp.float32)
        return lr if self.lr_scheduler is None else self.lr_scheduler.initial(lr)

    def critic_value(self, params, normalizers, obs, hidden):
        """Value of raw observations, without advancing the hidden state."""
        nobs = self.normalization.groups(normalizers, obs)
        return self.model.value(params, nobs, hidden)
