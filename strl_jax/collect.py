"""`python -m strl_jax.collect <log_dir> --out DIR`: record a trained policy's motion as a dataset.

st_rl's DemonstrationSaver: many environments run the policy of a checkpoint (its mean action, or
samples with `--sample_actions`) in jitted chunks of steps; each finished episode becomes one
trajectory file in the strl_jax motion dataset format (`strl_jax.buffers.motion_files`): the policy
observations, executed actions, rewards and done flags, plus AMP frames of the task's components
for a Brax task (AMP frames are built from a Brax body layout; a MuJoCo Playground run's dataset
holds no frames and serves two-stage pretraining, `runner.pretrain_dataset`, not AMP).
Collection stops once the dataset holds at least `--min_timesteps` steps and `--min_episodes`
trajectories.

- A mutex config (`python -m strl_jax.collect mutex.yaml --out DIR`, `strl_jax.networks.mutex`)
  records the switch's executed actions in the env the config describes (its `skill_selection`
  included); the switch is deterministic and carries its own state (selection buffer, the
  sub-policies' memories, per-episode commands) as the policy's hidden state.
- `--success_traj_only` keeps only episodes that reached the time limit and drops those that
  terminated early (failures), as st_rl does.
- Only finished episodes are written; the ones still running when collection stops are dropped.
- An existing dataset in DIR is continued, not overwritten: its trajectories are counted, new
  files continue the numbering, and `metadata.json` records each collection session. Each session
  draws its own initial states, so a continued dataset does not repeat the episodes it holds.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Callable, Sequence
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
from strl_jax.envs.amp_obs import WithAmpObservation, amp_observation_size, resolve_components
from strl_jax.envs.tasks import task_family
from strl_jax.errors import CheckpointError, CollectError, CollectionIncomplete, ConfigError
from strl_jax.inference import load_policy
from strl_jax.mutex_from_runs import load_mutex_run
from strl_jax.networks.acting import Actor
from strl_jax.networks.mutex import MutexActor
from strl_jax.train_loops.evaluation import act_in_env

TRAJ_PREFIX = "traj_"
DEFAULT_CHUNK_STEPS = 200
WRITER = "strl_jax.collect"  # `writer` in metadata.json; datasets written before it had none


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
            f"give a new or empty folder, or a dataset written by {identity.get('writer', WRITER)}"
        )
    try:
        meta = read_metadata(out)
    except MotionFileError as err:
        raise CollectError(str(err)) from None
    if meta.get("format") != DATASET_FORMAT:
        raise CollectError(
            f"{out / METADATA_FILE} is not a {DATASET_FORMAT} dataset (format {meta.get('format')!r})"
        )
    writer = meta.get("writer", WRITER)
    if writer != identity.get("writer", WRITER):
        raise CollectError(
            f"{str(out)!r} holds a dataset written by {writer}, not by {identity.get('writer', WRITER)}; "
            "use another --out folder"
        )
    for key, value in identity.items():
        if key in meta and meta[key] != value:
            raise CollectError(
                f"cannot continue the dataset in {str(out)!r}: its {key} is {meta[key]!r} but this "
                f"collection's is {value!r}; use another --out folder"
            )
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


def add_trajectory(out: Path, progress: DatasetProgress, arrays: dict[str, np.ndarray]) -> int:
    """Write one episode as the next trajectory file and count it; returns its number of steps."""
    write_trajectory(out / f"{TRAJ_PREFIX}{progress.next_index:06d}.npz", arrays)
    steps = len(arrays["rewards"])
    progress.next_index += 1
    progress.num_trajectories += 1
    progress.num_timesteps += steps
    return steps


def session_key(seed: int, num_sessions: int, progress: DatasetProgress) -> jax.Array:
    """The key of a collection session: another session (or files left by an interrupted one)
    draws other initial states and samples."""
    return jax.random.fold_in(jax.random.fold_in(jax.random.PRNGKey(seed), num_sessions), progress.next_index)


def start_envs(env, hidden: Any, key: jax.Array) -> tuple:
    """`(env state, observations, hidden)` of freshly reset envs, committed to the device like a
    rollout's own outputs, so the second chunk does not compile a second program."""
    env_state, obs = env.reset(key)
    return jax.device_put((env_state, obs, hidden), jax.devices()[0])


