"""Run outputs under rsl_rl's names: TensorBoard scalars (and W&B or Neptune), `metrics.jsonl`,
console summaries and a progress line between them."""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from strl_jax.records.remote_writers import make_remote_writer
from strl_jax.train_loops.evaluation import LOCOMOTION_METRICS


def import_summary_writer() -> type:
    """tensorboardX's `SummaryWriter`, imported without torch where torch is not loaded yet:
    tensorboardX imports an installed torch only to accept torch tensors, ~180 MiB of resident
    memory a run never uses (its scalars are floats)."""
    if "torch" in sys.modules:
        from tensorboardX import SummaryWriter
    else:
        sys.modules["torch"] = None  # `import torch` raises ImportError, which tensorboardX expects
        try:
            from tensorboardX import SummaryWriter
        finally:
            del sys.modules["torch"]
    return SummaryWriter


SummaryWriter = import_summary_writer()

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
    # joystick tasks: st_rl's locomotion evaluation (`train_loops.evaluation.locomotion_summary`)
    **{f"eval_{name}": f"Eval/{name}" for name in LOCOMOTION_METRICS},
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
    *(f"eval_{name}" for name in LOCOMOTION_METRICS),
)
ROW_KEYS_OF_THE_HOST = (*TENSORBOARD_TAGS, *NOT_LOGGED_TO_TENSORBOARD, "mean_noise_std")

TIME_KEYS = ("wall_time", "fps", "iteration_time", "collection_time", "learning_time")


PROGRESS_INTERVAL_S = 30.0  # plain progress lines (not a terminal): at most one per this many seconds
BAR_WIDTH = 30


def format_duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "--:--:--"
    seconds = int(round(seconds))
    return f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def row_scalars(row: dict[str, Any], tag: Callable[[str], str]) -> tuple[dict[str, float], dict[str, float]]:
    """A row's scalars by TensorBoard tag: `(at the iteration, at the env step)`, the second the
    `<tag>/env_steps` copies of the Train/ and Eval/ numbers."""
    scalars = {
        tag(key): value
        for key, value in row.items()
        if isinstance(value, int | float) and key not in NOT_LOGGED_TO_TENSORBOARD
    }
    env_scalars = {f"{t}/env_steps": v for t, v in scalars.items() if t.startswith(("Train/", "Eval/"))}
    return scalars, env_scalars


def iteration_rate(anchor: tuple[int, float] | None, iteration: int, now: float) -> float:
    """Iterations per second since `anchor` (the first iteration's end: it holds the compilation,
    which would inflate the ETA); NaN until a second iteration is done."""
    if anchor is None or iteration <= anchor[0] or now <= anchor[1]:
        return float("nan")
    return (iteration - anchor[0]) / (now - anchor[1])


def progress_text(
    iteration: int, max_iterations: int, elapsed: float, rate: float, steps_per_iteration: int | None
) -> str:
    """`iteration 40/100  elapsed 00:01:23  ETA 00:02:05  12,345 steps/s` (steps/s once known)."""
    eta = (max_iterations - iteration) / rate if rate > 0 else float("nan")
    text = (
        f"iteration {iteration}/{max_iterations}  elapsed {format_duration(elapsed)}  "
        f"ETA {format_duration(eta)}"
    )
    if steps_per_iteration and rate > 0:
        text += f"  {rate * steps_per_iteration:,.0f} steps/s"
    return text


def progress_bar(done: int, total: int, text: str, width: int = BAR_WIDTH) -> str:
    """tqdm-style `[#######.......]  40% <text>` for a terminal line."""
    fraction = min(max(done / total, 0.0), 1.0) if total > 0 else 1.0
    filled = int(width * fraction)
    return f"[{'#' * filled}{'.' * (width - filled)}] {fraction:4.0%}  {text}"


