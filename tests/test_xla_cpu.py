"""The XLA:CPU flags that importing strl_jax adds (strl_jax/xla_cpu.py): the YNNPACK default and,
on request, the fast-compile flag the suite runs with."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from strl_jax.xla_cpu import (
    FAST_COMPILE_FLAG,
    FAST_COMPILE_VARIABLE,
    FAST_COMPILE_VERSIONS,
    YNN_FUSION_FLAG,
    cpu_flags,
    flag_known,
    installed_jaxlib,
    parse_version,
)

FAST = f"{FAST_COMPILE_FLAG}=false"


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


@pytest.mark.parametrize(
    "version, known", [("0.7.2", False), ("0.8.0", True), ("0.10.2", True), ("0.13.0", False), (None, False)]
)
def test_fast_compile_only_on_request_and_for_jaxlib_versions_that_have_it(version, known):
    assert flag_known(version, FAST_COMPILE_VERSIONS) is known
    assert (FAST in cpu_flags("", version, fast_compile="1")) is known
    assert FAST not in cpu_flags("", version) and FAST not in cpu_flags("", version, fast_compile="0")
    # independent of the YNNPACK default and its opt-out; a value set by hand wins
    assert (FAST in cpu_flags("", version, opt_out="0", fast_compile="yes")) is known
    assert cpu_flags(f"{FAST_COMPILE_FLAG}=true", "0.10.2", fast_compile="1") == (
        f"{FAST_COMPILE_FLAG}=true {YNN_FUSION_FLAG}="
    )


def test_the_suite_compiles_with_the_fast_compile_flag():
    """tests/conftest.py asks for it before jax starts (its time is mostly compiling)."""
    if os.environ.get(FAST_COMPILE_VARIABLE) != "1":
        pytest.fail(f"{FAST_COMPILE_VARIABLE} is {os.environ.get(FAST_COMPILE_VARIABLE)!r}, conftest sets 1")
    assert (FAST in os.environ.get("XLA_FLAGS", "")) is flag_known(installed_jaxlib(), FAST_COMPILE_VERSIONS)


def run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    dropped = ("XLA_FLAGS", "STRL_JAX_XLA_CPU_DEFAULTS", FAST_COMPILE_VARIABLE)
    environ = {k: v for k, v in os.environ.items() if k not in dropped}
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
    fast = flag_known(installed_jaxlib(), FAST_COMPILE_VERSIONS)
    cases = (
        ({}, expected, False),
        ({"STRL_JAX_XLA_CPU_DEFAULTS": "0"}, False, False),
        ({FAST_COMPILE_VARIABLE: "1"}, expected, fast),
    )
    for env, added, fast_added in cases:
        out = run_python(code, **env)
        assert out.returncode == 0, out.stderr[-2000:]
        result = json.loads(out.stdout.strip().splitlines()[-1])
        assert result["sum"] == 6.0
        assert (YNN_FUSION_FLAG in result["flags"]) is added
        assert (FAST in result["flags"]) is fast_added
