"""`python -m strl_jax.collect <log_dir> --out DIR`: record a trained policy's motion as a dataset.

st_rl's DemonstrationSaver: many environments run the policy of a checkpoint (its mean action, or
samples with `--sample_actions`) in jitted chunks of steps; each finished episode becomes one
trajectory file in the strl_jax motion dataset format (`strl_jax.buffers.motion_files`): the policy
observations, executed actions, the policy's mean actions (the executed ones unless sampled; the
labels of `runner.pretrain_dataset.imitation_labels: mean_actions`), rewards and done flags, plus
AMP frames of the task's components for a Brax task (AMP frames are built from a Brax body
layout; a MuJoCo Playground run's dataset holds no frames and serves two-stage pretraining,
`runner.pretrain_dataset`, not AMP).
Collection stops once the dataset holds at least `--min_timesteps` steps and `--min_episodes`
trajectories.

- A mutex config (`python -m strl_jax.collect mutex.yaml --out DIR`, `strl_jax.mutex`)
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

from strl_jax.buffers.motion_files import DATASET_FORMAT
from strl_jax.dataset_sessions import (
    DatasetSession,
    TrajectoryCutter,
    add_collection_arguments,
    collection_argument_error,
    start_envs,
    step_arrays,
)
from strl_jax.envs.amp_obs import WithAmpObservation, amp_observation_size, resolve_components
from strl_jax.envs.entry_points import is_entry_point
from strl_jax.envs.tasks import task_family
from strl_jax.errors import CheckpointError, CollectError, CollectionIncomplete, ConfigError
from strl_jax.inference import load_policy
from strl_jax.mutex import MutexActor
from strl_jax.mutex_from_runs import load_mutex_run
from strl_jax.networks.acting import Actor
from strl_jax.train_loops.evaluation import act_in_env

WRITER = "strl_jax.collect"  # `writer` in metadata.json
UNSUCCESSFUL_NOTE = " (those that terminated early are not kept)"


@dataclasses.dataclass(frozen=True)
class PolicySource:
    """What collection needs of the acting policy: a run's checkpoint, or a mutex config's switch
    (`strl_jax.mutex`, deterministic, its state carried as the hidden state)."""

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
    observation each step acted on, the executed action, the policy's deterministic action there
    (`mean_actions`: the label a sampled step's imitation can take instead of the noisy sample),
    reward and terminated/truncated flags; where the env observes AMP frames (a Brax task), also
    the frame of each step's observation and of the state the step reached before any reset.
    Sampled actions draw one key per env and step.
    """

    def rollout(params, normalizers, carry, key):
        def act(obs, hidden, key):
            mode, next_hidden = actor.act(params, normalizers, obs, hidden)
            if not sample_actions:
                return (mode, mode), next_hidden
            sample, _ = actor.act(params, normalizers, obs, hidden, jax.random.split(key, env.num_envs))
            return (sample, mode), next_hidden

        def record(_state, obs, acted, res):
            action, mode = acted
            arrays = {
                "obs": obs["policy"],
                "critic_obs": obs["critic"],
                "actions": action,
                "mean_actions": mode,
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


def kind_of(task: str) -> str:
    return "an env by entry point" if is_entry_point(task) else "a MuJoCo Playground task"


def recording_env(loaded: PolicySource, num_envs: int, amp_obs_components: Sequence[str] | None) -> tuple:
    """`(env, AMP frame components)`: the run's env with `num_envs` envs, observing AMP frames of
    the components for a Brax task (a MuJoCo Playground task or an entry point records none and
    refuses them)."""
    task = loaded.cfg.env.task
    if task_family(task, loaded.cfg.env) == "brax" and not is_entry_point(task):
        components = (
            amp_obs_components if amp_obs_components is not None else loaded.cfg.env.amp_obs_components
        )
        try:
            components = tuple(resolve_components(task, components))
        except ValueError as err:
            raise CollectError(str(err)) from None
        observe = WithAmpObservation(loaded.env.observe, task, components)
        return loaded.env.replace(num_envs=num_envs, observe=observe), components
    if amp_obs_components:
        raise CollectError(
            f"--amp_obs_components {','.join(amp_obs_components)}: AMP frames are built from a Brax body "
            f"layout and {task!r} is {kind_of(task)}; without the option the dataset holds its "
            "observations, actions, rewards and dones (for runner.pretrain_dataset)"
        )
    return loaded.env.replace(num_envs=num_envs), ()


def open_collection(
    out: Path, loaded: PolicySource, env: Any, components: tuple, options: dict, log_dir: str | Path
) -> DatasetSession:
    """The session of a recording into `out`: a continued dataset must share the task, backend,
    AMP frame components and frame duration."""
    cfg = loaded.cfg
    identity = {
        "format": DATASET_FORMAT,
        "writer": WRITER,
        "task": cfg.env.task,
        "backend": cfg.env.backend,
        "amp_obs_components": list(components),
        "frame_duration": env.dt,
    }
    source_run = str(Path(log_dir).resolve())
    extra = {
        "amp_obs_dim": amp_observation_size(cfg.env.task, components) if components else 0,
        "episode_length": env.episode_length,
        "source_run": source_run,
        "checkpoint": loaded.step,
    }
    record = {"source_run": source_run, "checkpoint": loaded.step, "options": options}
    session = DatasetSession.open(out, identity, options, extra, record)
    session.extra = {"weight": session.progress.metadata.get("weight", 1.0), **extra}
    return session


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
    loaded = load_source(log_dir, checkpoint, sample_actions)
    env, components = recording_env(loaded, num_envs, amp_obs_components)
    options = dict(num_envs=num_envs, min_timesteps=min_timesteps, min_episodes=min_episodes,
                   success_traj_only=success_traj_only, sample_actions=sample_actions, seed=seed)  # fmt: skip
    session = open_collection(Path(out), loaded, env, components, options, log_dir)
    if session.already_full(log):
        return session.progress.metadata
    chunk = session.chunk_steps(chunk_steps, env.episode_length)
    rollout = make_chunk_rollout(env, loaded.actor, chunk, sample_actions)
    reset_key, key = jax.random.split(session.key(seed))
    carry = start_envs(env, loaded.actor.initial_hidden(num_envs), reset_key)
    cutter = TrajectoryCutter(num_envs)
    keep_critic_obs = None  # decided on the first chunk: does the critic see something else?
    start = time.time()
    chunk_i = 0
    while not session.targets_met():
        session.check_budget(max_env_steps, UNSUCCESSFUL_NOTE if success_traj_only else "")
        carry, chunk_arrays = rollout(
            loaded.params, loaded.normalizers, carry, jax.random.fold_in(key, chunk_i)
        )
        chunk_i += 1
        session.stepped(chunk)
        chunk_arrays = jax.device_get(chunk_arrays)
        if keep_critic_obs is None:
            keep_critic_obs = critic_differs(chunk_arrays)
        for _, _, episode in cutter.feed(chunk_arrays):
            session.record["finished_episodes"] += 1
            if success_traj_only and not episode["truncated"][-1]:
                continue
            session.add(trajectory_arrays(episode, keep_critic_obs))
            if session.targets_met():
                break
        session.save()
        finished = session.record["finished_episodes"]
        log(f"[{time.time() - start:6.1f}s] {session.summary()} ({finished} episodes finished this session)")
    return session.metadata()


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
