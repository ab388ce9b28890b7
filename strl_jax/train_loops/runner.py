"""The host loop: build, compile, iterate, evaluate, log. All numerics run inside jit."""

from __future__ import annotations

import dataclasses
import datetime
import os
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np
import yaml

from strl_jax.configs.loader import config_to_dict
from strl_jax.configs.schema import TrainConfig
from strl_jax.envs.brax_env import make_env_from_config
from strl_jax.train_loops.iteration import jit_evaluate, jit_iteration, make_ppo_learner
from strl_jax.train_loops.logging import RunLogger


@dataclasses.dataclass
class TrainResult:
    """What a finished run hands back to Python callers (the CLI writes the same to disk)."""

    log_dir: Path
    rows: list[dict[str, Any]]
    train_state: Any
    rollout_state: Any

    @property
    def last_eval_reward(self) -> float | None:
        evals = [r["eval_reward"] for r in self.rows if "eval_reward" in r]
        return evals[-1] if evals else None


def enable_compilation_cache(path: str | None = None) -> None:
    """Reuse compiled XLA programs across processes (big win: compiles take tens of seconds)."""
    path = path or os.environ.get("STRL_JAX_CACHE_DIR") or str(Path.home() / ".cache" / "strl_jax" / "xla")
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


def default_log_dir(cfg: TrainConfig) -> Path:
    stamp = datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    name = f"{stamp}_{cfg.runner.experiment_name}" if cfg.runner.experiment_name else stamp
    return Path("runs") / cfg.env.task / name


def steps_per_iteration(cfg: TrainConfig) -> int:
    """Policy steps collected per iteration (rsl_rl's 'timesteps'; Brax counts x action_repeat)."""
    return cfg.env.num_envs * cfg.runner.num_steps_per_env


def _row_from_metrics(
    iteration: int, cfg: TrainConfig, metrics: dict, window: dict, wall: float, dt: float
) -> dict[str, Any]:
    """Turn one iteration's device metrics (already on host) into a metrics.jsonl row."""
    episodes = window["episodes"]
    row: dict[str, Any] = {
        "iteration": iteration,
        "env_steps": iteration * steps_per_iteration(cfg),
        "wall_time": round(wall, 4),
        "iteration_time": round(dt, 4),
        "fps": steps_per_iteration(cfg) / dt if dt > 0 else 0.0,
        "mean_reward": window["return_sum"] / episodes if episodes else None,
        "mean_episode_length": window["length_sum"] / episodes if episodes else None,
        "episodes": int(episodes),
        "mean_step_reward": float(metrics["reward_sum"]) / steps_per_iteration(cfg),
    }
    for key in ("surrogate", "value_function", "entropy", "kl", "learning_rate", "mean_noise_std"):
        row[key] = float(metrics[key])
    if episodes:
        for key, value in window["metrics"].items():
            row[f"episode/{key}"] = value / episodes
    return row


def train(cfg: TrainConfig, log_dir: str | Path | None = None, verbose: bool = True) -> TrainResult:
    """Train PPO as configured, writing config.yaml, metrics.jsonl and TensorBoard to `log_dir`."""
    if cfg.runner.compile_cache:
        enable_compilation_cache()
    log_dir = Path(log_dir or cfg.runner.log_dir or default_log_dir(cfg))
    log_dir.mkdir(parents=True, exist_ok=True)
    (log_dir / "config.yaml").write_text(yaml.safe_dump(config_to_dict(cfg), sort_keys=False))

    env = make_env_from_config(cfg.env)
    learner = make_ppo_learner(env, cfg)
    iteration_fn = jit_iteration(learner)
    evaluate_fn = None
    if cfg.runner.eval_interval > 0:
        evaluate_fn = jit_evaluate(learner, make_env_from_config(cfg.env, cfg.runner.num_eval_envs))
    key = jax.random.PRNGKey(cfg.seed)
    key, eval_key = jax.random.split(key)
    train_state, rollout_state = jax.jit(learner.init)(key)

    logger = RunLogger(log_dir, cfg.runner.max_iterations, verbose=verbose)
    rows: list[dict[str, Any]] = []
    window = _empty_window()
    start = time.time()
    last = start
    try:
        for iteration in range(1, cfg.runner.max_iterations + 1):
            train_state, rollout_state, metrics = iteration_fn(train_state, rollout_state)
            metrics = jax.device_get(metrics)
            now = time.time()
            _accumulate(window, metrics)
            is_last = iteration == cfg.runner.max_iterations
            if iteration % cfg.runner.log_interval == 0 or is_last:
                row = _row_from_metrics(iteration, cfg, metrics, window, now - start, now - last)
                if evaluate_fn is not None and (iteration % cfg.runner.eval_interval == 0 or is_last):
                    eval_metrics = jax.device_get(
                        evaluate_fn(train_state.params, train_state.normalizers, jax.random.fold_in(eval_key, iteration))
                    )
                    row["eval_reward"] = float(eval_metrics["episode_reward"])
                    row["eval_episode_length"] = float(eval_metrics["episode_length"])
                    row["wall_time"] = round(time.time() - start, 4)
                logger.write(row)
                rows.append(row)
                if iteration % cfg.runner.print_interval == 0 or is_last or iteration == 1:
                    logger.summary(row)
                window = _empty_window()
            logger.progress(iteration)
            last = time.time()
    finally:
        logger.close()
    return TrainResult(log_dir=log_dir, rows=rows, train_state=train_state, rollout_state=rollout_state)


def _empty_window() -> dict[str, Any]:
    return {"episodes": 0.0, "return_sum": 0.0, "length_sum": 0.0, "metrics": {}}


def _accumulate(window: dict[str, Any], metrics: dict) -> None:
    """Sum completed-episode statistics over the iterations of one log interval."""
    for key in ("episodes", "return_sum", "length_sum"):
        window[key] += float(metrics[key])
    for key, value in metrics["metrics"].items():
        window["metrics"][key] = window["metrics"].get(key, 0.0) + float(np.asarray(value))
