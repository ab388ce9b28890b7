"""Motion datasets on disk: strl_jax's own format, AMP_for_hardware JSON and Lumos pickles.

**strl_jax motion dataset** (written by `python -m strl_jax.collect`): a directory holding

- `metadata.json`, an object with at least `frame_duration` (seconds between consecutive frames,
  the env's policy step) and optionally `weight` (sampling weight of the whole dataset, default 1),
  `amp_obs_components` (names of the frame features, `strl_jax.envs.amp_obs`), `amp_obs_dim`, and
  whatever the writer records (source run, checkpoint, options, counts);
- one `<name>.npz` per trajectory with `amp_obs` `[T + 1, d]` float32 frames (the state each
  step acted on, plus the state reached by the last step), and optionally the per-step arrays
  `obs [T, ...]`, `actions [T, a]`, `rewards [T]`, `dones [T]` (1 at the episode's last step),
  `timeouts [T]` (1 where the episode ended at the time limit rather than by termination) and
  `mean_actions [T, a]` (the policy's deterministic action at each step: the executed one, unless
  `--sample_actions` executed a sample).

A **DAgger dataset** (written by `python -m strl_jax.dagger`, `writer: strl_jax.dagger` in its
metadata) has the same layout without AMP frames (it is not a motion source): per trajectory the
per-step arrays above, where `obs` is the student's observation and `actions` what was executed,
plus `teacher_actions [T, a]` (the teacher's deterministic action, the label of every step),
`teacher_acted [T]` (1 where the teacher's action was executed), `student_iteration [T]` (the
checkpoint step of the student that acted) and `teacher_obs [T, ...]` (the teacher's observation,
when it reads another group than the student).

The dataset's weight is shared among its trajectories in proportion to their durations, so every
moment of the dataset is equally likely and the dataset as a whole weighs `weight`.

**AMP_for_hardware** motion files (`.json` or `.txt`, JSON content): one motion per file,
`{"LoopMode", "FrameDuration", "EnableCycleOffset...", "MotionWeight", "Frames": [[...], ...]}`;
`FrameDuration`, `MotionWeight` and `Frames` are required, the loop and cycle-offset settings are
not used (sampled pairs never cross the end of a motion).

**Lumos** pickles (`.pkl` / `.pickle`): `{name: {"FrameDuration", "MotionWeight", "Fields",
"Frames"}}`, one motion per entry; `Fields` (feature names) is optional. Unpickling runs code
from the file: load only pickles you trust.

These formats store whatever frame features their authors chose; `columns` picks and orders the
features that match the environment's AMP observation frame.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from strl_jax.buffers.motion import MotionLibrary, make_motion_library
from strl_jax.errors import MotionFileError

METADATA_FILE = "metadata.json"
DATASET_FORMAT = "strl_jax.motion_dataset"
JSON_SUFFIXES = (".json", ".txt")
PICKLE_SUFFIXES = (".pkl", ".pickle")


@dataclasses.dataclass(frozen=True)
class Motion:
    """One motion as read from disk (host arrays)."""

    name: str
    frames: np.ndarray  # [T, d]
    frame_duration: float
    weight: float
    source: str  # the file it came from


# ----------------------------------------------------------------------------- readers
def _frames(value, where: str) -> np.ndarray:
    try:
        frames = np.asarray(value, dtype=np.float32)
    except (TypeError, ValueError) as err:
        raise MotionFileError(f"{where}: frames are not a rectangular array of numbers ({err})") from None
    if frames.ndim != 2:
        raise MotionFileError(f"{where}: frames must be [num_frames, frame_dim], got shape {frames.shape}")
    if frames.shape[0] < 2:
        raise MotionFileError(f"{where}: has {frames.shape[0]} frame(s); a transition needs at least 2")
    return frames


def _number(mapping: dict, key: str, where: str, default: float | None = None) -> float:
    if key not in mapping:
        if default is not None:
            return default
        raise MotionFileError(f"{where}: missing field {key!r}")
    value = mapping[key]
    if isinstance(value, bool) or not isinstance(value, int | float | np.number):
        raise MotionFileError(f"{where}: field {key!r} must be a number, got {value!r}")
    return float(value)


def read_amp_for_hardware(path: str | Path) -> Motion:
    """One AMP_for_hardware motion file."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise MotionFileError(f"{path}: not a JSON motion file ({err})") from None
    if not isinstance(data, dict):
        raise MotionFileError(f"{path}: expected a JSON object with Frames, got {type(data).__name__}")
    if "Frames" not in data:
        raise MotionFileError(f"{path}: missing field 'Frames'")
    return Motion(
        name=path.stem,
        frames=_frames(data["Frames"], f"{path} Frames"),
        frame_duration=_number(data, "FrameDuration", str(path)),
        weight=_number(data, "MotionWeight", str(path)),
        source=str(path),
    )


