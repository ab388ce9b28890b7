"""runner.logger backends (TensorBoard, W&B and Neptune offline) and the console progress line.

No training here: RunLogger is fed rows by hand, and W&B/Neptune run offline into tmp folders.
"""

from __future__ import annotations

import json
import re
import struct
import sys
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from strl_jax.errors import ConfigError
from strl_jax.records import remote_writers
from strl_jax.records.run_logger import RunLogger, progress_bar, progress_text, row_scalars

SECTIONS = {"surrogate": "Loss", "learning_rate": "Loss"}
CONFIG = {"seed": 3, "algorithm": {"learning_rate": 0.001, "gamma": 0.99}, "runner": {"logger": "wandb"}}
STEPS = 100  # env steps per iteration
WANDB_INTERNAL = {"_step", "_runtime", "_timestamp", "env_steps"}


def make_row(iteration: int) -> dict:
    return {
        "iteration": iteration,
        "env_steps": iteration * STEPS,
        "wall_time": float(iteration),
        "iteration_time": 1.0,
        "fps": 100.0,
        "mean_reward": float(iteration),
        "mean_episode_length": 10.0,
        "episodes": 2,
        "mean_step_reward": 0.1,
        "mean_noise_std": 1.0,
        "surrogate": -0.01 * iteration,
        "learning_rate": 0.001,
    }


def log_rows(logger: RunLogger, iterations: range) -> None:
    for i in iterations:
        logger.write(make_row(i))
        logger.progress(i)


def tensorboard_tags(log_dir: Path) -> set[str]:
    events = EventAccumulator(str(log_dir))
    events.Reload()
    return set(events.Tags()["scalars"])


def expected_tags() -> set[str]:
    scalars, env_scalars = row_scalars(
        make_row(1), RunLogger(Path("."), 1, enabled=False, sections=SECTIONS).tag
    )
    return set(scalars) | set(env_scalars)


# --- W&B ------------------------------------------------------------------------------------


