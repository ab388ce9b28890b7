"""A collection session writing into a dataset folder: what the folder already holds, the
trajectories added, the stop rules and `metadata.json`, shared by every dataset writer
(`python -m strl_jax.collect`, `python -m strl_jax.dagger`).

An existing dataset is continued, not overwritten: its trajectories are counted, new files continue
the numbering and `metadata.json` lists every session. Each session draws its own initial states,
so a continued dataset does not repeat the episodes it holds.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np

from strl_jax.buffers.motion_files import (
    DATASET_FORMAT,
    METADATA_FILE,
    MotionFileError,
    read_metadata,
    trajectory_files,
    write_json_atomic,
    write_trajectory,
)
from strl_jax.errors import CollectError, CollectionIncomplete

TRAJ_PREFIX = "traj_"
DEFAULT_CHUNK_STEPS = 200
UNNAMED_WRITER = "strl_jax.collect"  # datasets written before metadata.json named its writer


@dataclasses.dataclass
class DatasetProgress:
    """What the output folder holds so far."""

    next_index: int
    num_trajectories: int
    num_timesteps: int
    metadata: dict

    def meets(self, min_timesteps: int, min_episodes: int) -> bool:
        return self.num_timesteps >= min_timesteps and self.num_trajectories >= min_episodes


def _traj_index(path: Path) -> int | None:
    stem = path.stem
    if stem.startswith(TRAJ_PREFIX) and stem[len(TRAJ_PREFIX) :].isdigit():
        return int(stem[len(TRAJ_PREFIX) :])
    return None


def _check_continuable(out: Path, meta: dict, identity: dict) -> None:
    """An existing dataset is continued only by its own writer, for the same task and settings."""
    if meta.get("format") != DATASET_FORMAT:
        raise CollectError(
            f"{out / METADATA_FILE} is not a {DATASET_FORMAT} dataset (format {meta.get('format')!r})"
        )
    writer, wanted = meta.get("writer", UNNAMED_WRITER), identity["writer"]
    if writer != wanted:
        raise CollectError(
            f"{str(out)!r} holds a dataset written by {writer}, not by {wanted}; use another --out folder"
        )
    for key, value in identity.items():
        if key in meta and meta[key] != value:
            raise CollectError(
                f"cannot continue the dataset in {str(out)!r}: its {key} is {meta[key]!r} but this "
                f"collection's is {value!r}; use another --out folder"
            )


def open_dataset(out: Path, identity: dict) -> DatasetProgress:
    """Create `out`, or count what an earlier collection left there and check it fits `identity`
    (its `writer`, task, frame duration and what else the writer names)."""
    if not out.exists() or (out.is_dir() and not any(out.iterdir())):
        out.mkdir(parents=True, exist_ok=True)
        return DatasetProgress(0, 0, 0, {})
    if not out.is_dir():
        raise CollectError(f"--out {str(out)!r} is a file; give a folder")
    if not (out / METADATA_FILE).is_file():
        raise CollectError(
            f"--out {str(out)!r} is not empty and holds no {METADATA_FILE}; "
            f"give a new or empty folder, or a dataset written by {identity['writer']}"
        )
    try:
        meta = read_metadata(out)
    except MotionFileError as err:
        raise CollectError(str(err)) from None
    _check_continuable(out, meta, identity)
    files = [p for p in trajectory_files(out) if _traj_index(p) is not None]
    steps = 0
    for path in files:
        try:
            with np.load(path) as npz:
                steps += int(npz["rewards"].shape[0])
        except (OSError, ValueError, KeyError) as err:
            raise CollectError(f"cannot read {path} of the existing dataset: {err}") from None
    next_index = max((_traj_index(p) for p in files), default=-1) + 1
    return DatasetProgress(next_index, len(files), steps, meta)


@dataclasses.dataclass
class DatasetSession:
    """One session of a dataset writer: the folder's progress, this session's record (appended to
    `metadata.json`'s `sessions`) and the stop rules (`min_timesteps` and `min_episodes` reached,
    or `max_env_steps` per env spent)."""

    out: Path
    identity: dict  # format, writer, task, ...: what a continued dataset must share
    options: dict  # the writer's options, with min_timesteps and min_episodes
    extra: dict  # further metadata fields (episode length, source run, ...)
    progress: DatasetProgress
    earlier: list[dict]  # the sessions before this one
    record: dict  # this session's entry

    @classmethod
    def open(cls, out: Path, identity: dict, options: dict, extra: dict, record: dict) -> DatasetSession:
        progress = open_dataset(out, identity)
        counts = {"added_trajectories": 0, "added_timesteps": 0, "finished_episodes": 0, "env_steps": 0}
        earlier = list(progress.metadata.get("sessions", []))
        return cls(out, identity, options, extra, progress, earlier, {**record, **counts})

    def targets_met(self) -> bool:
        return self.progress.meets(self.options["min_timesteps"], self.options["min_episodes"])

    def already_full(self, log: Callable[[str], Any]) -> bool:
        """True (and says so) if the folder meets the targets before this session adds anything."""
        if not self.targets_met():
            return False
        log(
            f"{self.out} already holds {self.progress.num_trajectories} trajectories / "
            f"{self.progress.num_timesteps} steps (targets {self.options['min_episodes']} / "
            f"{self.options['min_timesteps']}); nothing to collect"
        )
        return True

    def key(self, seed: int) -> jax.Array:
        """The session's key: another session (or files left by an interrupted one) draws other
        initial states and samples."""
        key = jax.random.fold_in(jax.random.PRNGKey(seed), len(self.earlier))
        return jax.random.fold_in(key, self.progress.next_index)

    def chunk_steps(self, chunk_steps: int | None, episode_length: int) -> int:
        return chunk_steps or min(episode_length, DEFAULT_CHUNK_STEPS)

    def stepped(self, steps: int) -> None:
        self.record["env_steps"] += steps

    def add(self, arrays: dict[str, np.ndarray]) -> None:
        """Write one episode as the next trajectory file and count it."""
        progress = self.progress
        write_trajectory(self.out / f"{TRAJ_PREFIX}{progress.next_index:06d}.npz", arrays)
        steps = len(arrays["rewards"])
        progress.next_index += 1
        progress.num_trajectories += 1
        progress.num_timesteps += steps
        self.record["added_trajectories"] += 1
        self.record["added_timesteps"] += steps

    def metadata(self) -> dict:
        progress = self.progress
        return {
            **progress.metadata,
            **self.identity,
            **self.extra,
            "options": self.options,
            "num_trajectories": progress.num_trajectories,
            "num_timesteps": progress.num_timesteps,
            "sessions": self.earlier + [self.record],
        }

    def save(self) -> None:
        write_json_atomic(self.out / METADATA_FILE, self.metadata())

    def check_budget(self, max_env_steps: int | None, note: str = "") -> None:
        """Raise `CollectionIncomplete` (after saving what was found) once `max_env_steps` per env
        are spent."""
        if max_env_steps is None or self.record["env_steps"] < max_env_steps:
            return
        self.save()
        progress = self.progress
        raise CollectionIncomplete(
            f"stopped after {self.record['env_steps']} steps per env (--max_env_steps) with "
            f"{progress.num_trajectories} trajectories / {progress.num_timesteps} steps in {self.out}; "
            f"{self.record['finished_episodes']} episodes finished this session{note}"
        )

    def summary(self) -> str:
        return (
            f"{self.progress.num_trajectories}/{self.options['min_episodes']} trajectories, "
            f"{self.progress.num_timesteps}/{self.options['min_timesteps']} steps"
        )


def start_envs(env: Any, hidden: Any, key: jax.Array) -> tuple:
    """`(env state, observations, hidden)` of freshly reset envs, committed to the device like a
    rollout's own outputs, so the second chunk does not compile a second program."""
    env_state, obs = env.reset(key)
    return jax.device_put((env_state, obs, hidden), jax.devices()[0])