def read_lumos_pickle(path: str | Path) -> list[Motion]:
    """Every motion of a Lumos pickle `{name: {FrameDuration, MotionWeight, Fields, Frames}}`."""
    path = Path(path)
    try:
        with path.open("rb") as f:
            data = pickle.load(f)  # noqa: S301 - the documented format is a pickle
    except (pickle.UnpicklingError, EOFError, AttributeError, ImportError) as err:
        raise MotionFileError(f"{path}: not a readable pickle ({type(err).__name__}: {err})") from None
    if not isinstance(data, dict) or not data:
        raise MotionFileError(
            f"{path}: expected a non-empty mapping {{name: {{FrameDuration, MotionWeight, Frames}}}}"
        )
    motions = []
    for name, entry in data.items():
        where = f"{path} motion {name!r}"
        if not isinstance(entry, dict):
            raise MotionFileError(f"{where}: expected a mapping with FrameDuration, MotionWeight, Frames")
        if "Frames" not in entry:
            raise MotionFileError(f"{where}: missing field 'Frames'")
        motions.append(
            Motion(
                name=f"{path.stem}/{name}",
                frames=_frames(entry["Frames"], f"{where} Frames"),
                frame_duration=_number(entry, "FrameDuration", where),
                weight=_number(entry, "MotionWeight", where),
                source=str(path),
            )
        )
    return motions


def read_metadata(directory: str | Path) -> dict:
    """A strl_jax dataset's `metadata.json`."""
    path = Path(directory) / METADATA_FILE
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise MotionFileError(f"{directory}: no {METADATA_FILE}; not a strl_jax motion dataset") from None
    except json.JSONDecodeError as err:
        raise MotionFileError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(data, dict):
        raise MotionFileError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def trajectory_files(directory: str | Path) -> list[Path]:
    """The dataset's trajectory files in name order."""
    return sorted(p for p in Path(directory).glob("*.npz") if p.is_file())


def read_strl_dataset(directory: str | Path) -> list[Motion]:
    """Every trajectory of a strl_jax motion dataset (see the module docstring)."""
    directory = Path(directory)
    meta = read_metadata(directory)
    where = str(directory / METADATA_FILE)
    frame_duration = _number(meta, "frame_duration", where)
    weight = _number(meta, "weight", where, default=1.0)
    files = trajectory_files(directory)
    if not files:
        raise MotionFileError(f"{directory}: the dataset holds no trajectory (.npz) files")
    motions = []
    for path in files:
        try:
            npz = np.load(path)
        except (OSError, ValueError) as err:
            raise MotionFileError(f"{path}: not a readable .npz file ({err})") from None
        with npz:
            if "amp_obs" not in npz.files:
                raise MotionFileError(f"{path}: missing field 'amp_obs' (has {sorted(npz.files)})")
            frames = _frames(npz["amp_obs"], f"{path} amp_obs")
        motions.append(Motion(directory.name + "/" + path.stem, frames, frame_duration, 0.0, str(path)))
    durations = np.array([(m.frames.shape[0] - 1) * frame_duration for m in motions])
    shares = weight * durations / durations.sum()
    return [dataclasses.replace(m, weight=float(w)) for m, w in zip(motions, shares, strict=True)]


