"""Batched Brax environments with fresh-random auto-reset and separate termination/truncation.

Brax's own AutoResetWrapper restarts a finished episode from one cached first state. Here every
finished episode starts from a new `env.reset` with its own key, time-outs are reported as
`truncated` (not as terminations), and the observation reached by the step that ended an
episode is kept as `final_obs` so that the learner can bootstrap from its value.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import brax.envs
import chex
import jax
import jax.numpy as jnp
from flax import struct

from strl_jax.collectives import env_keys
from strl_jax.envs.amp_obs import WithAmpObservation
from strl_jax.errors import ConfigError
from strl_jax.masked_rows import reserved_rows, where_rows

BACKENDS = ("mjx", "generalized", "positional", "spring")

Observation = dict[str, jax.Array]


def available_tasks() -> list[str]:
    """Every environment name registered with Brax (including ones users register)."""
    return sorted(brax.envs._envs)  # noqa: SLF001 - brax exposes no public listing


def available_backends() -> list[str]:
    return list(BACKENDS)


@struct.dataclass
class EnvState:
    """State of `num_envs` environments; everything an exact resume needs."""

    brax_state: Any  # brax.envs.State with a leading env axis
    step_count: jax.Array  # [N] int32 steps taken in the current episode
    reset_key: jax.Array  # [N] PRNG keys, advanced each time that env resets


@struct.dataclass
class StepResult:
    """What one batched step returns besides the new state."""

    obs: Observation  # observation to act on next (after any reset)
    reward: jax.Array  # [N]
    terminated: jax.Array  # [N] bool: the episode ended in a terminal state
    truncated: jax.Array  # [N] bool: the episode hit the time limit and is not terminal
    final_obs: Observation  # observation the step reached, before any reset
    metrics: dict[str, jax.Array]  # Brax per-step metrics (reward terms etc.), [N] each


def strong_types(tree: Any) -> Any:
    """Drop JAX weak types (Brax produces some) so the state's signature never changes and the
    compiled iteration is not traced a second time."""
    return jax.tree.map(lambda x: jnp.asarray(x, x.dtype), tree)


@dataclasses.dataclass(frozen=True)
class ObservationGroups:
    """Named views of the Brax observation: `(name, indices or None for all)` per group.

    `policy` and `critic` always exist; by default both see the whole observation.
    """

    groups: tuple[tuple[str, tuple[int, ...] | None], ...] = (("policy", None), ("critic", None))

    def __call__(self, brax_state: Any) -> Observation:
        obs = brax_state.obs
        return {name: obs if idx is None else obs[..., jnp.asarray(idx)] for name, idx in self.groups}


def make_observation_groups(spec: dict, observation_size: int) -> ObservationGroups:
    """Validate `env.obs_groups` ({group: [indices]}) against the env's observation size."""
    groups: dict[str, tuple[int, ...] | None] = {"policy": None, "critic": None}
    for name, idx in spec.items():
        if idx is None:
            groups[name] = None
            continue
        if not isinstance(idx, list | tuple) or not idx or not all(isinstance(i, int) for i in idx):
            raise ConfigError(
                f"env.obs_groups.{name} must be a non-empty list of integer indices, got {idx!r}"
            )
        bad = [i for i in idx if not -observation_size <= i < observation_size]
        if bad:
            raise ConfigError(
                f"env.obs_groups.{name} has indices {bad} outside the observation of size {observation_size}"
            )
        groups[name] = tuple(idx)
    return ObservationGroups(tuple(groups.items()))


