"""`python -m strl_jax.dagger --training_policy_logdir STUDENT_RUN --out DIR`: a DAgger dataset.

st_rl's DaggerSaver: the student (the run being trained) drives the envs and the teacher (a
finished run) labels every step with its deterministic action. Before each chunk of steps (a
round) the student's newest checkpoint is loaded if it changed, the probability `p` that the
teacher acts is evaluated at the student's iteration (its checkpoint step) with the TPPO schedules
(`--teacher_act_prob exp|linear|tanh|number`, scaled by `--update_times_scale`), and each env
draws whether the teacher acts there this round. Elsewhere the student's mean action plus
`--action_sample_std` Gaussian noise is executed. So the dataset follows the states the student
visits, as DAgger needs, while the teacher keeps weak students on their feet early on.

Both policies act on their own observation group of the student's env: the student on its
`policy` group, the teacher on `--teacher_obs_group` (default: the student config's
`algorithm.teacher_policy.obs_group`, else `critic` or `policy` per
`algorithm.label_action_with_critic_obs`). Recurrent memories restart with each episode.

Finished episodes are written as trajectories in the strl_jax dataset layout
(`strl_jax.buffers.motion_files`, "DAgger dataset") with `python -m strl_jax.collect`'s machinery:
the same stop rules, continuation of an existing dataset and `metadata.json` sessions, where each
round records the student iteration, `p` and the fraction of envs the teacher drove.
`--log_to_tensorboard` writes `Episode/<stat>` (mean, `_max`, `_min` over the round's finished
episodes) and `Dagger/teacher_act_prob` against the student iteration to DIR/tensorboard.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from strl_jax.agents.coefficient_schedules import SCHEDULES, Schedule, make_schedule
from strl_jax.buffers.motion_files import DATASET_FORMAT
from strl_jax.checkpoints.orbax_checkpoints import load_params_and_normalizers, read_checkpoint_meta
from strl_jax.dataset_sessions import (
    DatasetSession,
    TrajectoryCutter,
    add_collection_arguments,
    collection_argument_error,
    start_envs,
    step_arrays,
)
from strl_jax.envs.vec_env import VecEnv
from strl_jax.errors import CheckpointError, CollectError, CollectionIncomplete, ConfigError
from strl_jax.inference import LoadedPolicy, load_policy
from strl_jax.networks.acting import Actor
from strl_jax.records.run_logger import SummaryWriter
from strl_jax.runners.teachers import teacher_obs_group

WRITER = "strl_jax.dagger"
TENSORBOARD_DIR = "tensorboard"
METRIC_PREFIX = "metric/"  # per-step env metrics travel through the episode cutter under this prefix


@dataclasses.dataclass(frozen=True)
class Pair:
    """The teacher and the student, both acting on the student's env."""

    env: VecEnv  # the student's env with `num_envs` envs
    student: Actor
    teacher: Actor  # reads its group of the student's env


def teacher_act_schedule(value: float | str, update_times_scale: float) -> Schedule:
    """`iteration -> p` of `--teacher_act_prob`, as TPPO evaluates it during training."""
    if not isinstance(value, str) and not 0.0 <= float(value) <= 1.0:
        raise ConfigError(f"--teacher_act_prob must be in [0, 1] or one of {list(SCHEDULES)}, got {value}")
    try:
        return make_schedule(value, update_times_scale)
    except ValueError as err:
        raise ConfigError(f"--teacher_act_prob {value!r}: {err}") from None


def parse_prob(text: str) -> float | str:
    """A number, or a schedule name (checked later, with the valid names in the message)."""
    try:
        return float(text)
    except ValueError:
        return text


def teacher_run_of(student: LoadedPolicy, teacher: str | Path | None) -> str:
    """`teacher`, else the teacher the student's config trains with."""
    if teacher:
        return str(teacher)
    configured = student.cfg.algorithm.teacher_policy.checkpoint
    if configured:
        return str(Path(configured).expanduser())
    raise ConfigError(
        "no teacher: give --teacher RUN, or a student run whose config sets "
        "algorithm.teacher_policy.checkpoint"
    )


