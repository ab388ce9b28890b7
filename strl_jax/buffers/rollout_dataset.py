"""st_rl's RolloutDataset: demonstration trajectories replayed as if N environments produced them.

The trajectories of a `strl_jax.collect` dataset are concatenated into flat step arrays on the
device. Each of the run's `num_envs` virtual environments plays one trajectory at a time; when it
ends, env `i` takes the trajectory at position `p = i + k * N` of the play order (its k-th), the
order being the trajectories in file order, or a fresh permutation per pass over the dataset with
`random_shuffle_traj_order`. So no counter is shared between envs or devices, and the data an env
sees does not depend on the device count. The dataset is used up once every env's position has
passed `dataset_loops` passes (st_rl's `dataset_loops`; -1: never); the iteration in which that
happens is completed by starting the order over, and the next iterations step the env.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from strl_jax.buffers.motion_files import MotionFileError, read_metadata, trajectory_files
from strl_jax.config_sections import (
    FLAG,
    Rule,
    accept,
    choice,
    integer,
    key,
    number,
    read_section,
    section_keys,
)
from strl_jax.errors import ConfigError

OPTION = "runner.pretrain_dataset"
# st_rl's RolloutDataset options that strl_jax reads (`data_dir` is required), the weight of the
# imitation term the pretraining iterations add (`imitation_loss_coef`, strl_jax's), a fixed
# rate for their optimiser steps (`learning_rate`, strl_jax's; None: the algorithm's schedule),
# and the imitation term carried into the RL iterations (strl_jax's, `agents.demonstrations`):
# its weight at the switch, `rl_imitation_coef` (0: off, st_rl), falling linearly to 0 over
# `rl_imitation_iterations` RL iterations, on every drawn step or (`rl_imitation_filter:
# advantage`) only on those whose return beats the critic's value of their state, or (`reward`) in
# the iterations whose rollout earns less or falls more per step than the dataset. Both imitation
# terms pull towards `imitation_labels` (strl_jax's): the executed `actions` (st_rl's), or the
# `mean_actions` a `strl_jax.collect` dataset records beside them (the demonstrator's
# deterministic action where its executed one was a noisy sample). `defaults` names the set of
# values the pretraining keys take where the mapping leaves them out (`STAGE_DEFAULTS`).
RL_IMITATION_FILTERS = ("none", "advantage", "reward")
IMITATION_LABELS = ("actions", "mean_actions")


@dataclass(frozen=True)
class StageDefaults:
    """What the pretraining iterations learn with where `runner.pretrain_dataset` is silent."""

    imitation_loss_coef: float
    learning_rate: float | None  # None: the algorithm's schedule
    imitation_labels: str


# `head_start`: behaviour cloning with a critic that learns the dataset's returns. With st_rl's
# values the surrogate, entropy and value terms still steer the actor at weight 1, and the
# adaptive rule reads the imitation pull as a too-large step and sits at its 1e-5 floor: after 10
# iterations on 20,000 sampled expert steps, hopper stood (75-76% of the expert's return) where
# these values reached 95-96%, walker2d -4% to 52% against 58-74% (BENCHMARKS.md, "Two-stage
# training"). A trajectory without `mean_actions` (a dataset not written by `strl_jax.collect`)
# is imitated on its executed actions unless `imitation_labels` is set.
# `st_rl`: st_rl's TwoStageRunner hands each replayed step to TPPO's
# `collect_transition_from_dataset`, which makes the executed action the label of TPPO's
# distillation loss (`distillation_loss_coef`, 1 by default), and the rate adapts or is
# scheduled as in any iteration.
STAGE_DEFAULTS = {
    "head_start": StageDefaults(
        imitation_loss_coef=100.0, learning_rate=3e-4, imitation_labels="mean_actions"
    ),
    "st_rl": StageDefaults(imitation_loss_coef=1.0, learning_rate=None, imitation_labels="actions"),
}
DEFAULTS = {
    "defaults": "head_start",
    "dataset_loops": 1,
    "random_shuffle_traj_order": False,
    "rl_imitation_coef": 0.0,
    "rl_imitation_iterations": 0,
    "rl_imitation_filter": "none",
}
# Labels that stand in, trajectory by trajectory, where a defaulted label is not recorded.
LABEL_FALLBACK = {"mean_actions": "actions"}
CYCLE_PASSES = 8


@struct.dataclass
class DatasetArrays:
    """Every step of every trajectory, concatenated: `[S, ...]`; trajectory `j` is the steps
    `start[j] : start[j] + length[j]`."""

    obs: dict[str, jax.Array]  # observation group -> [S, ...]
    actions: jax.Array  # [S, A] the executed actions
    labels: jax.Array  # [S, A] the imitation terms' targets (`imitation_labels`)
    rewards: jax.Array  # [S]
    dones: jax.Array  # [S] float: 1 at a trajectory's last step
    timeouts: jax.Array  # [S] float: 1 where that last step was the time limit
    start: jax.Array  # [J] int32
    length: jax.Array  # [J] int32
    order: jax.Array  # [passes * J] int32: the play order, trajectory indices pass after pass
    # play-order positions in `dataset_loops` passes (int32 max with no end): an array, so that
    # runs with other datasets or loop counts share the compiled program
    end: jax.Array

    @property
    def num_trajectories(self) -> int:
        return int(self.start.shape[0])


@struct.dataclass
class DatasetCursor:
    """Where each virtual env is: its place `position` in the play order and `frame` in the
    trajectory, and its episode sums (for the logged episode statistics)."""

    position: jax.Array  # [N] int32
    frame: jax.Array  # [N] int32
    episode_return: jax.Array  # [N]
    episode_length: jax.Array  # [N] int32


def fixed_rate(value: Any) -> float | None:
    """`learning_rate` as a float > 0, or None (`null`: the algorithm's schedule); ValueError
    otherwise. YAML 1.1 reads `1e-3` (no dot) as a string, so numeric strings are read as numbers,
    as the config schema's floats are."""
    if value is None:
        return None
    rate = value
    if isinstance(rate, str):
        rate = float(rate)
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not (math.isfinite(rate) and rate > 0):
        raise ValueError(value)
    return float(rate)


def _loops(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and (value >= 1 or value == -1)


@dataclass(frozen=True)
class PretrainDataset:
    """`runner.pretrain_dataset`, read by `config_sections.read_section` after the keys it leaves
    out have taken their `defaults` set's values (`pretrain_settings`)."""

    data_dir: str = key(
        accept(
            lambda v: isinstance(v, str) and bool(v), "a dataset folder written by python -m strl_jax.collect"
        )
    )
    dataset_loops: int = key(accept(_loops, "a positive integer or -1 (no end)"), 1)
    random_shuffle_traj_order: bool = key(FLAG, False)
    imitation_loss_coef: float = key(number(minimum=0.0), 100.0)
    # the rate of every pretraining step (None: the algorithm's schedule)
    learning_rate: float | None = key(
        Rule(
            fixed_rate, "a number > 0 (the rate of every pretraining step) or null (the algorithm's schedule)"
        ),
        3e-4,
    )
    rl_imitation_coef: float = key(number(minimum=0.0), 0.0)
    rl_imitation_iterations: int = key(integer(minimum=0), 0)
    rl_imitation_filter: str = key(choice(RL_IMITATION_FILTERS), "none")
    imitation_labels: str = key(choice(IMITATION_LABELS), "mean_actions")
    defaults: str = key(choice(list(STAGE_DEFAULTS)), "head_start")
    # not a key: the labels a trajectory without the defaulted `imitation_labels` is imitated on
    # (None: such a trajectory is refused)
    label_fallback: str | None = None

    def check(self, where: str) -> None:
        if self.rl_imitation_coef > 0 and self.rl_imitation_iterations < 1:
            raise ConfigError(
                f"{where}.rl_imitation_coef {self.rl_imitation_coef:g} needs rl_imitation_iterations >= 1 "
                "(the RL iterations over which its weight falls to 0)"
            )


def pretrain_settings(raw: Any) -> PretrainDataset:
    """`runner.pretrain_dataset` read (keys, types, values), the keys it leaves out taking the
    values of its `defaults` set; a defaulted `mean_actions` label falls back to the executed
    actions in a trajectory that records none."""
    if not isinstance(raw, Mapping):
        raise ConfigError(
            f"{OPTION} must be a mapping with keys {list(section_keys(PretrainDataset))}, got {raw!r}"
        )
    settings = read_section(PretrainDataset, {**with_defaults(raw), **raw}, OPTION)
    fallback = None if "imitation_labels" in raw else LABEL_FALLBACK.get(settings.imitation_labels)
    return dataclasses.replace(settings, label_fallback=fallback)


def with_defaults(raw: dict) -> dict[str, Any]:
    """The values `raw`'s keys take where it leaves them out: the common ones and those of its
    `defaults` set (`STAGE_DEFAULTS`)."""
    name = raw.get("defaults", DEFAULTS["defaults"])
    if not isinstance(name, str) or name not in STAGE_DEFAULTS:
        raise ConfigError(f"{OPTION}.defaults must be one of {list(STAGE_DEFAULTS)}, got {name!r}")
    return {**DEFAULTS, **asdict(STAGE_DEFAULTS[name]), "defaults": name}


def read_pieces(
    files: list, labels: str = "actions", fallback: str | None = None
) -> dict[str, list[np.ndarray]]:
    """Per trajectory file: policy and critic observations (`critic_obs`, else `obs`), actions,
    imitation labels (the file's `labels` array, else its `fallback` one where given), rewards,
    dones (1 at the last step, whatever the file says) and time-outs (0 if absent)."""
    pieces: dict[str, list[np.ndarray]] = {
        k: [] for k in ("policy", "critic", "actions", "labels", "rewards", "dones", "timeouts")
    }
    for path in files:
        with np.load(path) as data:
            missing = [k for k in ("obs", "actions", "rewards", "dones") if k not in data]
            if missing:
                raise ConfigError(
                    f"{path}: missing {missing}; write datasets with python -m strl_jax.collect"
                )
            name = fallback if labels not in data and fallback is not None else labels
            if name not in data:
                raise ConfigError(
                    f"{path} holds no {labels!r} for {OPTION}.imitation_labels: {labels}; "
                    f"python -m strl_jax.collect records them (the file holds {sorted(data.files)}), "
                    "or imitate the executed actions with imitation_labels: actions"
                )
            pieces["labels"].append(data[name])
            pieces["policy"].append(data["obs"])
            pieces["critic"].append(data["critic_obs"] if "critic_obs" in data else data["obs"])
            pieces["actions"].append(data["actions"])
            pieces["rewards"].append(data["rewards"])
            dones = np.asarray(data["dones"], np.float32)
            dones[-1] = 1.0
            pieces["dones"].append(dones)
            pieces["timeouts"].append(
                np.asarray(data["timeouts"] if "timeouts" in data else np.zeros_like(dones), np.float32)
            )
    return pieces


def load_dataset_arrays(
    settings: PretrainDataset, groups: dict[str, tuple[int, ...]], action_size: int, seed: int
) -> DatasetArrays:
    """The dataset's steps as host arrays, checked against the learner's observation groups
    (`policy` from the files' `obs`, `critic` from `critic_obs`, or `obs` where they hold none)."""
    data_dir = settings.data_dir
    where = f"{OPTION}.data_dir {str(data_dir)!r}"
    try:
        read_metadata(data_dir)
        files = trajectory_files(data_dir)
    except (MotionFileError, OSError) as err:
        raise ConfigError(f"{where}: {err}") from None
    if not files:
        raise ConfigError(f"{where} holds no trajectories")
    unknown = sorted(set(groups) - {"policy", "critic"})
    if unknown:
        raise ConfigError(
            f"{where}: the policy reads observation groups {unknown}, which datasets do not store "
            "(they hold the policy and critic groups)"
        )
    pieces = read_pieces(files, settings.imitation_labels, settings.label_fallback)
    lengths = np.asarray([len(r) for r in pieces["rewards"]], np.int32)
    obs = {}
    for group, shape in groups.items():
        stacked = np.concatenate(pieces[group]).astype(np.float32)
        if stacked.shape[1:] != tuple(shape):
            raise ConfigError(
                f"{where}: the {group!r} observations are {stacked.shape[1:]}, the policy's {tuple(shape)}"
            )
        obs[group] = stacked
    actions = np.concatenate(pieces["actions"]).astype(np.float32)
    if actions.shape[1:] != (action_size,):
        raise ConfigError(f"{where}: actions of size {actions.shape[1:]}, the env's {action_size}")
    labels = np.concatenate(pieces["labels"]).astype(np.float32)
    if labels.shape != actions.shape:
        name = settings.imitation_labels
        raise ConfigError(f"{where}: {name} of size {labels.shape[1:]}, the env's {action_size}")
    return DatasetArrays(
        obs=obs,
        actions=actions,
        labels=labels,
        rewards=np.concatenate(pieces["rewards"]).astype(np.float32),
        dones=np.concatenate(pieces["dones"]),
        timeouts=np.concatenate(pieces["timeouts"]),
        start=np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int32),
        length=lengths,
        order=play_order(len(lengths), settings, seed),
        end=np.asarray(
            np.iinfo(np.int32).max if settings.dataset_loops == -1 else settings.dataset_loops * len(lengths),
            np.int32,
        ),
    )


def play_order(num_trajectories: int, settings: PretrainDataset, seed: int) -> np.ndarray:
    """Trajectory indices pass after pass: file order, or a permutation per pass."""
    loops = settings.dataset_loops
    passes = CYCLE_PASSES if loops == -1 else loops
    if not settings.random_shuffle_traj_order:
        return np.tile(np.arange(num_trajectories, dtype=np.int32), passes)
    rng = np.random.default_rng(seed)
    return np.concatenate([rng.permutation(num_trajectories) for _ in range(passes)]).astype(np.int32)


def init_cursor(env_ids: jax.Array) -> DatasetCursor:
    """Env `i` starts the `i`-th trajectory of the play order."""
    zeros = jnp.zeros(env_ids.shape, jnp.int32)
    return DatasetCursor(
        position=env_ids.astype(jnp.int32),
        frame=zeros,
        episode_return=zeros.astype(jnp.float32),
        episode_length=zeros,
    )


def step_index(arrays: DatasetArrays, cursor: DatasetCursor) -> jax.Array:
    """Flat index of each env's current step (past the play order's end it starts over)."""
    traj = arrays.order[cursor.position % arrays.order.shape[0]]
    return arrays.start[traj] + cursor.frame


def advance(arrays: DatasetArrays, cursor: DatasetCursor, index: jax.Array, num_envs: int) -> DatasetCursor:
    """After each env replayed step `index`: next frame, or its next trajectory `num_envs` on."""
    done = arrays.dones[index] > 0
    reward = arrays.rewards[index]
    episode_return = cursor.episode_return + reward
    episode_length = cursor.episode_length + 1
    return DatasetCursor(
        position=jnp.where(done, cursor.position + num_envs, cursor.position),
        frame=jnp.where(done, 0, cursor.frame + 1),
        episode_return=jnp.where(done, 0.0, episode_return),
        episode_length=jnp.where(done, 0, episode_length),
    )


def envs_used_up(arrays: DatasetArrays, cursor: DatasetCursor) -> jax.Array:
    """How many of these envs have passed the dataset's last pass (none without an end)."""
    return jnp.sum(cursor.position >= arrays.end).astype(jnp.float32)
