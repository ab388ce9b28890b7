"""Run outputs under rsl_rl's names: TensorBoard scalars, `metrics.jsonl`, console summaries."""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from tensorboardX import SummaryWriter

# Host-side metrics.jsonl keys -> TensorBoard tags, as rsl_rl's OnPolicyRunner names them. The
# learner's scalars are tagged `<section>/<name>` with the sections the learner declares.
TENSORBOARD_TAGS = {
    "fps": "Perf/total_fps",
    "iteration_time": "Perf/iteration_time",
    "collection_time": "Perf/collection_time",
    "learning_time": "Perf/learning_time",
    "mean_reward": "Train/mean_reward",
    "mean_episode_length": "Train/mean_episode_length",
    "mean_step_reward": "Train/mean_step_reward",
    "eval_reward": "Eval/episode_reward",
    "eval_episode_length": "Eval/episode_length",
    "eval_velrmsd": "Eval/velrmsd",  # joystick tasks: st_rl's locomotion evaluation
    "eval_CoT": "Eval/CoT",
}
NOT_LOGGED_TO_TENSORBOARD = ("iteration", "env_steps", "wall_time", "episodes")
# Console labels of rsl_rl's own numbers; any other scalar is printed under its own name.
CONSOLE_LABELS = {
    "value_function": "Mean value_function loss:",
    "surrogate": "Mean surrogate loss:",
    "entropy": "Mean entropy:",
    "kl": "Mean KL:",
    "learning_rate": "Learning rate:",
}
HOST_KEYS = (
    "mean_reward",
    "mean_episode_length",
    "eval_reward",
    "eval_episode_length",
    "eval_velrmsd",
    "eval_CoT",
)
ROW_KEYS_OF_THE_HOST = (*TENSORBOARD_TAGS, *NOT_LOGGED_TO_TENSORBOARD, "mean_noise_std")

TIME_KEYS = ("wall_time", "fps", "iteration_time", "collection_time", "learning_time")


def format_duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "--:--:--"
    seconds = int(round(seconds))
    return f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class RunLogger:
    """Writes one row per logged iteration to `metrics.jsonl` and TensorBoard, and talks to the console.

    `enabled=False` (every process but the first of a multi-host run) writes and prints nothing.
    """

    def __init__(
        self,
        log_dir: Path,
        max_iterations: int,
        start_iteration: int = 0,
        verbose: bool = True,
        enabled: bool = True,
        sections: dict[str, str] | None = None,
    ):
        self.log_dir = Path(log_dir)
        self.sections = dict(sections or {})
        self.max_iterations = max_iterations
        self.start_iteration = start_iteration
        self.enabled = enabled
        self.verbose = verbose and enabled
        self.writer = SummaryWriter(str(self.log_dir), flush_secs=10) if enabled else None
        self.jsonl = open(self.log_dir / "metrics.jsonl", "a", buffering=1) if enabled else None  # noqa: SIM115 - closed in close()
        self.start_time = time.time()
        self.show_progress = self.verbose and sys.stderr.isatty()

    def write(self, row: dict[str, Any]) -> None:
        """Append a row (must hold `iteration` and `env_steps`) to every sink."""
        if not self.enabled:
            return
        self.jsonl.write(json.dumps(row, sort_keys=False) + "\n")
        step = int(row["env_steps"])
        for key, value in row.items():
            if not isinstance(value, int | float) or key in NOT_LOGGED_TO_TENSORBOARD:
                continue
            tag = self.tag(key)
            self.writer.add_scalar(tag, value, int(row["iteration"]))
            if tag.startswith(("Train/", "Eval/")):
                self.writer.add_scalar(tag + "/env_steps", value, step)

    def tag(self, key: str) -> str:
        """TensorBoard tag of a row key: rsl_rl's for the host's numbers, `<section>/<name>` for
        the learner's (section `Train` unless the learner or its part names one)."""
        if key in TENSORBOARD_TAGS:
            return TENSORBOARD_TAGS[key]
        if key.startswith("episode/"):
            return "Episode/" + key[len("episode/") :]
        return f"{self.sections.get(key, 'Train')}/{key}"

    def progress(self, iteration: int) -> None:
        """A one-line progress bar with ETA on an interactive terminal."""
        if not self.show_progress:
            return
        done = iteration - self.start_iteration
        total = self.max_iterations - self.start_iteration
        elapsed = time.time() - self.start_time
        eta = elapsed / done * (total - done) if done else float("nan")
        width = 30
        filled = int(width * done / max(total, 1))
        sys.stderr.write(
            f"\r[{'#' * filled}{'.' * (width - filled)}] {iteration}/{self.max_iterations} "
            f"elapsed {format_duration(elapsed)} ETA {format_duration(eta)}"
        )
        sys.stderr.flush()

    def summary(self, row: dict[str, Any]) -> None:
        """rsl_rl-style block of the latest numbers."""
        if not self.verbose:
            return
        done = row["iteration"] - self.start_iteration
        elapsed = time.time() - self.start_time
        eta = elapsed / done * (self.max_iterations - row["iteration"]) if done else float("nan")
        width = 80
        lines = [
            "#" * width,
            f"Learning iteration {row['iteration']}/{self.max_iterations}".center(width),
            "",
        ]

        def add(label: str, value: Any) -> None:
            lines.append(f"{label:>35} {value}")

        add("Computation:", f"{row['fps']:.0f} steps/s")
        add("Mean action noise std:", f"{row['mean_noise_std']:.3f}")
        for key, value in row.items():
            if key not in ROW_KEYS_OF_THE_HOST and not key.startswith("episode/") and value is not None:
                add(CONSOLE_LABELS.get(key, f"{key}:"), f"{value:.4g}")
        labels = (
            "Mean reward:",
            "Mean episode length:",
            "Eval episode reward:",
            "Eval episode length:",
            "Eval velocity RMSD:",
            "Eval cost of transport:",
        )
        for key, label in zip(HOST_KEYS, labels, strict=True):
            if row.get(key) is not None:
                add(label, f"{row[key]:.4g}")
        for key, value in row.items():
            if key.startswith("episode/"):
                add(f"Episode {key[len('episode/') :]}:", f"{value:.4g}")
        lines.append("-" * width)
        add("Total timesteps:", row["env_steps"])
        add("Iteration time:", f"{row['iteration_time']:.2f}s")
        add("Time elapsed:", format_duration(elapsed))
        add("ETA:", format_duration(eta))
        if self.show_progress:
            sys.stderr.write("\r" + " " * 100 + "\r")
        print("\n".join(lines), flush=True)

    def close(self) -> None:
        if self.show_progress:
            sys.stderr.write("\n")
        if self.enabled:
            self.jsonl.close()
            self.writer.close()