def pair_up(student: LoadedPolicy, teacher: LoadedPolicy, group: str, num_envs: int) -> Pair:
    """Both policies on the student's env, the teacher reading `group`; a `ConfigError` names
    a missing group or the sizes that do not fit."""
    env = student.env.replace(num_envs=num_envs)
    shapes = env.observation_shapes()
    student_actor = student.actor
    for who, wanted in (("student", student_actor.obs_group), ("teacher", group)):
        if wanted not in shapes:
            raise ConfigError(
                f"the {who} acts on observation group {wanted!r}, which the student's env does not "
                f"provide; groups: {sorted(shapes)} (set --teacher_obs_group or env.obs_groups)"
            )
    if teacher.action_size != env.action_size:
        raise ConfigError(
            f"the teacher has {teacher.action_size} actions but the student's env "
            f"({student.cfg.env.task}) has {env.action_size}"
        )
    teacher_shape = tuple(teacher.env.observation_shapes()["policy"])
    if teacher_shape != tuple(shapes[group]):
        raise ConfigError(
            f"the teacher takes observations of shape {teacher_shape}, but the student's env's "
            f"{group!r} group has shape {tuple(shapes[group])}; choose a matching --teacher_obs_group"
        )
    # The teacher's actions are executed in the student's env: clipped as that env clips them.
    teacher_actor = dataclasses.replace(
        teacher.actor, obs_group=group, clip_actions=student_actor.clip_actions
    )
    return Pair(env, student_actor, teacher_actor)


def draw_mask(key: jax.Array, p: float, num_envs: int) -> jax.Array:
    """Per env: does the teacher act this round (probability `p`; exactly all or none at 1 and 0)."""
    return jax.random.uniform(key, (num_envs,)) < p


def make_dagger_rollout(env: VecEnv, student: Actor, teacher: Actor, chunk_steps: int) -> Callable:
    """Jitted `(student (params, normalizers), teacher (params, normalizers), carry, mask,
    noise_std, iteration, key) -> (carry, per-step arrays [C, N, ...])`.

    carry = (env state, observation groups, {"student": memory, "teacher": memory}). The executed
    action is the teacher's where `mask`, else the student's mean plus `noise_std` Gaussian noise;
    both clipped as the env clips.
    """

    def rollout(student_arrays, teacher_arrays, carry, mask, noise_std, iteration, key):
        def step(carry, key):
            env_state, obs, hidden = carry
            labels, teacher_hidden = teacher.act(*teacher_arrays, obs, hidden["teacher"])
            mean, _, student_hidden = student.distribution(*student_arrays, obs, hidden["student"])
            noisy = student.mode(mean + noise_std * jax.random.normal(key, mean.shape))  # as executed
            action = jnp.where(mask[:, None], labels, noisy)
            next_state, res = env.step(env_state, action)
            done = res.terminated | res.truncated
            hidden = {
                "student": student.reset_hidden(student_hidden, done),
                "teacher": teacher.reset_hidden(teacher_hidden, done),
            }
            record = {
                "obs": obs[student.obs_group],
                "teacher_obs": obs[teacher.obs_group],
                "teacher_actions": labels,
                "actions": action,
                "teacher_acted": mask,
                "student_iteration": jnp.broadcast_to(iteration, mask.shape),
                "rewards": res.reward,
                "terminated": res.terminated,
                "truncated": res.truncated,
                **{METRIC_PREFIX + k: v for k, v in res.metrics.items()},
            }
            return (next_state, res.obs, hidden), record

        return jax.lax.scan(step, carry, jax.random.split(key, chunk_steps))

    return jax.jit(rollout)


def dagger_arrays(episode: dict[str, np.ndarray], keep_teacher_obs: bool) -> dict[str, np.ndarray]:
    """The file content of one episode (see `strl_jax.buffers.motion_files`, DAgger dataset)."""
    arrays = {
        **step_arrays(episode),
        "teacher_actions": episode["teacher_actions"].astype(np.float32),
        "teacher_acted": episode["teacher_acted"].astype(np.uint8),
        "student_iteration": episode["student_iteration"].astype(np.int32),
    }
    if keep_teacher_obs:
        arrays["teacher_obs"] = episode["teacher_obs"].astype(np.float32)
    return arrays