class TrajectoryCutter:
    """Per-env pieces of the running episodes; hands out each episode when it ends."""

    def __init__(self, num_envs: int):
        self.pieces: list[list[dict[str, np.ndarray]]] = [[] for _ in range(num_envs)]

    def feed(self, chunk: dict[str, np.ndarray]) -> list[tuple[int, int, dict[str, np.ndarray]]]:
        """Finished episodes of a `[C, N, ...]` chunk as `(end step in chunk, env, arrays)`."""
        done = chunk["terminated"] | chunk["truncated"]
        finished = []
        for env_i in range(done.shape[1]):
            start = 0
            for t in np.flatnonzero(done[:, env_i]):
                piece = {k: v[start : t + 1, env_i] for k, v in chunk.items()}
                parts = self.pieces[env_i] + [piece]
                self.pieces[env_i] = []
                episode = {k: np.concatenate([p[k] for p in parts]) for k in piece}
                finished.append((int(t), env_i, episode))
                start = t + 1
            if start < done.shape[0]:
                self.pieces[env_i].append({k: v[start:, env_i] for k, v in chunk.items()})
        finished.sort(key=lambda item: (item[0], item[1]))
        return finished


def step_arrays(episode: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The per-step arrays every dataset file holds: policy observations, executed actions,
    rewards, `dones` (1 at the last step) and `timeouts` (1 where it hit the time limit); and the
    policy's `mean_actions` where the writer recorded them."""
    dones = np.zeros(len(episode["rewards"]), np.uint8)
    dones[-1] = 1
    arrays = {
        "obs": episode["obs"].astype(np.float32),
        "actions": episode["actions"].astype(np.float32),
        "rewards": episode["rewards"].astype(np.float32),
        "dones": dones,
        "timeouts": episode["truncated"].astype(np.uint8),
    }
    if "mean_actions" in episode:
        arrays["mean_actions"] = episode["mean_actions"].astype(np.float32)
    return arrays


def add_collection_arguments(parser: argparse.ArgumentParser) -> None:
    """The options every dataset writer shares: output folder, env count, stop rules, seed."""
    parser.add_argument("--out", required=True, metavar="DIR", help="dataset folder (continued if it exists)")
    parser.add_argument("--num_envs", type=int, default=64, help="parallel environments (default 64)")
    parser.add_argument(
        "--min_timesteps", type=int, default=10_000, help="stop at this many steps (default 1e4)"
    )
    parser.add_argument(
        "--min_episodes", type=int, default=0, help="... and this many trajectories (default 0)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of initial states and samples")
    parser.add_argument(
        "--chunk_steps",
        type=int,
        metavar="N",
        help=f"env steps per jitted chunk (default: episode length, at most {DEFAULT_CHUNK_STEPS})",
    )
    parser.add_argument(
        "--max_env_steps", type=int, metavar="N", help="give up after N steps per env (default: no limit)"
    )


def collection_argument_error(args: argparse.Namespace) -> str | None:
    """What is wrong with the shared options, or None."""
    for flag in ("num_envs", "chunk_steps"):
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            return f"--{flag} must be at least 1"
    for flag in ("min_timesteps", "min_episodes"):
        if getattr(args, flag) < 0:
            return f"--{flag} must be >= 0"
    return None
