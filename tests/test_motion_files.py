"""Motion datasets on disk: the strl_jax format, AMP_for_hardware JSON, Lumos pickles, and the
errors that name the file and the problem."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

from strl_jax.buffers.motion_files import (
    DATASET_FORMAT,
    MotionFileError,
    load_motion_library,
    load_motions,
    write_json_atomic,
    write_trajectory,
)


def frames(n, d=3, offset=0.0):
    return (offset + np.arange(n * d, dtype=np.float32).reshape(n, d)) / 10


def write_dataset(folder, lengths, d=3, frame_duration=0.02, weight=1.0, **extra):
    folder.mkdir(parents=True)
    meta = {"format": DATASET_FORMAT, "frame_duration": frame_duration, "weight": weight, **extra}
    write_json_atomic(folder / "metadata.json", meta)
    for i, n in enumerate(lengths):
        write_trajectory(
            folder / f"traj_{i:06d}.npz",
            {"amp_obs": frames(n, d, 100 * i), "actions": np.zeros((n - 1, 2), np.float32)},
        )
    return folder


def write_afh(path, n=5, d=3, **fields):
    data = {
        "LoopMode": "Wrap",
        "FrameDuration": 0.021,
        "EnableCycleOffsetPosition": True,
        "EnableCycleOffsetRotation": True,
        "MotionWeight": 0.5,
        "Frames": frames(n, d).tolist(),
    }
    data.update(fields)
    data = {k: v for k, v in data.items() if v is not None}
    path.write_text(json.dumps(data))
    return path


def write_lumos(path, entries):
    with path.open("wb") as f:
        pickle.dump(entries, f)
    return path


def put(path, content: str | bytes):
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


def lumos_entry(n=4, d=3, duration=0.05, weight=2.0, **fields):
    entry = {
        "FrameDuration": duration,
        "MotionWeight": weight,
        "Fields": ["a", "b", "c"],
        "Frames": frames(n, d),
    }
    entry.update(fields)
    return {k: v for k, v in entry.items() if v is not None}


def test_strl_dataset_round_trip(tmp_path):
    folder = write_dataset(tmp_path / "demo", [4, 11, 6], weight=3.0)
    lib = load_motion_library(folder)
    assert lib.num_motions == 3 and lib.frame_dim == 3
    assert lib.names == ("demo/traj_000000", "demo/traj_000001", "demo/traj_000002")
    np.testing.assert_array_equal(np.asarray(lib.num_frames), [4, 11, 6])
    np.testing.assert_allclose(np.asarray(lib.frame_duration), 0.02)
    # the dataset's weight is shared in proportion to duration (3, 10 and 5 frame intervals)
    np.testing.assert_allclose(np.asarray(lib.weight), 3.0 * np.array([3, 10, 5]) / 18, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(lib.frames[4:15]), frames(11, 3, 100))
    # metadata.json itself names the dataset too
    assert load_motion_library(folder / "metadata.json").num_motions == 3


def test_amp_for_hardware_json_and_txt(tmp_path):
    lib = load_motion_library([write_afh(tmp_path / "trot.txt", n=7), write_afh(tmp_path / "pace.json", n=3)])
    assert lib.names == ("trot", "pace")
    np.testing.assert_array_equal(np.asarray(lib.num_frames), [7, 3])
    np.testing.assert_allclose(np.asarray(lib.frame_duration), 0.021)
    np.testing.assert_allclose(np.asarray(lib.weight), 0.5)
    np.testing.assert_allclose(np.asarray(lib.frames[:7]), frames(7))


def test_lumos_pickle(tmp_path):
    path = write_lumos(
        tmp_path / "clips.pkl", {"walk": lumos_entry(n=5), "run": lumos_entry(n=3, weight=1.0)}
    )
    lib = load_motion_library(path)
    assert lib.names == ("clips/walk", "clips/run")
    np.testing.assert_allclose(np.asarray(lib.weight), [2.0, 1.0])
    np.testing.assert_allclose(np.asarray(lib.frame_duration), 0.05)


def test_folder_of_mixed_files_and_columns(tmp_path):
    folder = tmp_path / "clips"
    folder.mkdir()
    write_afh(folder / "a.txt", d=5)
    write_lumos(folder / "b.pkl", {"x": lumos_entry(d=5)})
    (folder / "README.md").write_text("ignored")
    motions = load_motions(folder, columns=[4, 0])
    assert [m.name for m in motions] == ["a", "b/x"]
    np.testing.assert_allclose(motions[0].frames, frames(5, 5)[:, [4, 0]])
    lib = load_motion_library([folder], columns=[4, 0], expected_frame_dim=2)
    assert lib.frame_dim == 2 and lib.num_motions == 2


def needle(text):
    return text.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[").replace("]", r"\]")


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: write_afh(p / "m.txt", FrameDuration=None), "m.txt: missing field 'FrameDuration'"),
        (lambda p: write_afh(p / "m.txt", MotionWeight=None), "m.txt: missing field 'MotionWeight'"),
        (lambda p: write_afh(p / "m.txt", Frames=None), "m.txt: missing field 'Frames'"),
        (lambda p: write_afh(p / "m.txt", FrameDuration="fast"), "field 'FrameDuration' must be a number"),
        (
            lambda p: write_afh(p / "m.json", n=1),
            "m.json Frames: has 1 frame(s); a transition needs at least 2",
        ),
        (lambda p: write_afh(p / "m.json", Frames=[[1, 2], [3]]), "frames are not a rectangular array"),
        (lambda p: put(p / "m.json", "{not json"), "m.json: not a JSON motion file"),
        (
            lambda p: write_lumos(p / "c.pkl", {"walk": lumos_entry(FrameDuration=None)}),
            "c.pkl motion 'walk': missing field 'FrameDuration'",
        ),
        (
            lambda p: write_lumos(p / "c.pkl", {"walk": lumos_entry(MotionWeight=None)}),
            "c.pkl motion 'walk': missing field 'MotionWeight'",
        ),
        (
            lambda p: write_lumos(p / "c.pkl", {"walk": lumos_entry(Frames=None)}),
            "c.pkl motion 'walk': missing field 'Frames'",
        ),
        (lambda p: write_lumos(p / "c.pkl", {"walk": lumos_entry(n=1)}), "has 1 frame(s)"),
        (lambda p: write_lumos(p / "c.pkl", [1, 2]), "c.pkl: expected a non-empty mapping"),
        (lambda p: put(p / "c.pkl", b"garbage"), "c.pkl: not a readable pickle"),
        (lambda p: put(p / "m.csv", "1,2"), "unknown motion file type '.csv'"),
        (lambda p: p / "absent.txt", "does not exist"),
    ],
)
def test_file_errors_name_the_file_and_the_problem(tmp_path, make, message):
    path = make(tmp_path)
    with pytest.raises(MotionFileError, match=needle(message)):
        load_motion_library(path)


def test_dataset_errors(tmp_path):
    folder = write_dataset(tmp_path / "demo", [4, 5])
    meta = json.loads((folder / "metadata.json").read_text())
    del meta["frame_duration"]
    write_json_atomic(folder / "metadata.json", meta)
    with pytest.raises(
        MotionFileError, match=needle(f"{folder / 'metadata.json'}: missing field 'frame_duration'")
    ):
        load_motion_library(folder)

    folder = write_dataset(tmp_path / "no_amp", [4])
    np.savez(folder / "traj_000001.npz", obs=np.zeros((3, 2)))
    with pytest.raises(
        MotionFileError, match=needle(f"{folder / 'traj_000001.npz'}: missing field 'amp_obs'")
    ):
        load_motion_library(folder)

    folder = write_dataset(tmp_path / "empty", [])
    with pytest.raises(MotionFileError, match="holds no trajectory"):
        load_motion_library(folder)

    folder = write_dataset(tmp_path / "short", [4, 1])
    with pytest.raises(MotionFileError, match=needle("traj_000001.npz amp_obs: has 1 frame(s)")):
        load_motion_library(folder)

    (tmp_path / "nothing").mkdir()
    with pytest.raises(MotionFileError, match="neither a strl_jax dataset"):
        load_motion_library(tmp_path / "nothing")
    with pytest.raises(MotionFileError, match="no motion files given"):
        load_motion_library([])


def test_mismatched_frame_sizes_name_both_files_and_sizes(tmp_path):
    a = write_afh(tmp_path / "a.txt", d=3)
    b = write_lumos(tmp_path / "b.pkl", {"w": lumos_entry(d=4)})
    with pytest.raises(MotionFileError) as err:
        load_motion_library([a, b])
    assert str(err.value) == (
        f"frame size 4 in {b} differs from frame size 3 in {a}; all motions must share one frame layout"
    )
    with pytest.raises(MotionFileError, match=needle(f"{a}: columns [7] are outside its frames of size 3")):
        load_motion_library(a, columns=[0, 7])
    with pytest.raises(
        MotionFileError, match="have 3 features .* but the environment's AMP observation frame has 5"
    ):
        load_motion_library(a, expected_frame_dim=5)
    c = write_afh(tmp_path / "c.txt", MotionWeight=0)
    with pytest.raises(MotionFileError, match="every motion weight is 0"):
        load_motion_library(c)
