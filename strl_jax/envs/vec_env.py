"""Batched environments with fresh-random auto-reset and separate termination/truncation.

One implementation for every env family (Brax, MuJoCo Playground): the single env only has to
offer `reset(key) -> state` and `step(state, action) -> state` with a state holding `obs`,
`reward`, `done` and `metrics` (brax's `State` and Playground's `State` both do).

Brax's own AutoResetWrapper (and Playground's by default) restarts a finished episode from one
cached first state. Here every finished episode starts from a new `env.reset` with its own key,
time-outs are reported as `truncated` (not as terminations), and the observation reached by the
step that ended an episode is kept as `final_obs` so that the learner can bootstrap from its value.

Where the fresh state comes from is `VecEnv.auto_reset`:
- `"in_step"`: the step resets the finished envs itself, so every program that steps the env
  also compiles the env's reset.
- `"pool"`: each env holds one fresh initial state (`EnvState.pool`) drawn ahead by
  `refresh_pool`, a separate program run between iterations; the step only selects the pool row
  of a finished env. Rows are drawn with the same keys `"in_step"` would use, so both give the
  same episodes as long as no env finishes twice between refreshes; an env that does restarts
  from the same pool state again. The first states are pool rows too (`pending`, a refresh,
  `start`): a training run compiles the env's reset once, in the refresh program.
- `"none"`: finished envs stay where they were before the finishing step (evaluation counts each
  env's first episode only).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, Protocol

import chex
import jax
import jax.numpy as jnp
from flax import struct

from strl_jax.collectives import env_keys
from strl_jax.errors import ConfigError
from strl_jax.masked_rows import reserved_rows, select_rows, where_rows

Observation = dict[str, jax.Array]
# Stream of `fold_in(reset key, ...)` that draws each env's physics (domain randomisation).
PHYSICS_STREAM = 0x5EED
# Stream of `fold_in(reset key, ...)` that draws each env's first episode step (random starts).
EPISODE_START_STREAM = 0xE9
# Where a finished env's next initial state comes from (see the module docstring).
AUTO_RESETS = ("pool", "in_step", "none")
# The name scope of the single env's reset in traced programs.
RESET_SCOPE = "env_reset"

# One jitted single-env reset and step per env (and its physics, probe and action repeat), shared
# by every VecEnv built on it: jax traces a jitted function once per argument signature and
# reuses that trace wherever it is called again, under any vmap or scan. A training run calls
# the step in its init, rollout and evaluation programs; tracing a brax or MJX step takes
# seconds, compiling the program around it less, so one trace instead of one per program is most
# of the compile time saved. `release_single_env_programs` drops them.
_SINGLE_ENV_FUNCTIONS: dict[tuple[int, ...], tuple[Callable, Callable, tuple]] = {}


def release_single_env_programs() -> None:
    """Forget every shared single-env reset and step (and so their traces)."""
    _SINGLE_ENV_FUNCTIONS.clear()


@struct.dataclass
class EnvState:
    """State of `num_envs` environments; everything an exact resume needs."""

    brax_state: Any  # the single env's state (brax or Playground `State`) with a leading env axis
    step_count: jax.Array  # [N] int32 steps taken in the current episode
    reset_key: jax.Array  # [N] PRNG keys, advanced each time that env resets
    physics: Any = struct.field(default_factory=dict)  # [N, ...] per-env model fields (randomised)
    # auto_reset="pool": [N] the initial state each env restarts from next, and whether a finished
    # episode took it since the last `refresh_pool` (None with the other modes)
    pool: Any = None
    pool_used: jax.Array | None = None


@struct.dataclass
class StepResult:
    """What one batched step returns besides the new state."""

    obs: Observation  # observation to act on next (after any reset)
    reward: jax.Array  # [N]
    terminated: jax.Array  # [N] bool: the episode ended in a terminal state
    truncated: jax.Array  # [N] bool: the episode hit the time limit and is not terminal
    final_obs: Observation  # observation the step reached, before any reset
    metrics: dict[str, jax.Array]  # the env's per-step metrics (reward terms etc.), [N] each
    # the `probe`'s per-step quantities of the state reached (e.g. locomotion: command, velocity,
    # power), [N, ...] each; empty without a probe. Unused outputs cost nothing in a compiled scan.
    probe: dict[str, jax.Array] = struct.field(default_factory=dict)


class Physics(Protocol):
    """Per-env physics: fields of the env's model drawn once per env (domain randomisation)."""

    def init(self, keys: jax.Array) -> dict[str, jax.Array]:
        """`[N]` keys -> `{model field: [N, ...]}`."""

    def bound(self, fields: dict[str, jax.Array]) -> contextlib.AbstractContextManager:
        """Inside the context the single env simulates with one env's `fields` (traced)."""


