"""Shared test setup: JAX's persistent compilation cache, so compiled functions survive runs.

The suite runs with XLA's own CPU flags (`STRL_JAX_XLA_CPU_DEFAULTS=0`, set before strl_jax is
imported): the seeded end-to-end tests' thresholds were set under them, and the YNNPACK flag
strl_jax adds changes floating-point rounding (not semantics), hence those seeded runs.
tests/test_xla_cpu.py checks the default itself, in subprocesses with the variable removed.
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("STRL_JAX_XLA_CPU_DEFAULTS", "0")

import jax  # noqa: E402

_cache = os.environ.get("STRL_JAX_CACHE_DIR") or str(Path.home() / ".cache" / "strl_jax" / "xla")
jax.config.update("jax_compilation_cache_dir", _cache)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