def incomplete(out: Path, progress: DatasetProgress, session: dict, note: str = "") -> CollectionIncomplete:
    """The error of a session that ran out of `max_env_steps` (what it found is saved)."""
    return CollectionIncomplete(
        f"stopped after {session['env_steps']} steps per env (--max_env_steps) with "
        f"{progress.num_trajectories} trajectories / {progress.num_timesteps} steps in {out}; "
        f"{session['finished_episodes']} episodes finished this session{note}"
    )


@dataclasses.dataclass(frozen=True)
class PolicySource:
    """What collection needs of the acting policy: a run's checkpoint, or a mutex config's switch
    (`strl_jax.networks.mutex`, deterministic, its state carried as the hidden state)."""

    cfg: Any  # the TrainConfig of the env the policy acts in
    env: Any  # VecEnv
    actor: Actor | MutexActor
    params: Any
    normalizers: Any
    step: int | None  # the checkpoint; None for a mutex switch (its config names its sub-policies')


def is_mutex_config(path: str | Path) -> bool:
    return Path(path).suffix in (".yaml", ".yml") and Path(path).is_file()


def load_source(log_dir: str | Path, checkpoint: int | None, sample_actions: bool) -> PolicySource:
    """A run's policy, or the switch of a mutex config (`*.yaml`)."""
    if not is_mutex_config(log_dir):
        loaded = load_policy(log_dir, checkpoint)
        return PolicySource(
            loaded.cfg, loaded.env, loaded.actor, loaded.params, loaded.normalizers, loaded.step
        )
    if sample_actions:
        raise CollectError("a mutex policy acts deterministically: --sample_actions does not apply")
    if checkpoint is not None:
        raise CollectError(
            "--checkpoint names one run's step; a mutex config names its sub-policies' in policy.checkpoints"
        )
    run = load_mutex_run(log_dir)
    return PolicySource(run.cfg, run.env, MutexActor(run.policy), None, None, None)


