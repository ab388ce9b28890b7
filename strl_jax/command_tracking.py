"""How well a walking policy follows held commands, in the JAX env and in C MuJoCo alike.

A joystick policy is judged by what it is told: forward, sideways and turning commands, each held
for a whole episode (`strl_jax.envs.commands.with_command`) from the same starts in both
simulators, nominal physics and noise-free observations (`strl_jax.native_episodes`). Per
episode: the RMS errors of the base's xy velocity and yaw rate against the held command (base
frame: the frame of the task's commands), its length and whether it fell. One compiled JAX program
serves every command (the command is vmapped); the native episodes start from the JAX episodes'
initial states, on Go1's numpy twin (`hand`) or on the task's own code (`generic`).

`bench/walk_limits.py` measures a shipped policy over many starts and proposes the limits that
`tests/test_walk_examples.py` holds.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from strl_jax.envs.tasks import make_env_from_config
from strl_jax.errors import ConfigError
from strl_jax.native_episodes import (
    KEEP_START_COMMAND,
    NATIVE_PATHS,
    CommandProcess,
    Comparison,
    OnnxPolicy,
    first_episodes,
    generic_episode,
    generic_simulation,
    jax_rollout,
    native_episode,
    native_task_of,
    noise_level_keys,
    nominal_env_config,
    policy_entries,
    row,
)

# Forward 1 m/s, sideways 0.5 m/s, turning 1 rad/s: inside every Playground quadruped's and
# humanoid's command ranges, and far from standing (a standing robot's error is the command).
HELD_COMMANDS = ((1.0, 0.0, 0.0), (0.0, 0.5, 0.0), (0.0, 0.0, 1.0))


def jax_held_episodes(
    loaded: Any, commands: Sequence[Sequence[float]], envs: int, steps: int, seed: int
) -> dict:
    """`envs` episodes of `steps` steps per command in the JAX env (numpy, `[C, T, N, ...]`), one
    compiled program for every command, with the command in effect checked at every step."""
    env_cfg = nominal_env_config(loaded.cfg.env, steps, noise_level_keys(loaded.env.env))
    env = make_env_from_config(env_cfg, num_envs=envs)
    key = jax.random.PRNGKey(seed)

    def rollout(params, normalizers, command):
        return jax_rollout(env, loaded.actor, params, normalizers, key, command)

    held = jnp.asarray(commands, jnp.float32)
    batched = jax.jit(jax.vmap(rollout, in_axes=(None, None, 0)))
    out = jax.device_get(batched(loaded.params, loaded.normalizers, held))
    in_effect = np.asarray(out["command"])
    expected = np.asarray(held)[:, None, None, :]
    if not np.allclose(in_effect, expected, atol=1e-6):
        worst = int(np.argmax(np.abs(in_effect - expected).max(axis=(1, 2, 3))))
        raise ConfigError(f"the JAX env did not hold the command {list(commands[worst])} for its episodes")
    return out


def held_command_episodes(
    loaded: Any,
    policy: OnnxPolicy,
    commands: Sequence[Sequence[float]] = HELD_COMMANDS,
    envs: int = 8,
    steps: int = 500,
    seed: int = 0,
    native: str = "generic",
) -> list[Comparison]:
    """Per command, `envs` episodes of at most `steps` steps with it held: in the JAX env, then in
    C MuJoCo (`native`: one of `NATIVE_PATHS`) from the JAX episodes' initial states."""
    if native not in NATIVE_PATHS:
        raise ConfigError(f"unknown native path {native!r}; valid: {list(NATIVE_PATHS)}")
    begin = time.perf_counter()
    jax_steps = jax_held_episodes(loaded, commands, envs, steps, seed)
    jax_seconds = (time.perf_counter() - begin) / len(commands)
    task = native_task_of(loaded, steps) if native == "hand" else None
    if task is None:  # one simulation for every command: each start holds its own
        sim = generic_simulation(loaded, envs, steps, KEEP_START_COMMAND)
        entries = policy_entries(loaded, sim.vec.components.get("policy", ()), policy.layout)
    out = []
    for i, command in enumerate(commands):
        steps_i = {k: np.asarray(v)[i] for k, v in jax_steps.items() if k != "start"}
        begin = time.perf_counter()
        held = np.asarray(command, np.float64)
        if task is not None:
            rng = np.random.default_rng(seed)
            starts = zip(steps_i["qpos"], steps_i["qvel"], strict=True)
            process = CommandProcess(task, rng, fixed=held)
            native_metrics = [native_episode(task, policy, start, process) for start in starts]
        else:
            start = row(jax_steps["start"], i)
            native_metrics = [generic_episode(sim, policy, row(start, e), entries) for e in range(envs)]
        native_seconds = time.perf_counter() - begin
        out.append(Comparison(native_metrics, first_episodes(steps_i), native_seconds, jax_seconds))
    return out


def worst_errors(episodes: Sequence[dict[str, float]]) -> tuple[float, float]:
    """The largest linear (m/s) and yaw-rate (rad/s) RMS error of any of `episodes`."""
    return max(e["lin_vel_rms"] for e in episodes), max(e["yaw_rate_rms"] for e in episodes)
