"""A scripted environment for the parity tests: every step's observations, rewards, terminations
and time-outs are fixed in advance and the actions are ignored, so strl_jax's learner and rsl_rl's
runner, each stepping its own side of it, see exactly the same episodes.

`Script` holds the arrays; `ScriptedVecEnv` plays them to strl_jax's learner as a `VecEnv`
(time-outs as `truncated`, the observation a finished step reached as `final_obs`);
`ScriptedRslRlEnv` plays them to rsl_rl's `OnPolicyRunner` as an `rsl_rl.env.VecEnv` (time-outs
as `extras["time_outs"]`, as IsaacLab's `RslRlVecEnvWrapper` reports them).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import torch
from flax import struct
from rsl_rl.env import VecEnv as RslRlVecEnv
from tensordict import TensorDict

from strl_jax.envs.vec_env import EnvState, StepResult, VecEnv


@dataclasses.dataclass(frozen=True, eq=False)
class Script:
    """What the env does at each of `steps` steps, for `num_envs` envs.

    obs: group -> `[steps + 1, N, size]`, the observation to act on before each step (after
    any reset) and after the last; final_obs: group -> `[steps, N, size]`, the observation each
    step reached before any reset (equal to the next `obs` where no episode ended).
    """

    obs: dict[str, np.ndarray]
    final_obs: dict[str, np.ndarray]
    rewards: np.ndarray  # [steps, N] float32
    terminated: np.ndarray  # [steps, N] bool
    truncated: np.ndarray  # [steps, N] bool: time-outs, never also terminated
    action_size: int
    dt: float = 0.02

    @property
    def steps(self) -> int:
        return int(self.rewards.shape[0])

    @property
    def num_envs(self) -> int:
        return int(self.rewards.shape[1])

    @property
    def dones(self) -> np.ndarray:
        return self.terminated | self.truncated

    def observe(self, brax_state: dict) -> dict[str, jax.Array]:
        """The observation groups at each env's step index `brax_state["t"]` ([N] int32)."""
        envs = jnp.arange(self.num_envs)
        return {g: jnp.asarray(v)[brax_state["t"], envs] for g, v in self.obs.items()}


def random_script(
    seed: int, steps: int, num_envs: int, groups: dict[str, int], action_size: int, done_prob: float = 0.2
) -> Script:
    """Normal observations and rewards; of the episodes that end, about half time out."""
    rng = np.random.default_rng(seed)

    def normal(*shape: int) -> np.ndarray:
        return rng.normal(size=shape).astype(np.float32)

    dones = rng.random((steps, num_envs)) < done_prob
    truncated = dones & (rng.random((steps, num_envs)) < 0.5)
    obs = {g: normal(steps + 1, num_envs, size) for g, size in groups.items()}
    final_obs = {
        g: np.where(dones[..., None], normal(steps, num_envs, size), obs[g][1:]) for g, size in groups.items()
    }
    return Script(
        obs=obs,
        final_obs=final_obs,
        rewards=normal(steps, num_envs),
        terminated=dones & ~truncated,
        truncated=truncated,
        action_size=action_size,
    )


@struct.dataclass
class ScriptedVecEnv(VecEnv):
    """strl_jax's side: a `VecEnv` (its `env` a `Script`) whose step plays the script back from a
    step index kept in the env state; nothing is reset or simulated."""

    def observation_shapes(self) -> dict[str, tuple[int, ...]]:
        return {g: tuple(v.shape[2:]) for g, v in self.env.obs.items()}

    def pending(self, key: jax.Array, first_env: jax.Array | int = 0) -> EnvState:
        n = self.num_envs
        zeros = jnp.zeros((n,), jnp.int32)
        return EnvState(brax_state={"t": zeros}, step_count=zeros, reset_key=jax.random.split(key, n))

    def start(self, state: EnvState) -> tuple[EnvState, dict]:
        return state, self.observe(state.brax_state)

    def step(self, state: EnvState, action: jax.Array) -> tuple[EnvState, StepResult]:
        del action  # scripted: the same episodes whatever the policy does
        script: Script = self.env
        t = state.brax_state["t"]
        envs = jnp.arange(self.num_envs)
        terminated = jnp.asarray(script.terminated)[t, envs]
        truncated = jnp.asarray(script.truncated)[t, envs]
        finished = terminated | truncated
        result = StepResult(
            obs=self.observe({"t": t + 1}),
            reward=jnp.asarray(script.rewards)[t, envs],
            terminated=terminated,
            truncated=truncated,
            final_obs={g: jnp.asarray(v)[t, envs] for g, v in script.final_obs.items()},
            metrics={},
        )
        step_count = jnp.where(finished, 0, state.step_count + 1)
        return state.replace(brax_state={"t": t + 1}, step_count=step_count), result


def scripted_vec_env(script: Script) -> ScriptedVecEnv:
    return ScriptedVecEnv(
        env=script,
        num_envs=script.num_envs,
        episode_length=script.steps,
        observe=script.observe,
        clip_actions=None,
    )


class ScriptedRslRlEnv(RslRlVecEnv):
    """rsl_rl's side: `get_observations` and `step` play the script back; `dones` are
    terminations and time-outs, `extras["time_outs"]` the time-outs."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.num_envs, self.num_actions = script.num_envs, script.action_size
        self.max_episode_length = script.steps
        self.episode_length_buf = torch.zeros(script.num_envs, dtype=torch.long)
        self.device, self.cfg = "cpu", {}
        self.t = 0

    def get_observations(self) -> TensorDict:
        obs = {g: torch.from_numpy(v[self.t].copy()) for g, v in self.script.obs.items()}
        return TensorDict(obs, batch_size=[self.num_envs])

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict]:
        del actions
        t, s = self.t, self.script
        self.t += 1
        rewards = torch.from_numpy(s.rewards[t].copy())
        dones = torch.from_numpy(s.dones[t].copy())
        return self.get_observations(), rewards, dones, {"time_outs": torch.from_numpy(s.truncated[t].copy())}