def make_chunk_rollout(env, actor: Actor | MutexActor, chunk_steps: int, sample_actions: bool) -> Callable:
    """Jitted `(params, normalizers, carry, key) -> (carry, per-step arrays [C, N, ...])`.

    carry = (env state, observation groups, the actor's hidden state). The per-step arrays hold the
    observation each step acted on, the executed action, reward and terminated/truncated flags;
    where the env observes AMP frames (a Brax task), also the frame of each step's observation and
    of the state the step reached before any reset. Sampled actions draw one key per env and step.
    """

    def rollout(params, normalizers, carry, key):
        def act(obs, hidden, key):
            keys = jax.random.split(key, env.num_envs) if sample_actions else None
            return actor.act(params, normalizers, obs, hidden, keys)

        def record(_state, obs, action, res):
            arrays = {
                "obs": obs["policy"],
                "critic_obs": obs["critic"],
                "actions": action,
                "rewards": res.reward,
                "terminated": res.terminated,
                "truncated": res.truncated,
            }
            if "amp" in obs:
                arrays |= {"amp_obs": obs["amp"], "final_amp_obs": res.final_obs["amp"]}
            return arrays

        keys = jax.random.split(key, chunk_steps)
        return act_in_env(env, act, actor.reset_hidden, carry, record, keys)

    return jax.jit(rollout)


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
    rewards, `dones` (1 at the last step) and `timeouts` (1 where it hit the time limit)."""
    dones = np.zeros(len(episode["rewards"]), np.uint8)
    dones[-1] = 1
    return {
        "obs": episode["obs"].astype(np.float32),
        "actions": episode["actions"].astype(np.float32),
        "rewards": episode["rewards"].astype(np.float32),
        "dones": dones,
        "timeouts": episode["truncated"].astype(np.uint8),
    }


def critic_differs(chunk: dict[str, np.ndarray]) -> bool:
    """Whether the critic's observations differ from the policy's (a privileged critic): decided
    from what the env returned, since the groups' sources may be the task's defaults."""
    obs, critic = chunk["obs"], chunk["critic_obs"]
    return obs.shape != critic.shape or not np.array_equal(obs, critic)


def trajectory_arrays(episode: dict[str, np.ndarray], keep_critic_obs: bool) -> dict[str, np.ndarray]:
    """The file content of one episode: its step arrays and, where recorded, T + 1 AMP frames (the
    last one the pre-reset state)."""
    arrays = step_arrays(episode)
    if "amp_obs" in episode:
        frames = np.concatenate([episode["amp_obs"], episode["final_amp_obs"][-1:]])
        arrays["amp_obs"] = frames.astype(np.float32)
    if keep_critic_obs:
        arrays["critic_obs"] = episode["critic_obs"].astype(np.float32)
    return arrays


def collect(
    log_dir: str | Path,
    out: str | Path,
    checkpoint: int | None = None,
    num_envs: int = 64,
    min_timesteps: int = 10_000,
    min_episodes: int = 0,
    success_traj_only: bool = False,
    sample_actions: bool = False,
    seed: int = 0,
    amp_obs_components: Sequence[str] | None = None,
    max_env_steps: int | None = None,
    chunk_steps: int | None = None,
    log: Callable[[str], Any] = print,
) -> dict:
    """Collect until the dataset in `out` meets both minimums; returns its metadata.

    `amp_obs_components` default: the run's `env.amp_obs_components`, else the task's default; a
    MuJoCo Playground run records no AMP frames (and refuses `amp_obs_components`).
    `max_env_steps` bounds the policy steps per env of this session (a policy that never succeeds
    with `success_traj_only` would otherwise run forever); running out raises
    `CollectionIncomplete` after the trajectories found so far are saved.
    """
    out = Path(out)
    loaded = load_source(log_dir, checkpoint, sample_actions)
    cfg = loaded.cfg
    task = cfg.env.task
    frames = task_family(task) == "brax"
    if frames:
        components = amp_obs_components if amp_obs_components is not None else cfg.env.amp_obs_components
        try:
            components = resolve_components(task, components)
        except ValueError as err:
            raise CollectError(str(err)) from None
        observe = WithAmpObservation(loaded.env.observe, task, tuple(components))
        env = loaded.env.replace(num_envs=num_envs, observe=observe)
    elif amp_obs_components:
        raise CollectError(
            f"--amp_obs_components {','.join(amp_obs_components)}: AMP frames are built from a Brax body "
            f"layout and {task!r} is a MuJoCo Playground task; without the option the dataset holds its "
            "observations, actions, rewards and dones (for runner.pretrain_dataset)"
        )
    else:
        components, env = [], loaded.env.replace(num_envs=num_envs)
    frame_duration = env.dt
    identity = {
        "format": DATASET_FORMAT,
        "writer": WRITER,
        "task": task,
        "backend": cfg.env.backend,
        "amp_obs_components": list(components),
        "frame_duration": frame_duration,
    }
    progress = open_dataset(out, identity)
    options = {
        "num_envs": num_envs,
        "min_timesteps": min_timesteps,
        "min_episodes": min_episodes,
        "success_traj_only": success_traj_only,
        "sample_actions": sample_actions,
        "seed": seed,
    }
    sessions = list(progress.metadata.get("sessions", []))
    session = {
        "source_run": str(Path(log_dir).resolve()),
        "checkpoint": loaded.step,
        "options": options,
        "added_trajectories": 0,
        "added_timesteps": 0,
        "finished_episodes": 0,
        "env_steps": 0,
    }
    keep_critic_obs = None  # decided on the first chunk: does the critic see something else?

    def metadata() -> dict:
        return {
            **progress.metadata,
            **identity,
            "weight": progress.metadata.get("weight", 1.0),
            "amp_obs_dim": amp_observation_size(task, components) if frames else 0,
            "episode_length": cfg.env.episode_length,
            "source_run": session["source_run"],
            "checkpoint": loaded.step,
            "options": options,
            "num_trajectories": progress.num_trajectories,
            "num_timesteps": progress.num_timesteps,
            "sessions": sessions + [session],
        }

    def targets_met() -> bool:
        return progress.meets(min_timesteps, min_episodes)

    if targets_met():
        log(
            f"{out} already holds {progress.num_trajectories} trajectories / {progress.num_timesteps} "
            f"steps (targets {min_episodes} / {min_timesteps}); nothing to collect"
        )
        return progress.metadata
    chunk = chunk_steps or min(cfg.env.episode_length, DEFAULT_CHUNK_STEPS)
    actor = loaded.actor
    rollout = make_chunk_rollout(env, actor, chunk, sample_actions)
    reset_key, key = jax.random.split(session_key(seed, len(sessions), progress))
    carry = start_envs(env, actor.initial_hidden(num_envs), reset_key)
    cutter = TrajectoryCutter(num_envs)
    start = time.time()
    chunk_i = 0
    while not targets_met():
        if max_env_steps is not None and session["env_steps"] >= max_env_steps:
            write_json_atomic(out / METADATA_FILE, metadata())
            note = " (those that terminated early are not kept)" if success_traj_only else ""
            raise incomplete(out, progress, session, note)
        carry, record = rollout(loaded.params, loaded.normalizers, carry, jax.random.fold_in(key, chunk_i))
        chunk_i += 1
        session["env_steps"] += chunk
        record = jax.device_get(record)
        if keep_critic_obs is None:
            keep_critic_obs = critic_differs(record)
        for _, _, episode in cutter.feed(record):
            session["finished_episodes"] += 1
            if success_traj_only and not episode["truncated"][-1]:
                continue
            steps = add_trajectory(out, progress, trajectory_arrays(episode, keep_critic_obs))
            session["added_trajectories"] += 1
            session["added_timesteps"] += steps
            if targets_met():
                break
        write_json_atomic(out / METADATA_FILE, metadata())
        log(
            f"[{time.time() - start:6.1f}s] {progress.num_trajectories}/{min_episodes} trajectories, "
            f"{progress.num_timesteps}/{min_timesteps} steps ({session['finished_episodes']} episodes "
            f"finished this session)"
        )
    return metadata()


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m strl_jax.collect",
        description="Roll out a trained policy and save its episodes as a motion dataset "
        "(st_rl DemonstrationSaver).",
    )
    parser.add_argument(
        "log_dir",
        help="run folder (or checkpoints folder, or one checkpoint step folder); or a mutex YAML config",
    )
    parser.add_argument("--checkpoint", type=int, metavar="N", help="checkpoint step (default: newest)")
    add_collection_arguments(parser)
    parser.add_argument(
        "--success_traj_only",
        action="store_true",
        help="keep only episodes that reach the time limit (drop early terminations)",
    )
    parser.add_argument(
        "--sample_actions",
        action="store_true",
        help="sample actions from the policy's Gaussian instead of taking its mean",
    )
    parser.add_argument(
        "--amp_obs_components",
        metavar="A,B,...",
        help="AMP frame components (default: the run's env.amp_obs_components or the task's)",
    )
    args = parser.parse_args(argv)
    problem = collection_argument_error(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2

    components = args.amp_obs_components.split(",") if args.amp_obs_components else None
    try:
        meta = collect(
            args.log_dir,
            args.out,
            checkpoint=args.checkpoint,
            num_envs=args.num_envs,
            min_timesteps=args.min_timesteps,
            min_episodes=args.min_episodes,
            success_traj_only=args.success_traj_only,
            sample_actions=args.sample_actions,
            seed=args.seed,
            amp_obs_components=components,
            max_env_steps=args.max_env_steps,
            chunk_steps=args.chunk_steps,
        )
    except (CheckpointError, ConfigError, CollectError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1 if isinstance(err, CollectionIncomplete) else 2
    print(f"{args.out}: {meta['num_trajectories']} trajectories, {meta['num_timesteps']} steps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