def read_motions(path: str | Path) -> list[Motion]:
    """The motions at `path`, by what it is: a strl_jax dataset directory (or its metadata.json),
    a directory of AMP_for_hardware / Lumos files, or one such file."""
    path = Path(path)
    if not path.exists():
        raise MotionFileError(f"motion path {str(path)!r} does not exist")
    if path.is_file() and path.name == METADATA_FILE:
        path = path.parent
    if path.is_dir():
        if (path / METADATA_FILE).is_file():
            return read_strl_dataset(path)
        files = sorted(
            p for p in path.iterdir() if p.is_file() and p.suffix.lower() in JSON_SUFFIXES + PICKLE_SUFFIXES
        )
        if not files:
            raise MotionFileError(
                f"{path}: neither a strl_jax dataset ({METADATA_FILE}) nor a folder of motion files "
                f"({', '.join(JSON_SUFFIXES + PICKLE_SUFFIXES)})"
            )
        return [m for f in files for m in read_motions(f)]
    suffix = path.suffix.lower()
    if suffix in JSON_SUFFIXES:
        return [read_amp_for_hardware(path)]
    if suffix in PICKLE_SUFFIXES:
        return read_lumos_pickle(path)
    raise MotionFileError(
        f"{path}: unknown motion file type {suffix!r}; valid: a dataset folder, "
        f"{', '.join(JSON_SUFFIXES)} (AMP_for_hardware) or {', '.join(PICKLE_SUFFIXES)} (Lumos)"
    )


def load_motions(
    paths: str | os.PathLike | Sequence[str | os.PathLike], columns: Sequence[int] | None = None
) -> list[Motion]:
    """All motions under `paths`, with `columns` of each frame picked, checked to share one size."""
    if isinstance(paths, str | os.PathLike):
        paths = [paths]
    if not paths:
        raise MotionFileError("no motion files given")
    motions = [m for p in paths for m in read_motions(p)]
    if columns is not None:
        cols = list(columns)
        picked = []
        for m in motions:
            bad = [c for c in cols if not -m.frames.shape[1] <= c < m.frames.shape[1]]
            if bad:
                raise MotionFileError(
                    f"{m.source}: columns {bad} are outside its frames of size {m.frames.shape[1]}"
                )
            picked.append(dataclasses.replace(m, frames=m.frames[:, cols]))
        motions = picked
    first = motions[0]
    for m in motions[1:]:
        if m.frames.shape[1] != first.frames.shape[1]:
            raise MotionFileError(
                f"frame size {m.frames.shape[1]} in {m.source} differs from frame size "
                f"{first.frames.shape[1]} in {first.source}; all motions must share one frame layout"
            )
    return motions


def load_motion_library(
    paths: str | os.PathLike | Sequence[str | os.PathLike],
    columns: Sequence[int] | None = None,
    expected_frame_dim: int | None = None,
) -> MotionLibrary:
    """A device `MotionLibrary` of every motion under `paths` (files or directories, any format).

    `expected_frame_dim` (the env's AMP frame size) turns a layout mismatch into an error here
    rather than a shape error inside the compiled update.
    """
    motions = load_motions(paths, columns)
    dim = motions[0].frames.shape[1]
    if expected_frame_dim is not None and dim != expected_frame_dim:
        raise MotionFileError(
            f"the motion frames have {dim} features ({motions[0].source}) but the environment's AMP "
            f"observation frame has {expected_frame_dim}; pick matching columns or components"
        )
    if not sum(m.weight for m in motions) > 0:
        raise MotionFileError(f"every motion weight is 0 ({[m.source for m in motions][:3]}...)")
    return make_motion_library(
        [m.frames for m in motions],
        [m.frame_duration for m in motions],
        [m.weight for m in motions],
        [m.name for m in motions],
    )


# ----------------------------------------------------------------------------- writing
def write_json_atomic(path: Path, data: dict) -> None:
    """Write JSON through a temporary file and a rename, so readers never see half a file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def write_trajectory(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """One trajectory `.npz` (must hold `amp_obs`, or `rewards` in a DAgger dataset), written
    atomically."""
    if "amp_obs" not in arrays and "rewards" not in arrays:
        raise ValueError("a trajectory needs its amp_obs frames or its per-step rewards")
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as f:
        np.savez_compressed(f, **arrays)
    os.replace(tmp, path)
