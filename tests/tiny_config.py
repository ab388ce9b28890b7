"""The tiny inverted_pendulum run many tests share (16 envs, [16] networks, 8 steps x 2 minibatches):
compiles in seconds; tests add their own overrides after it (later overrides win).

No evaluation by default: its program is a third of a tiny run's compile time, and only the tests
that check evaluation (or its rows) turn it on (`runner.eval_interval=3`)."""

from __future__ import annotations

TINY = [
    "env.num_envs=16",
    "env.episode_length=50",
    "policy.actor_hidden_dims=[16]",
    "policy.critic_hidden_dims=[16]",
    "runner.num_steps_per_env=8",
    "algorithm.num_mini_batches=2",
    "algorithm.num_learning_epochs=2",
    "runner.num_eval_envs=4",
    "runner.eval_interval=0",
    "runner.save_interval=2",
    "runner.max_checkpoints_to_keep=2",
    "runner.print_interval=1000",
]


def tiny(*overrides: str) -> list[str]:
    return [*TINY, *overrides]