def episode_stats(episode: dict[str, np.ndarray]) -> dict[str, float]:
    """st_rl's per-episode info: return, length and the episode sum of each env metric."""
    stats = {"return": float(np.sum(episode["rewards"])), "length": float(len(episode["rewards"]))}
    for key, values in episode.items():
        if key.startswith(METRIC_PREFIX):
            stats[key[len(METRIC_PREFIX) :]] = float(np.sum(values))
    return stats


def summarize(stats: list[dict[str, float]]) -> dict[str, float]:
    """`Episode/<stat>` mean, `_max` and `_min` over the round's finished episodes."""
    out = {}
    for key in stats[0] if stats else ():
        values = np.array([s[key] for s in stats])
        out[f"Episode/{key}"] = float(values.mean())
        out[f"Episode/{key}_max"] = float(values.max())
        out[f"Episode/{key}_min"] = float(values.min())
    return out


class StudentTracker:
    """The student run's newest checkpoint, reloaded when a newer one appears (st_rl's
    `load_latest_training_policy` at every `check_stop`)."""

    def __init__(self, run: str | Path, loaded: LoadedPolicy):
        self.run = run
        self.iteration = loaded.step
        self.arrays = (loaded.params, loaded.normalizers)
        shapes = jax.eval_shape(lambda: {"params": loaded.params, "normalizers": loaded.normalizers})
        self.abstract = types.SimpleNamespace(**shapes)  # what load_params_and_normalizers checks against

    def refresh(self) -> bool:
        """Load the newest checkpoint if it is not the one held; True if it changed."""
        _, newest = read_checkpoint_meta(self.run)
        if newest == self.iteration:
            return False
        params, normalizers, self.iteration = load_params_and_normalizers(self.run, self.abstract, newest)
        self.arrays = (params, normalizers)
        return True


def load_pair(
    training_policy_logdir: str | Path, teacher: str | Path | None, group: str | None, num_envs: int
) -> tuple[LoadedPolicy, LoadedPolicy, str, Pair]:
    """`(student, teacher, the teacher's group, both on the student's env)`."""
    student = load_policy(training_policy_logdir)
    teacher_run = teacher_run_of(student, teacher)
    try:
        teacher_loaded = load_policy(teacher_run)
    except CheckpointError as err:
        raise CheckpointError(f"teacher: {err}") from None
    group = group or teacher_obs_group(student.cfg)
    return student, teacher_loaded, teacher_run, pair_up(student, teacher_loaded, group, num_envs)


class DaggerTensorboard:
    """`Episode/<stat>` and `Dagger/teacher_act_*` per round against the student's iteration,
    written to DIR/tensorboard once the first round ends."""

    def __init__(self, out: Path, enabled: bool):
        self.out, self.enabled, self.writer = out, enabled, None

    def write(self, iteration: int, stats: list[dict[str, float]], p: float, fraction: float) -> None:
        if not self.enabled:
            return
        self.writer = self.writer or SummaryWriter(str(self.out / TENSORBOARD_DIR), flush_secs=10)
        scalars = {"Dagger/teacher_act_prob": p, "Dagger/teacher_act_fraction": fraction}
        for tag, value in {**summarize(stats), **scalars}.items():
            self.writer.add_scalar(tag, value, iteration)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


