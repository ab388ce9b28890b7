"""The XLA:CPU default that importing strl_jax adds (strl_jax/xla_cpu.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from strl_jax.xla_cpu import YNN_FUSION_FLAG, cpu_flags, flag_known, installed_jaxlib, parse_version


@pytest.mark.parametrize(
    "version, known",
    [
        ("0.8.0", False),
        ("0.8.3", True),
        ("0.9.0.1", True),
        ("0.10.2", True),
        ("0.12.0rc1", True),
        ("0.13.0", False),
        ("1.0.0", False),
        ("", False),
        (None, False),
        ("dev", False),
    ],
)
def test_flag_only_for_jaxlib_versions_that_have_it(version, known):
    assert flag_known(version) is known
    assert (YNN_FUSION_FLAG in cpu_flags("", version)) is known


def test_user_flags_are_kept_and_win():
    assert parse_version("0.10.2") == (0, 10, 2)
    assert cpu_flags("--xla_force_host_platform_device_count=4", "0.10.2") == (
        f"--xla_force_host_platform_device_count=4 {YNN_FUSION_FLAG}="
    )
    own = f"{YNN_FUSION_FLAG}=-reduce"
    assert cpu_flags(own, "0.10.2") == own
    assert cpu_flags("--a=1", "0.10.2", opt_out="0") == "--a=1"
    assert cpu_flags("", "0.10.2", opt_out="1") == f"{YNN_FUSION_FLAG}="


def run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "STRL_JAX_XLA_CPU_DEFAULTS")}
    environ.update(env)
    command = [sys.executable, "-c", code]
    return subprocess.run(command, env=environ, capture_output=True, text=True, timeout=300)


def test_importing_strl_jax_sets_a_flag_the_installed_xla_accepts():
    """XLA aborts on flags it does not know: the installed jaxlib must run with what we add."""
    code = (
        "import json, os, strl_jax, jax.numpy as jnp\n"
        "print(json.dumps({'sum': float(jnp.arange(4.0).sum()), 'flags': os.environ.get('XLA_FLAGS', '')}))"
    )
    expected = flag_known(installed_jaxlib())
    for env, added in (({}, expected), ({"STRL_JAX_XLA_CPU_DEFAULTS": "0"}, False)):
        out = run_python(code, **env)
        assert out.returncode == 0, out.stderr[-2000:]
        result = json.loads(out.stdout.strip().splitlines()[-1])
        assert result["sum"] == 6.0
        assert (YNN_FUSION_FLAG in result["flags"]) is added
