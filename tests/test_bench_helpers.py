"""Helpers of the benchmark scripts that change what runs: brax's jax substitute, worker flags,
the names of the runner's loop the strl_jax workers set for a call."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import common  # noqa: E402
import vs_brax  # noqa: E402


def test_device_put_replicated_substitute_stacks_one_copy_per_device(monkeypatch):
    monkeypatch.delattr(jax, "device_put_replicated", raising=False)
    assert vs_brax.install_jax_compat() == ["jax.device_put_replicated"]
    tree = {"w": np.arange(6.0).reshape(2, 3), "step": np.int32(4)}
    out = jax.device_put_replicated(tree, jax.devices())
    assert out["w"].shape == (jax.device_count(), 2, 3) and out["step"].shape == (jax.device_count(),)
    np.testing.assert_array_equal(np.asarray(out["w"])[0], tree["w"])
    assert vs_brax.install_jax_compat() == []  # present now: nothing substituted
    del jax.device_put_replicated  # leave jax as this test found it


def test_workers_get_the_xla_default_from_their_own_jaxlib(monkeypatch):
    flag = f"{common.xla_cpu_defaults().YNN_FUSION_FLAG}="
    monkeypatch.setenv("XLA_FLAGS", f"--xla_force_host_platform_device_count=2 {flag}")
    assert common.child_environment()["XLA_FLAGS"] == "--xla_force_host_platform_device_count=2"
    monkeypatch.setenv("XLA_FLAGS", flag)
    assert "XLA_FLAGS" not in common.child_environment()


def test_the_loop_looks_up_the_names_the_bench_workers_set():
    """`common.strl_worker` sets `members.RunLogger` and go1_walk's worker `runner.save_members`
    for a call: the loop must create its loggers and save its checkpoints through those names."""
    from strl_jax.train_loops import members, runner

    assert "RunLogger" in members.start_members.__code__.co_names
    assert "save_members" in runner.run_loop.__code__.co_names
    parameters = list(inspect.signature(runner.save_members).parameters)
    assert parameters == ["axis", "members", "state", "iteration", "meta"]