def strong_types(tree: Any) -> Any:
    """Drop JAX weak types (Brax and Playground produce some) so the state's signature never
    changes and the compiled iteration is not traced a second time."""
    return jax.tree.map(lambda x: jnp.asarray(x, x.dtype), tree)


def cast_like(tree: Any, reference: Any) -> Any:
    """`tree` with the dtypes of `reference` (same structure): a Playground env's `reset` returns
    some leaves in other dtypes than its `step`; matching them keeps one compiled step."""
    return jax.tree.map(lambda x, r: jnp.asarray(x, r.dtype), tree, reference)


@struct.dataclass
class VecEnv:
    """Pure reset/step functions over a batch of one environment.

    `observe(state) -> {group: array}` views the single env's observation as strl_jax's groups;
    `physics` (optional) gives each env its own model; `probe(state) -> {name: array}` (optional)
    measures per-step quantities the evaluation reports (e.g. velocity tracking and power).
    `components` names the parts of each group: `{group: ((name, size), ...)}`, where known;
    `component_shapes` gives the image components their `(C, H, W)` (flat in the observation).
    """

    env: Any = struct.field(pytree_node=False)
    num_envs: int = struct.field(pytree_node=False)
    episode_length: int = struct.field(pytree_node=False)
    observe: Callable[[Any], Observation] = struct.field(pytree_node=False)
    action_repeat: int = struct.field(pytree_node=False, default=1)
    clip_actions: float | None = struct.field(pytree_node=False, default=1.0)
    physics: Physics | None = struct.field(pytree_node=False, default=None)
    probe: Callable[[Any], dict] | None = struct.field(pytree_node=False, default=None)
    components: dict[str, tuple[tuple[str, int], ...]] = struct.field(pytree_node=False, default_factory=dict)
    # components that are images: name -> (channels, height, width) of the flat component (row-major)
    component_shapes: dict[str, tuple[int, ...]] = struct.field(pytree_node=False, default_factory=dict)
    task: str = struct.field(pytree_node=False, default="")
    auto_reset: str = struct.field(pytree_node=False, default="in_step")  # one of AUTO_RESETS
    termination_reward: float = struct.field(pytree_node=False, default=0.0)  # env.termination_reward
    # keys of the single env's `state.info` that an env keeps from one episode to its next (a
    # curriculum's level: strl_jax.envs.push_curriculum); every other key restarts with the episode
    carried_info: tuple[str, ...] = struct.field(pytree_node=False, default=())

    def __post_init__(self) -> None:
        if self.auto_reset not in AUTO_RESETS:
            raise ConfigError(f"auto_reset={self.auto_reset!r}: expected one of {', '.join(AUTO_RESETS)}")

    @property
    def action_size(self) -> int:
        return int(self.env.action_size)

    @property
    def dt(self) -> float:
        """Seconds of simulated time per strl_jax step (the env's control step x action_repeat)."""
        return float(self.env.dt) * self.action_repeat

    def observation_shapes(self) -> dict[str, tuple[int, ...]]:
        """Shape of one environment's observation in each group."""
        obs = jax.eval_shape(lambda key: self.observe(self.env.reset(key)), jax.random.PRNGKey(0))
        return {k: tuple(v.shape) for k, v in obs.items()}

    # ---- one env -----------------------------------------------------------------------
    def _single_env_functions(self) -> tuple[Callable, Callable]:
        """`(reset, step)` of one env, jitted once for every VecEnv on the same env (see
        `_SINGLE_ENV_FUNCTIONS`); neither depends on `num_envs` or `auto_reset`."""
        owners = (self.env, self.physics, self.probe, self.action_repeat)
        key = tuple(id(owner) for owner in owners[:3]) + (self.action_repeat,)
        found = _SINGLE_ENV_FUNCTIONS.get(key)
        if found is None:
            found = (
                jax.jit(self._reset_single, inline=True),
                jax.jit(self._step_single, inline=True),
                owners,
            )
            _SINGLE_ENV_FUNCTIONS[key] = found
        return found[0], found[1]

    def _bound(self, physics: dict) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext() if self.physics is None else self.physics.bound(physics)

    def _reset_single(self, key: jax.Array, physics: dict) -> Any:
        # named: profiles and lowered programs show where the env's reset is compiled
        with self._bound(physics), jax.named_scope(RESET_SCOPE):
            return self.env.reset(key)

    def _step_single(self, brax_state: Any, action: jax.Array, physics: dict) -> tuple[Any, ...]:
        """Step one env `action_repeat` times, summing rewards; terminal if any sub-step was.
        Returns `(state, reward, done, probe)`."""
        with self._bound(physics):
            if self.action_repeat == 1:
                nxt = self.env.step(brax_state, action)
                reward, done = nxt.reward, nxt.done
            else:

                def body(carry, _):
                    state, reward, done = carry
                    state = self.env.step(state, action)
                    return (state, reward + state.reward, jnp.maximum(done, state.done)), None

                zero = jnp.zeros_like(brax_state.reward)
                (nxt, reward, done), _ = jax.lax.scan(
                    body, (brax_state, zero, zero), None, length=self.action_repeat
                )
            probe = {} if self.probe is None else self.probe(nxt)
        return nxt, reward, done, probe

    # ---- the batch ---------------------------------------------------------------------
    def pending(self, key: jax.Array, first_env: jax.Array | int = 0) -> EnvState:
        """The envs before their first states: zeros shaped like the stepped state (no reset is
        traced), each env's physics and its first reset key.

        Env `i` draws from `fold_in(key, first_env + i)`: a shard of a larger batch (whose
        first global index is `first_env`) starts exactly like that part of the whole batch.
        """
        ids = jnp.asarray(first_env, jnp.int32) + jnp.arange(self.num_envs, dtype=jnp.int32)
        physics = {}
        if self.physics is not None:
            physics = self.physics.init(env_keys(jax.random.fold_in(key, PHYSICS_STREAM), ids))
        reset_key = env_keys(key, ids)
        reset_single, step_single = self._single_env_functions()
        reset = jax.eval_shape(jax.vmap(reset_single), reset_key, physics)
        # One signature for reset's and step's states: step's output types (no weak types).
        stepped = jax.eval_shape(
            jax.vmap(step_single), reset, jnp.zeros((self.num_envs, self.action_size)), physics
        )[0]
        blank = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), stepped)
        state = EnvState(
            brax_state=blank,
            step_count=jnp.zeros((self.num_envs,), jnp.int32),
            reset_key=reset_key,
            physics=physics,
        )
        if self.auto_reset == "pool":  # every row marked used: the next refresh draws them all
            state = state.replace(pool=blank, pool_used=jnp.ones((self.num_envs,), bool))
        return state

    def start(self, state: EnvState) -> tuple[EnvState, Observation]:
        """Every env in its first state: a `pending` state after a `refresh_pool` (with a pool;
        the pool rows are marked used, so the next refresh draws new ones), or drawn here."""
        if self.auto_reset == "pool":
            state = state.replace(
                brax_state=jax.tree.map(jnp.copy, state.pool), pool_used=jnp.ones_like(state.pool_used)
            )
        else:
            brax_state, reset_key = self._fresh_rows(
                jnp.ones((self.num_envs,), bool), state.reset_key, state.physics, state.brax_state
            )
            state = state.replace(brax_state=brax_state, reset_key=reset_key)
        return state, self.observe(state.brax_state)

    def reset(self, key: jax.Array, first_env: jax.Array | int = 0) -> tuple[EnvState, Observation]:
        """Reset all environments with independent random initial states (and physics): the
        same first states in every `auto_reset` mode (see `pending` for the keys)."""
        return self.start(self.refresh_pool(self.pending(key, first_env)))

    def _fresh_rows(self, mask: jax.Array, reset_key: jax.Array, physics: dict, otherwise: Any):
        """`(states, reset keys')`: a new initial state for the `mask`ed envs (each from its own
        next key), `otherwise` elsewhere. A reset costs about a step, so only masked rows reset."""
        split = jax.vmap(jax.random.split)(reset_key)
        states = where_rows(
            mask,
            lambda rows: cast_like(strong_types(jax.vmap(self._single_env_functions()[0])(*rows)), otherwise),
            (split[:, 0], physics),
            otherwise,
            reserved_rows(self.num_envs, 1 / 8),
        )
        return strong_types(states), jnp.where(mask[:, None], split[:, 1], reset_key)

    def refresh_pool(self, state: EnvState) -> EnvState:
        """Draw a new pool state for every env whose pool state a finished episode took (a
        program of its own, run between iterations; a no-op without a pool)."""
        if state.pool is None:
            return state
        pool, reset_key = self._fresh_rows(state.pool_used, state.reset_key, state.physics, state.pool)
        return state.replace(pool=pool, reset_key=reset_key, pool_used=jnp.zeros_like(state.pool_used))

    def random_episode_starts(
        self, state: EnvState, key: jax.Array, first_env: jax.Array | int = 0
    ) -> EnvState:
        """Each env's step counter drawn uniformly in `[0, episode_length)` (legged_gym's
        `init_at_random_ep_len`): the first time-outs spread over a whole episode instead of
        arriving together. Env `i` draws from its global index, as in `reset`."""
        ids = jnp.asarray(first_env, jnp.int32) + jnp.arange(self.num_envs, dtype=jnp.int32)
        keys = env_keys(jax.random.fold_in(key, EPISODE_START_STREAM), ids)
        draw = lambda k: jax.random.randint(k, (), 0, self.episode_length, jnp.int32)  # noqa: E731
        return state.replace(step_count=jax.vmap(draw)(keys))

    def step(self, state: EnvState, action: jax.Array) -> tuple[EnvState, StepResult]:
        """Advance every environment; finished ones restart from a fresh random state (from the
        pool with `auto_reset="pool"`; not at all with `"none"`)."""
        chex.assert_shape(action, (self.num_envs, self.action_size))
        if self.clip_actions is not None:
            action = jnp.clip(action, -self.clip_actions, self.clip_actions)
        step_single = self._single_env_functions()[1]
        stepped, reward, done, probe = jax.vmap(step_single)(state.brax_state, action, state.physics)
        stepped = strong_types(stepped)
        step_count = state.step_count + 1
        terminated = done > 0
        if self.termination_reward:
            reward = reward + jnp.asarray(self.termination_reward, reward.dtype) * terminated
        truncated = (step_count >= self.episode_length) & ~terminated
        finished = terminated | truncated
        final_obs = self.observe(stepped)

        reset_key, pool_used = state.reset_key, state.pool_used
        if self.auto_reset == "in_step":
            brax_state, reset_key = self._fresh_rows(finished, reset_key, state.physics, stepped)
        elif self.auto_reset == "pool":
            brax_state = select_rows(finished, state.pool, stepped)
            pool_used = pool_used | finished
        else:  # "none": a finished env stays before its last step, so its state stays finite
            brax_state = select_rows(finished, state.brax_state, stepped)
        if self.carried_info:
            info = {**brax_state.info, **{k: stepped.info[k] for k in self.carried_info}}
            brax_state = brax_state.replace(info=info)
        new_state = state.replace(
            brax_state=brax_state,
            step_count=jnp.where(finished, 0, step_count),
            reset_key=reset_key,
            pool_used=pool_used,
        )
        result = StepResult(
            obs=self.observe(brax_state),
            reward=reward,
            terminated=terminated,
            truncated=truncated,
            final_obs=final_obs,
            metrics=dict(stepped.metrics),
            probe=probe,
        )
        return new_state, result