@dataclasses.dataclass
class DaggerLoop:
    """A DAgger session between rounds: the envs' carry, the student's newest checkpoint, the
    episodes in progress."""

    session: DatasetSession
    rollout: Callable  # make_dagger_rollout's
    chunk: int  # env steps per round
    tracker: StudentTracker
    teacher_arrays: tuple
    schedule: Schedule
    noise_std: float
    key: jax.Array
    carry: tuple
    cutter: TrajectoryCutter
    keep_teacher_obs: bool

    @staticmethod
    def first_state(session: DatasetSession, pair: Pair, num_envs: int, seed: int) -> dict:
        """The loop's `key`, `carry` (freshly reset envs, both policies' memories), `cutter` and
        `keep_teacher_obs` (the teacher reads another group than the student)."""
        reset_key, key = jax.random.split(session.key(seed))
        hidden = {name: getattr(pair, name).initial_hidden(num_envs) for name in ("student", "teacher")}
        return {
            "key": key,
            "carry": start_envs(pair.env, hidden, reset_key),
            "cutter": TrajectoryCutter(num_envs),
            "keep_teacher_obs": pair.teacher.obs_group != pair.student.obs_group,
        }

    def round(self, num_envs: int) -> tuple[float, float, list[dict[str, float]]]:
        """One round: reload a newer student, draw where the teacher acts, step, write the
        finished episodes; `(p, fraction of envs the teacher drove, episode statistics)`."""
        session, tracker = self.session, self.tracker
        round_i = len(session.record["rounds"])
        if round_i:
            tracker.refresh()
        p = float(self.schedule(tracker.iteration))
        mask_key, chunk_key = jax.random.split(jax.random.fold_in(self.key, round_i))
        mask = draw_mask(mask_key, p, num_envs)
        noise, iteration = jnp.float32(self.noise_std), jnp.int32(tracker.iteration)
        self.carry, chunk_arrays = self.rollout(
            tracker.arrays, self.teacher_arrays, self.carry, mask, noise, iteration, chunk_key
        )
        session.stepped(self.chunk)
        stats = keep_episodes(session, self.cutter.feed(jax.device_get(chunk_arrays)), self.keep_teacher_obs)
        fraction = float(np.mean(np.asarray(mask)))
        session.record["rounds"].append(
            {"iteration": tracker.iteration, "teacher_act_prob": p, "teacher_act_fraction": fraction,
             "finished_episodes": len(stats)}
        )  # fmt: skip
        session.save()
        return p, fraction, stats


def keep_episodes(session: DatasetSession, finished: list, keep_teacher_obs: bool) -> list[dict[str, float]]:
    """Write a round's finished episodes until the targets are met; the statistics of all of them
    (episodes past the targets count in the statistics only)."""
    stats = []
    for _, _, episode in finished:
        session.record["finished_episodes"] += 1
        stats.append(episode_stats(episode))
        if not session.targets_met():
            session.add(dagger_arrays(episode, keep_teacher_obs))
    return stats


def open_dagger_session(
    out: Path, student: LoadedPolicy, teacher_step: int, runs: tuple, pair: Pair, options: dict
) -> DatasetSession:
    """The session of a DAgger recording into `out`; `runs`: (teacher run, student run). A
    continued dataset must share the task, both runs and both observation groups."""
    cfg = student.cfg
    teacher_run, student_run = runs
    identity = {
        "format": DATASET_FORMAT,
        "writer": WRITER,
        "task": cfg.env.task,
        "backend": cfg.env.backend,
        "frame_duration": pair.env.dt,
        "teacher_run": str(Path(teacher_run).resolve()),
        "training_policy_logdir": str(Path(student_run).resolve()),
        "student_obs_group": pair.student.obs_group,
        "teacher_obs_group": pair.teacher.obs_group,
    }
    record = {"teacher_checkpoint": teacher_step, "options": options, "rounds": []}
    return DatasetSession.open(out, identity, options, {"episode_length": pair.env.episode_length}, record)