def wandb_records(path: Path):
    """The protobuf records of a `.wandb` transaction log (leveldb-log framing: 32 KiB blocks,
    7-byte record headers, records split FIRST/MIDDLE/LAST across blocks)."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, block, payload = 7, 32768, b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:
            pos += block - pos % block
            continue
        _checksum, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        payload += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL or LAST
            record = wandb_internal_pb2.Record()
            record.ParseFromString(payload)
            payload = b""
            yield record


def offline_runs(log_dir: Path) -> list[Path]:
    return sorted((log_dir / "wandb").glob("offline-run-*"))


def read_run(run_dir: Path) -> dict:
    """Config, logged history (key -> [(step, value)]) and uploaded files of an offline run."""
    (wandb_file,) = run_dir.glob("run-*.wandb")
    out: dict = {"id": wandb_file.stem[len("run-") :], "config": {}, "history": {}, "files": set()}
    for record in wandb_records(wandb_file):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            out["config"].update({u.key: json.loads(u.value_json) for u in record.run.config.update})
        elif kind == "config":
            out["config"].update({u.key: json.loads(u.value_json) for u in record.config.update})
        elif kind == "history":
            items = {"/".join(i.nested_key) or i.key: json.loads(i.value_json) for i in record.history.item}
            for key, value in items.items():
                out["history"].setdefault(key, []).append((items["_step"], value))
        elif kind == "files":
            out["files"].update(f.path for f in record.files.files)
    return out


@pytest.fixture
def wandb_env(monkeypatch, tmp_path):
    """W&B with no credentials and every folder of its own in tmp."""
    import wandb  # noqa: F401 - installed by the test extra

    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for name in ("WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE", "WANDB_MODE", "NETRC", "WANDB_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    for name in ("WANDB_DIR", "WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR"):
        monkeypatch.setenv(name, str(tmp_path / name.lower()))
    return tmp_path


def test_wandb_offline_run_writes_files(wandb_env, monkeypatch, capsys):
    monkeypatch.setenv("WANDB_MODE", "offline")
    log_dir = wandb_env / "runs" / "2026-01-01_00-00-00_wb"
    log_dir.mkdir(parents=True)
    logger = RunLogger(log_dir, 10, sections=SECTIONS, backend="wandb", config=CONFIG, interactive=False)
    log_rows(logger, range(1, 4))
    diff = log_dir / "git" / "strl_jax.diff"
    diff.parent.mkdir()
    diff.write_text("--- git diff ---\n")
    logger.save_files([diff])
    print("our print after wandb.init")
    logger.close()

    out, err = capsys.readouterr()
    assert "our print after wandb.init" in out
    assert "WANDB_MODE=offline" in err and "wandb sync" in err
    assert "wandb:" not in out + err  # wandb's own banner and summary stay quiet
    (run_dir,) = offline_runs(log_dir)
    run = read_run(run_dir)
    assert run["id"] == (log_dir / remote_writers.WANDB_ID_FILE).read_text().strip()
    assert run["config"]["algorithm"] == CONFIG["algorithm"]
    assert run["config"]["log_dir"] == str(log_dir.resolve())
    logged = set(run["history"]) - WANDB_INTERNAL
    assert logged == tensorboard_tags(log_dir) == expected_tags()
    assert {"Train/mean_reward", "Loss/surrogate", "Train/mean_reward/env_steps"} <= logged
    assert run["history"]["Train/mean_reward"] == [(1, 1.0), (2, 2.0), (3, 3.0)]
    assert [v for _, v in run["history"]["env_steps"]] == [STEPS, 2 * STEPS, 3 * STEPS]
    assert "git/strl_jax.diff" in run["files"]
    assert (run_dir / "files" / "git" / "strl_jax.diff").read_text() == "--- git diff ---\n"
    assert len((log_dir / "metrics.jsonl").read_text().splitlines()) == 3


def test_wandb_without_credentials_goes_offline_and_resume_keeps_the_run(wandb_env, capsys):
    log_dir = wandb_env / "run"
    log_dir.mkdir()
    first = RunLogger(log_dir, 4, sections=SECTIONS, backend="wandb", config=CONFIG, interactive=False)
    log_rows(first, range(1, 3))
    first.close()
    assert "no W&B credentials" in capsys.readouterr().err
    resumed = RunLogger(log_dir, 4, start_iteration=2, sections=SECTIONS, backend="wandb", config=CONFIG)
    log_rows(resumed, range(3, 5))
    resumed.close()

    runs = [read_run(path) for path in offline_runs(log_dir)]
    assert len(runs) == 2 and runs[0]["id"] == runs[1]["id"]
    steps = [s for run in runs for s, _ in run["history"]["Train/mean_reward"]]
    assert steps == [1, 2, 3, 4]


def test_wandb_mode_follows_credentials(tmp_path):
    home = tmp_path
    assert remote_writers.wandb_mode({}, home) == "offline"
    assert remote_writers.wandb_mode({"WANDB_MODE": "online"}, home) is None
    assert remote_writers.wandb_mode({"WANDB_API_KEY": "x" * 40}, home) is None
    (home / ".netrc").write_text("machine example.org login a password b\n")
    assert remote_writers.wandb_mode({}, home) == "offline"
    (home / ".netrc").write_text("machine api.wandb.ai login user password " + "k" * 40 + "\n")
    assert remote_writers.wandb_mode({}, home) is None
    other = {"WANDB_BASE_URL": "https://wandb.example.org"}
    assert remote_writers.wandb_mode(other, home) == "offline"
    assert remote_writers.wandb_mode({"NETRC": str(tmp_path / "missing")}, home) == "offline"


@pytest.mark.parametrize("backend", ["wandb", "neptune"])
def test_missing_package_names_the_extra(backend, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, backend, None)  # `import backend` raises ImportError
    with pytest.raises(ConfigError, match=re.escape(f'pip install -e ".[{backend}]"')):
        RunLogger(tmp_path, 10, backend=backend)
    assert not list(tmp_path.iterdir())  # nothing opened or written


def test_unknown_backend_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="tensorboard, wandb, neptune"):
        RunLogger(tmp_path, 10, backend="mlflow")


# --- Neptune ----------------------------------------------------------------------------------


def neptune_operations(log_dir: Path) -> list[dict]:
    (data,) = (log_dir / ".neptune" / "offline").glob("run__*/data-1.log")
    return [json.loads(line)["obj"] for line in data.read_text().splitlines()]


def test_neptune_offline_run(monkeypatch, tmp_path, capsys):
    import neptune  # noqa: F401 - installed by the test extra

    for name in ("NEPTUNE_API_TOKEN", "NEPTUNE_MODE", "NEPTUNE_PROJECT", "NEPTUNE_DATA_DIRECTORY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    log_dir = tmp_path / "run"
    log_dir.mkdir()
    logger = RunLogger(log_dir, 10, sections=SECTIONS, backend="neptune", config=CONFIG, interactive=False)
    log_rows(logger, range(1, 4))
    diff = log_dir / "git" / "strl_jax.diff"
    diff.parent.mkdir()
    diff.write_text("diff\n")
    logger.save_files([diff])
    logger.close()

    assert "neptune sync --path" in capsys.readouterr().err
    assert not (tmp_path / ".neptune").exists() and "NEPTUNE_DATA_DIRECTORY" not in __import__("os").environ
    series: dict[str, list] = {}
    assigned = {}
    for op in neptune_operations(log_dir):
        path = "/".join(op["path"])
        if op["type"] == "LogFloats":
            series.setdefault(path, []).extend((v["step"], v["value"]) for v in op["values"])
        elif op["type"].startswith("Assign"):
            assigned[path] = op["value"]
        elif op["type"] == "UploadFile":
            assigned[path] = op["file_path"]
    assert series["Train/mean_reward"] == [(1, 1.0), (2, 2.0), (3, 3.0)]
    assert series["Train/mean_reward_env_steps"] == [(STEPS, 1.0), (2 * STEPS, 2.0), (3 * STEPS, 3.0)]
    tags = {remote_writers.neptune_path(tag) for tag in expected_tags()}
    assert tags <= set(series)
    assert assigned["config/algorithm/learning_rate"] == 0.001
    assert assigned["files/git/strl_jax_diff"] == str(diff.resolve())


def test_neptune_names():
    assert remote_writers.neptune_path("Train/mean_reward/env_steps") == "Train/mean_reward_env_steps"
    assert remote_writers.neptune_path("Loss/surrogate") == "Loss/surrogate"
    assert remote_writers.neptune_project("strl_jax", {"NEPTUNE_USERNAME": "me"}) == "me/strl_jax"
    assert remote_writers.neptune_project("team/strl_jax", {"NEPTUNE_USERNAME": "me"}) == "team/strl_jax"
    assert remote_writers.neptune_mode({}) == "offline"
    assert remote_writers.neptune_mode({"NEPTUNE_API_TOKEN": "t"}) is None


# --- TensorBoard and the console ----------------------------------------------------------------


def test_tensorboard_backend_writes_only_tensorboard(tmp_path):
    logger = RunLogger(tmp_path, 10, sections=SECTIONS, config=CONFIG, verbose=False)
    log_rows(logger, range(1, 3))
    logger.save_files([tmp_path / "metrics.jsonl"])  # nothing to upload to
    logger.close()
    assert tensorboard_tags(tmp_path) == expected_tags()
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    assert [e.step for e in events.Scalars("Train/mean_reward/env_steps")] == [STEPS, 2 * STEPS]
    assert [e.step for e in events.Scalars("Loss/surrogate")] == [1, 2]
    assert "config/text_summary" in events.Tags()["tensors"]
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("events.")) == ["metrics.jsonl"]


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def run_console(tmp_path: Path, interactive: bool, verbose: bool = True, iterations: int = 100) -> FakeClock:
    """Iterations of 2 s each, a summary every 25 and at the first and last, as the runner calls them."""
    clock = FakeClock()
    logger = RunLogger(
        tmp_path, iterations, verbose=verbose, progress_interval_s=30.0, clock=clock, interactive=interactive
    )
    for i in range(1, iterations + 1):
        clock.now += 2.0
        logger.write(make_row(i))
        if i % 25 == 0 or i in (1, iterations):
            logger.summary(make_row(i))
        logger.progress(i)
    logger.close()
    return clock


def test_plain_progress_lines_at_a_modest_rate(tmp_path, capsys):
    run_console(tmp_path, interactive=False)
    out, err = capsys.readouterr()
    assert "\r" not in out + err and err == ""
    lines = [line for line in out.splitlines() if line.startswith("iteration ")]
    # 2 s per iteration, 30 s between lines: one every 15 iterations, restarted by each summary
    iterations = [int(re.match(r"iteration (\d+)/100", line).group(1)) for line in lines]
    assert iterations == [16, 40, 65, 90]
    assert re.fullmatch(r"iteration 16/100  elapsed 00:00:32  ETA 00:02:48  50 steps/s", lines[0])
    assert out.count("Learning iteration") == 5


def test_no_progress_when_quiet(tmp_path, capsys):
    run_console(tmp_path, interactive=False, verbose=False)
    run_console(tmp_path / "tty", interactive=True, verbose=False)
    assert capsys.readouterr() == ("", "")


def test_terminal_progress_bar(tmp_path, capsys):
    run_console(tmp_path, interactive=True, iterations=4)
    out, err = capsys.readouterr()
    assert not [line for line in out.splitlines() if line.startswith("iteration ")]  # bar: stderr only
    frames = err.split("\r")
    assert any(frame.startswith("[###############...............]  50%  iteration 2/4") for frame in frames)
    assert "\r" + " " * len(frames[3]) + "\r" in err  # the bar of iteration 3 cleared for the summary
    assert err.endswith("\n")  # the last bar is left on its own line
    assert out.count("Learning iteration") == 2


def test_progress_text_and_bar():
    assert progress_text(10, 100, 65.0, 0.5, 1000) == (
        "iteration 10/100  elapsed 00:01:05  ETA 00:03:00  500 steps/s"
    )
    assert progress_text(1, 100, 5.0, float("nan"), None) == "iteration 1/100  elapsed 00:00:05  ETA --:--:--"
    assert progress_bar(1, 4, "x", width=8) == "[##......]  25%  x"
