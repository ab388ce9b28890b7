"""Many devices and many processes are the same run as one device.

Each case runs `tests/device_worker.py` in subprocesses with forced CPU devices
(`--xla_force_host_platform_device_count`), since the device count is fixed when jax starts.
Multi-process runs use `jax.distributed.initialize` on 127.0.0.1 with gloo CPU collectives.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from tiny_config import tiny

from strl_jax.configs.loader import ConfigError, resolve_config
from strl_jax.runners.devices import check_env_split, make_env_mesh

WORKER = str(Path(__file__).with_name("device_worker.py"))
TIME_FIELDS = ("wall_time", "iteration_time", "fps")

TINY = tiny("runner.eval_interval=2", "runner.max_iterations=4")
RECURRENT = ["policy.class_name=ActorCriticRecurrent", "policy.rnn_type=lstm", "policy.rnn_hidden_size=8"]
NO_EVAL = "runner.eval_interval=0"


def worker_env(devices: int) -> dict[str, str]:
    env = dict(os.environ)
    env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={devices}".strip()
    env["JAX_PLATFORMS"] = "cpu"
    return env


def parse(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


def run_processes(
    log_dir: Path, processes: int, devices_each: int, *overrides: str, resume: bool = False
) -> list[dict]:
    """`processes` workers joined by `jax.distributed` on a free local port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for i in range(processes):
        cmd = [
            sys.executable, WORKER, "--log_dir", str(log_dir),
            "--coordinator", f"127.0.0.1:{port}", "--num_processes", str(processes), "--process_id", str(i),
            *(["--resume"] if resume else []), *overrides,
        ]  # fmt: skip
        procs.append(
            subprocess.Popen(
                cmd, env=worker_env(devices_each), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        )
    results = []
    for p in procs:
        out, err = p.communicate(timeout=900)
        assert p.returncode == 0, err[-4000:]
        results.append(parse(out))
    return results


def metric_rows(log_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (log_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in TIME_FIELDS} for r in rows]


def assert_same_metrics(a: list[dict], b: list[dict], tol: float = 1e-5) -> None:
    assert [r["iteration"] for r in a] == [r["iteration"] for r in b]
    for ra, rb in zip(a, b, strict=True):
        assert ra.keys() == rb.keys()
        for key in ra:
            if ra[key] is None or isinstance(ra[key], str):
                assert ra[key] == rb[key], key
            else:
                where = f"{key} at iteration {ra['iteration']}"
                np.testing.assert_allclose(rb[key], ra[key], rtol=tol, atol=tol, err_msg=where)


# The 4-device cases, all in one process with 4 CPU devices (one jax start; the env programs they
# share compile once): each config on 1 device and on 4, and a population on 4. The recurrent case
# skips evaluation, which runs on one device whatever the mesh (the plain case checks it).
FOUR_DEVICE_PLAN = [
    {"name": "plain", "overrides": TINY, "device_counts": [1, 4]},
    {"name": "recurrent", "overrides": [*TINY, *RECURRENT, NO_EVAL], "device_counts": [1, 4]},
    {"name": "population", "overrides": [*TINY, "runner.num_seeds=2"], "device_counts": [4]},
]


@pytest.fixture(scope="module")
def four_devices(tmp_path_factory) -> tuple[Path, dict[tuple[str, int], dict]]:
    """`(log folder, {(name, device count): the run's JSON line})` of FOUR_DEVICE_PLAN."""
    log_dir = tmp_path_factory.mktemp("devices")
    cmd = [sys.executable, WORKER, "--log_dir", str(log_dir), "--plan", json.dumps(FOUR_DEVICE_PLAN)]
    done = subprocess.run(cmd, env=worker_env(4), capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-4000:]
    lines = [json.loads(line) for line in done.stdout.strip().splitlines() if line.startswith("{")]
    runs = {(r["name"], r["count"]): r for r in lines}
    assert sorted(runs) == sorted((e["name"], n) for e in FOUR_DEVICE_PLAN for n in e["device_counts"])
    return log_dir, runs


@pytest.fixture(scope="module")
def one_and_four(four_devices) -> Path:
    """The same run on 1 and on 4 devices."""
    log_dir, runs = four_devices
    one, four = runs["plain", 1], runs["plain", 4]
    assert one["mesh_devices"] == 1 and one["iteration"] == 4
    assert four["mesh_devices"] == 4 and four["replicas_identical"]
    return log_dir / "plain"


def test_four_devices_match_one_device(one_and_four):
    assert_same_metrics(metric_rows(one_and_four / "devices_1"), metric_rows(one_and_four / "devices_4"))


def test_recurrent_four_devices_match_one_device(four_devices):
    log_dir, runs = four_devices
    one, four = runs["recurrent", 1], runs["recurrent", 4]
    assert one["mesh_devices"] == 1 and four["mesh_devices"] == 4 and four["replicas_identical"]
    assert_same_metrics(
        metric_rows(log_dir / "recurrent" / "devices_1"), metric_rows(log_dir / "recurrent" / "devices_4")
    )


def test_population_on_four_devices_matches_its_single_run(one_and_four, four_devices):
    """`runner.num_seeds` composes with the env mesh: member seed 1 of a population sharded over 4
    devices is the one-device single run of seed 1."""
    log_dir, runs = four_devices
    four = runs["population", 4]
    assert four["mesh_devices"] == 4 and four["replicas_identical"] and four["iteration"] == 4
    member = metric_rows(log_dir / "population" / "devices_4" / "m00_seed1")
    assert_same_metrics(metric_rows(one_and_four / "devices_1"), member, tol=1e-4)
    assert metric_rows(log_dir / "population" / "devices_4" / "m01_seed2") != member


def test_two_processes_train_checkpoint_and_resume(one_and_four, tmp_path):
    """2 processes x 2 devices: 2 iterations, checkpoint, stop; resume to 4. Every device of both
    processes holds the same params, only process 0 writes metrics, and the numbers are those of
    the one-device run."""
    first = run_processes(tmp_path, 2, 2, *TINY, "runner.max_iterations=2")
    assert [r["process"] for r in first] == [0, 1]
    assert all(r["devices"] == 4 and r["mesh_devices"] == 4 and r["replicas_identical"] for r in first)
    assert first[0]["params"] == first[1]["params"] and first[0]["iteration"] == 2
    assert sorted(int(p.name) for p in (tmp_path / "checkpoints").iterdir() if p.name.isdigit()) == [2]

    second = run_processes(tmp_path, 2, 2, "runner.max_iterations=4", resume=True)
    assert all(r["replicas_identical"] and r["iteration"] == 4 for r in second)
    assert second[0]["params"] == second[1]["params"]
    assert_same_metrics(metric_rows(one_and_four / "devices_1"), metric_rows(tmp_path))


def test_env_split_errors_name_the_numbers():
    four_devices = SimpleNamespace(size=4)
    with pytest.raises(ConfigError, match="env.num_envs=6 must be a multiple of the 4 devices"):
        check_env_split(resolve_config("inverted_pendulum", overrides=["env.num_envs=6"]), four_devices)
    # 8 steps over 16 minibatches: each device's envs must come in blocks of 2
    cfg = resolve_config(
        "inverted_pendulum",
        overrides=["env.num_envs=12", "runner.num_steps_per_env=8", "algorithm.num_mini_batches=16"],
    )
    with pytest.raises(ConfigError, match="env.num_envs / devices = 3 must be a multiple of 2"):
        check_env_split(cfg, four_devices)
    assert check_env_split(cfg, SimpleNamespace(size=2)) == 6
    with pytest.raises(ConfigError, match="runner.num_devices=9, but 1 devices are available"):
        make_env_mesh(9)
