"""metrics.jsonl rows: one iteration's device metrics (already on the host) and the logging
window of completed episodes, under rsl_rl's names, and when the console prints them."""

from __future__ import annotations

from typing import Any

import numpy as np

from strl_jax.configs.schema import TrainConfig


def steps_per_iteration(cfg: TrainConfig) -> int:
    """Policy steps collected per iteration (rsl_rl's 'timesteps'; Brax counts x action_repeat)."""
    return cfg.env.num_envs * cfg.runner.num_steps_per_env


def empty_window() -> dict[str, Any]:
    return {"episodes": 0.0, "return_sum": 0.0, "length_sum": 0.0, "metrics": {}}


def row_from_metrics(
    iteration: int,
    cfg: Any,
    metrics: dict,
    window: dict,
    wall: float,
    dt: float,
    dataset_iterations: int = 0,
) -> dict[str, Any]:
    """Turn one iteration's device metrics (already on host) into a metrics.jsonl row: the
    episode statistics of the logging window, then every scalar the learner reports.
    `dataset_iterations` learned from a replayed dataset: they took no env steps."""
    episodes = window["episodes"]
    row: dict[str, Any] = {
        "iteration": iteration,
        "env_steps": (iteration - dataset_iterations) * steps_per_iteration(cfg),
        "wall_time": round(wall, 4),
        "iteration_time": round(dt, 4),
        "fps": steps_per_iteration(cfg) / dt if dt > 0 else 0.0,
        "mean_reward": window["return_sum"] / episodes if episodes else None,
        "mean_episode_length": window["length_sum"] / episodes if episodes else None,
        "episodes": int(episodes),
        "mean_step_reward": float(metrics["rollout"]["reward_sum"]) / steps_per_iteration(cfg),
    }
    row.update({key: float(value) for key, value in metrics["scalars"].items()})
    if episodes:
        for key, value in window["metrics"].items():
            row[f"episode/{key}"] = value / episodes
    return row


def accumulate(window: dict[str, Any], metrics: dict) -> None:
    """Sum completed-episode statistics over the iterations of one log interval."""
    rollout = metrics["rollout"]
    for key in ("episodes", "return_sum", "length_sum"):
        window[key] += float(rollout[key])
    for key, value in rollout["metrics"].items():
        window["metrics"][key] = window["metrics"].get(key, 0.0) + float(np.asarray(value))


def printing(runner: Any, iteration: int, start_iteration: int) -> bool:
    """Console summaries: every `print_interval`, the first and the last logged iteration."""
    logged = iteration % runner.log_interval == 0 or iteration == runner.max_iterations
    return logged and (
        iteration % runner.print_interval == 0
        or iteration == runner.max_iterations
        or iteration == start_iteration + 1
    )
