"""A velocity command held for a whole episode (`strl_jax.envs.commands`, `play --command`): in
the env's info from the first state on, never resampled, and in every observation entry a
`command` component names. Runs on test_mutex's joystick-like env (no physics to compile)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_mutex import CommandEnv, command_env
from tiny_config import tiny

from strl_jax.configs.loader import resolve_config
from strl_jax.envs import make_env_from_config
from strl_jax.envs.commands import NEVER, RESAMPLE_COUNTER, keeping_command, with_command
from strl_jax.errors import ConfigError

COMMAND = (0.5, 0.0, -1.0)


def test_held_command_is_in_effect_and_observed_from_the_first_step():
    env = with_command(command_env(2, 20), COMMAND)
    state, obs = env.reset(jax.random.PRNGKey(0))
    np.testing.assert_allclose(obs["policy"][:, 1:4], np.tile(COMMAND, (2, 1)))
    step = jax.jit(env.step)
    for t in range(1, 6):
        state, res = step(state, jnp.ones((2, 1)))
        info = state.brax_state.info
        np.testing.assert_allclose(info["command"], np.tile(COMMAND, (2, 1)))
        np.testing.assert_array_equal(info[RESAMPLE_COUNTER], NEVER)
        np.testing.assert_allclose(res.obs["policy"][:, 1:4], np.tile(COMMAND, (2, 1)))
        np.testing.assert_allclose(res.obs["policy"][:, 0], float(t))  # the env's own state runs on
        # the env resamples (adds 1) inside its step: the reward saw the held command
        np.testing.assert_allclose(res.reward, COMMAND[0] + 1.0)
    assert env.observation_shapes() == {"policy": (4,), "critic": (4,)}


class InPlaceCommandEnv(CommandEnv):
    """CommandEnv whose step also writes the new command into the state it was given, as
    Playground's tasks write into `state.info`."""

    def step(self, state, action):
        nxt = super().step(state, action)
        state.info["command"] = nxt.info["command"]
        return nxt


@pytest.mark.parametrize("in_place", [False, True])
def test_keeping_the_start_command_holds_whichever_command_the_start_held(in_place):
    """`keeping_command`: episodes started from `with_command(env, c)`'s states hold `c` (the env's
    own step would change it, in place or not), each in the same compiled step, and observe it."""
    env = command_env(2, 20)
    env = env.replace(env=InPlaceCommandEnv()) if in_place else env
    kept = keeping_command(env)
    traces = []

    def step(state, action):
        traces.append(1)
        return kept.step(state, action)

    step = jax.jit(step)
    for command in (COMMAND, (0.0, 0.3, 0.7)):
        state, _ = with_command(env, command).reset(jax.random.PRNGKey(0))
        for _ in range(3):
            state, res = step(state, jnp.ones((2, 1)))
            np.testing.assert_allclose(state.brax_state.info["command"], np.tile(command, (2, 1)))
            np.testing.assert_array_equal(state.brax_state.info[RESAMPLE_COUNTER], NEVER)
            np.testing.assert_allclose(res.obs["policy"][:, 1:4], np.tile(command, (2, 1)))
    assert len(traces) == 1


def test_a_task_without_a_joystick_command_is_refused_by_name():
    env = make_env_from_config(resolve_config("inverted_pendulum", overrides=tiny()).env, num_envs=1)
    refused = r"task 'inverted_pendulum' has no info\['command'\].*Go1JoystickFlatTerrain"
    with pytest.raises(ConfigError, match=refused):
        with_command(env, COMMAND)
    with pytest.raises(ConfigError, match=r"info\['command'\] of shape \(3,\); a held command of 2 entries"):
        with_command(command_env(1, 5), (1.0, 0.0))
    with pytest.raises(
        ConfigError, match=r"a held command is one vector \(vx, vy, yaw rate\), got shape \(1, 3\)"
    ):
        with_command(command_env(1, 5), [COMMAND])