def dagger(
    training_policy_logdir: str | Path,
    out: str | Path,
    teacher: str | Path | None = None,
    teacher_act_prob: float | str = "exp",
    update_times_scale: float = 5000.0,
    action_sample_std: float = 0.0,
    log_to_tensorboard: bool = False,
    num_envs: int = 64,
    min_timesteps: int = 10_000,
    min_episodes: int = 0,
    seed: int = 0,
    chunk_steps: int | None = None,
    max_env_steps: int | None = None,
    teacher_obs_group_name: str | None = None,
    log: Callable[[str], Any] = print,
) -> dict:
    """Collect until the dataset in `out` meets both minimums; returns its metadata.

    `log` is called after every round (the student is looked up again before the next one).
    """
    if action_sample_std < 0:
        raise ConfigError(f"--action_sample_std must be >= 0, got {action_sample_std}")
    schedule = teacher_act_schedule(teacher_act_prob, update_times_scale)
    student, teacher_loaded, teacher_run, pair = load_pair(
        training_policy_logdir, teacher, teacher_obs_group_name, num_envs
    )
    options = {"teacher_act_prob": teacher_act_prob, "update_times_scale": update_times_scale,
               "action_sample_std": action_sample_std, "num_envs": num_envs, "min_timesteps": min_timesteps,
               "min_episodes": min_episodes, "seed": seed}  # fmt: skip
    session = open_dagger_session(
        Path(out), student, teacher_loaded.step, (teacher_run, training_policy_logdir), pair, options
    )
    if session.already_full(log):
        return session.progress.metadata
    chunk = session.chunk_steps(chunk_steps, pair.env.episode_length)
    loop = DaggerLoop(
        session=session,
        rollout=make_dagger_rollout(pair.env, pair.student, pair.teacher, chunk),
        chunk=chunk,
        tracker=StudentTracker(training_policy_logdir, student),
        teacher_arrays=(teacher_loaded.params, teacher_loaded.normalizers),
        schedule=schedule,
        noise_std=action_sample_std,
        **DaggerLoop.first_state(session, pair, num_envs, seed),
    )
    tensorboard = DaggerTensorboard(session.out, log_to_tensorboard)
    start = time.time()
    while not session.targets_met():
        session.check_budget(max_env_steps)
        p, fraction, stats = loop.round(num_envs)
        iteration = loop.tracker.iteration
        tensorboard.write(iteration, stats, p, fraction)
        log(
            f"[{time.time() - start:6.1f}s] student iteration {iteration}, teacher acts in "
            f"{fraction:.0%} of the envs (p={p:.3f}): {session.summary()}"
        )
    tensorboard.close()
    return session.metadata()


def add_teacher_arguments(parser: argparse.ArgumentParser) -> None:
    """When and how the teacher acts, what it reads, and the episode statistics' log."""
    parser.add_argument(
        "--teacher_act_prob",
        type=parse_prob,
        default="exp",
        metavar="P",
        help=f"probability that the teacher acts in an env: a number or one of {list(SCHEDULES)} "
        "of the student's iteration (default exp)",
    )
    parser.add_argument(
        "--update_times_scale", type=float, default=5000.0, help="iterations scale of the schedule (5000)"
    )
    parser.add_argument(
        "--action_sample_std", type=float, default=0.0, help="noise std on the student's actions (0)"
    )
    parser.add_argument(
        "--teacher_obs_group",
        metavar="GROUP",
        help="observation group the teacher reads (default: as the student's config trains it)",
    )
    parser.add_argument(
        "--log_to_tensorboard", action="store_true", help="episode statistics to DIR/tensorboard"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m strl_jax.dagger",
        description="Roll out a training student, with a teacher acting in some envs, and save "
        "the episodes labelled with the teacher's actions (st_rl DaggerSaver).",
    )
    parser.add_argument(
        "--training_policy_logdir", required=True, metavar="RUN", help="the student's run folder"
    )
    parser.add_argument(
        "--teacher",
        metavar="RUN",
        help="the teacher's run folder (default: the student's algorithm.teacher_policy.checkpoint)",
    )
    add_collection_arguments(parser)
    add_teacher_arguments(parser)
    args = parser.parse_args(argv)
    problem = collection_argument_error(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        meta = dagger(
            args.training_policy_logdir,
            args.out,
            teacher=args.teacher,
            teacher_act_prob=args.teacher_act_prob,
            update_times_scale=args.update_times_scale,
            action_sample_std=args.action_sample_std,
            log_to_tensorboard=args.log_to_tensorboard,
            num_envs=args.num_envs,
            min_timesteps=args.min_timesteps,
            min_episodes=args.min_episodes,
            seed=args.seed,
            chunk_steps=args.chunk_steps,
            max_env_steps=args.max_env_steps,
            teacher_obs_group_name=args.teacher_obs_group,
        )
    except (CheckpointError, ConfigError, CollectError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1 if isinstance(err, CollectionIncomplete) else 2
    print(f"{args.out}: {meta['num_trajectories']} trajectories, {meta['num_timesteps']} steps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
