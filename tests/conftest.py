"""Shared test setup: JAX's persistent compilation cache, so compiled functions survive runs."""

from __future__ import annotations

import os
from pathlib import Path

import jax

_cache = os.environ.get("STRL_JAX_CACHE_DIR") or str(Path.home() / ".cache" / "strl_jax" / "xla")
jax.config.update("jax_compilation_cache_dir", _cache)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