@struct.dataclass
class BraxVecEnv:
    """Pure reset/step functions over a batch of one Brax environment."""

    env: Any = struct.field(pytree_node=False)
    num_envs: int = struct.field(pytree_node=False)
    episode_length: int = struct.field(pytree_node=False)
    action_repeat: int = struct.field(pytree_node=False, default=1)
    clip_actions: float | None = struct.field(pytree_node=False, default=1.0)
    observe: Callable[[Any], Observation] = struct.field(pytree_node=False, default=ObservationGroups())

    @property
    def action_size(self) -> int:
        return int(self.env.action_size)

    def observation_shapes(self) -> dict[str, tuple[int, ...]]:
        """Shape of one environment's observation in each group."""
        obs = jax.eval_shape(lambda key: self.observe(self.env.reset(key)), jax.random.PRNGKey(0))
        return {k: tuple(v.shape) for k, v in obs.items()}

    def reset(self, key: jax.Array, first_env: jax.Array | int = 0) -> tuple[EnvState, Observation]:
        """Reset all environments with independent random initial states.

        Env `i` draws from `fold_in(key, first_env + i)`: a shard of a larger batch (whose
        first global index is `first_env`) starts exactly like that part of the whole batch.
        """
        ids = jnp.asarray(first_env, jnp.int32) + jnp.arange(self.num_envs, dtype=jnp.int32)
        keys = jax.vmap(jax.random.split)(env_keys(key, ids))
        brax_state = strong_types(jax.vmap(self.env.reset)(keys[:, 0]))
        state = EnvState(
            brax_state=brax_state,
            step_count=jnp.zeros((self.num_envs,), jnp.int32),
            reset_key=keys[:, 1],
        )
        return state, self.observe(brax_state)

    def _step_single(self, brax_state: Any, action: jax.Array) -> tuple[Any, jax.Array, jax.Array]:
        """Step one env `action_repeat` times, summing rewards; terminal if any sub-step was."""
        if self.action_repeat == 1:
            nxt = self.env.step(brax_state, action)
            return nxt, nxt.reward, nxt.done

        def body(carry, _):
            state, reward, done = carry
            state = self.env.step(state, action)
            return (state, reward + state.reward, jnp.maximum(done, state.done)), None

        zero = jnp.zeros_like(brax_state.reward)
        (nxt, reward, done), _ = jax.lax.scan(body, (brax_state, zero, zero), None, length=self.action_repeat)
        return nxt, reward, done

    def step(self, state: EnvState, action: jax.Array) -> tuple[EnvState, StepResult]:
        """Advance every environment; finished ones restart from a fresh random state."""
        chex.assert_shape(action, (self.num_envs, self.action_size))
        if self.clip_actions is not None:
            action = jnp.clip(action, -self.clip_actions, self.clip_actions)
        stepped, reward, done = jax.vmap(self._step_single)(state.brax_state, action)
        step_count = state.step_count + 1
        terminated = done > 0
        truncated = (step_count >= self.episode_length) & ~terminated
        finished = terminated | truncated
        final_obs = self.observe(stepped)

        # Finished envs restart from a fresh random state; a reset costs about a step, so only the
        # finished envs' rows are reset (`where_rows`), not all of them.
        split = jax.vmap(jax.random.split)(state.reset_key)
        brax_state = where_rows(
            finished, jax.vmap(self.env.reset), split[:, 1], stepped, reserved_rows(self.num_envs, 1 / 8)
        )
        reset_key = jnp.where(finished[:, None], split[:, 0], state.reset_key)
        new_state = EnvState(
            brax_state=strong_types(brax_state),
            step_count=jnp.where(finished, 0, step_count),
            reset_key=reset_key,
        )
        result = StepResult(
            obs=self.observe(brax_state),
            reward=reward,
            terminated=terminated,
            truncated=truncated,
            final_obs=final_obs,
            metrics=dict(stepped.metrics),
        )
        return new_state, result


def make_brax_env(
    task: str,
    backend: str,
    num_envs: int,
    episode_length: int,
    action_repeat: int = 1,
    clip_actions: float | None = 1.0,
    env_kwargs: dict | None = None,
    obs_groups: dict | None = None,
) -> BraxVecEnv:
    """Create a batched Brax env by name, with clear errors for unknown names or kwargs."""
    if task not in available_tasks():
        raise ConfigError(f"unknown task {task!r}; valid tasks: {available_tasks()}")
    if backend not in BACKENDS:
        raise ConfigError(f"unknown backend {backend!r}; valid backends: {list(BACKENDS)}")
    try:
        env = brax.envs.get_environment(task, backend=backend, **(env_kwargs or {}))
    except TypeError as err:
        raise ConfigError(f"env.env_kwargs {env_kwargs!r} do not fit brax task {task!r}: {err}") from None
    return BraxVecEnv(
        env=env,
        num_envs=num_envs,
        episode_length=episode_length,
        action_repeat=action_repeat,
        clip_actions=clip_actions,
        # eval_shape: Brax's `observation_size` runs an uncompiled reset (seconds per env build).
        observe=make_observation_groups(
            obs_groups or {}, int(jax.eval_shape(env.reset, jax.random.PRNGKey(0)).obs.shape[-1])
        ),
    )


def make_env_from_config(env_cfg, num_envs: int | None = None, amp: bool = False) -> BraxVecEnv:
    """Build from an `EnvConfig`; `num_envs` overrides the configured count (evaluation envs).

    `amp` adds the `amp` group: the AMP frame of the physics state (`env.amp_obs_components`).
    """
    env = make_brax_env(
        task=env_cfg.task,
        backend=env_cfg.backend,
        num_envs=env_cfg.num_envs if num_envs is None else num_envs,
        episode_length=env_cfg.episode_length,
        action_repeat=env_cfg.action_repeat,
        clip_actions=env_cfg.clip_actions,
        env_kwargs=env_cfg.env_kwargs,
        obs_groups=env_cfg.obs_groups,
    )
    if not amp:
        return env
    components = None if env_cfg.amp_obs_components is None else tuple(env_cfg.amp_obs_components)
    return env.replace(observe=WithAmpObservation(env.observe, env_cfg.task, components))