class RunLogger:
    """Writes one row per logged iteration to `metrics.jsonl` and TensorBoard (and W&B or Neptune),
    and talks to the console.

    `enabled=False` (every process but the first of a multi-host run) writes and prints nothing.
    `backend` is `runner.logger`: `wandb` and `neptune` also log every TensorBoard scalar to a
    W&B/Neptune run with `config` attached (offline into the log folder without credentials).
    Between summaries a terminal shows a progress bar; elsewhere a plain progress line is printed
    at most every `progress_interval_s` seconds of `clock`.
    """

    def __init__(
        self,
        log_dir: Path,
        max_iterations: int,
        start_iteration: int = 0,
        verbose: bool = True,
        enabled: bool = True,
        sections: dict[str, str] | None = None,
        *,
        backend: str = "tensorboard",
        project: str = "strl_jax",
        config: dict[str, Any] | None = None,
        progress_interval_s: float = PROGRESS_INTERVAL_S,
        clock: Callable[[], float] = time.time,
        interactive: bool | None = None,
    ):
        self.log_dir = Path(log_dir)
        self.sections = dict(sections or {})
        self.max_iterations = max_iterations
        self.start_iteration = start_iteration
        self.enabled = enabled
        self.verbose = verbose and enabled
        self.config = dict(config or {})
        self.remote = (
            make_remote_writer(backend, self.log_dir, project, self.config, start_iteration > 0, self.verbose)
            if enabled
            else None
        )
        self.writer = SummaryWriter(str(self.log_dir), flush_secs=10) if enabled else None
        self.jsonl = open(self.log_dir / "metrics.jsonl", "a", buffering=1) if enabled else None  # noqa: SIM115 - closed in close()
        if self.writer is not None and self.config:
            self.writer.add_text("config", config_markdown(self.config), global_step=start_iteration)
        self.clock = clock
        self.start_time = clock()
        self.interactive = sys.stderr.isatty() if interactive is None else interactive
        self.show_progress = self.verbose and self.interactive
        self.progress_interval_s = progress_interval_s
        self._anchor: tuple[int, float] | None = None
        self._last_line_time = self.start_time
        self._summary_iteration: int | None = None
        self._bar_length = 0
        self._steps_per_iteration: int | None = None

    def write(self, row: dict[str, Any]) -> None:
        """Append a row (must hold `iteration` and `env_steps`) to every sink."""
        if not self.enabled:
            return
        self.jsonl.write(json.dumps(row, sort_keys=False) + "\n")
        iteration, step = int(row["iteration"]), int(row["env_steps"])
        if iteration > 0:
            self._steps_per_iteration = step // iteration
        scalars, env_scalars = row_scalars(row, self.tag)
        for tag, value in scalars.items():
            self.writer.add_scalar(tag, value, iteration)
        for tag, value in env_scalars.items():
            self.writer.add_scalar(tag, value, step)
        if self.remote is not None:
            self.remote.log(scalars, env_scalars, iteration, step)

    def save_files(self, paths: list[Path]) -> None:
        """Upload files (the git diffs) to the W&B/Neptune run; TensorBoard has no place for them."""
        if self.remote is not None:
            self.remote.save_files([Path(p) for p in paths])

    def tag(self, key: str) -> str:
        """TensorBoard tag of a row key: rsl_rl's for the host's numbers, `<section>/<name>` for
        the learner's (section `Train` unless the learner or its part names one)."""
        if key in TENSORBOARD_TAGS:
            return TENSORBOARD_TAGS[key]
        if key.startswith("episode/"):
            return "Episode/" + key[len("episode/") :]
        return f"{self.sections.get(key, 'Train')}/{key}"

    def progress(self, iteration: int) -> None:
        """A one-line progress bar with ETA on a terminal; elsewhere a plain line now and then (a
        log file gets neither `\\r` nor a line per iteration)."""
        if not self.verbose:
            return
        now = self.clock()
        if self._anchor is None:
            self._anchor = (iteration, now)
        rate = iteration_rate(self._anchor, iteration, now)
        text = progress_text(
            iteration, self.max_iterations, now - self.start_time, rate, self._steps_per_iteration
        )
        if self.show_progress:
            done, total = iteration - self.start_iteration, self.max_iterations - self.start_iteration
            bar = progress_bar(done, total, text)
            sys.stderr.write("\r" + bar.ljust(self._bar_length))
            sys.stderr.flush()
            self._bar_length = len(bar)
        elif (
            now - self._last_line_time >= self.progress_interval_s
            and iteration != self._summary_iteration
            and iteration < self.max_iterations
        ):
            print(text, flush=True)
            self._last_line_time = now

    def clear_progress(self) -> None:
        """Erase the terminal's progress bar before other output."""
        if self.show_progress and self._bar_length:
            sys.stderr.write("\r" + " " * self._bar_length + "\r")
            sys.stderr.flush()
            self._bar_length = 0

    def summary(self, row: dict[str, Any]) -> None:
        """rsl_rl-style block of the latest numbers."""
        if not self.verbose:
            return
        done = row["iteration"] - self.start_iteration
        elapsed = self.clock() - self.start_time
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
            "Eval falls:",
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
        self.clear_progress()
        print("\n".join(lines), flush=True)
        self._summary_iteration = row["iteration"]
        self._last_line_time = self.clock()

    def close(self) -> None:
        """Flush and close every sink; finishes the W&B/Neptune run."""
        if self.show_progress and self._bar_length:
            sys.stderr.write("\n")
            self._bar_length = 0
        if not self.enabled:
            return
        self.enabled = False
        try:
            if self.remote is not None:
                self.remote.close()
        finally:
            self.jsonl.close()
            self.writer.close()


def config_markdown(config: dict[str, Any]) -> str:
    """The config as a TensorBoard text entry: JSON in a markdown code block (any value prints)."""
    text = json.dumps(config, indent=2, default=str)
    return "\n".join("    " + line for line in text.splitlines())


def population_summary(iteration: int, max_iterations: int, members: list[Any]) -> str:
    """One line per member of a population: its latest mean and evaluation reward, or its status."""
    lines = [f"Learning iteration {iteration}/{max_iterations}"]
    width = max(len(m.log_dir.name) for m in members)
    for member in members:
        row = member.rows[-1] if member.rows else {}
        text = f"  {member.log_dir.name:<{width}}"
        if member.status != "running":
            text += f"  {member.status}"
        for key, label in (("mean_reward", "mean reward"), ("eval_reward", "eval reward")):
            if row.get(key) is not None:
                text += f"  {label} {row[key]:.4g}"
        lines.append(text)
    return "\n".join(lines)
