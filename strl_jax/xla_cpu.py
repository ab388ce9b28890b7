"""XLA:CPU defaults that keep brax's simulators fast on the jaxlib versions that need them.

From jaxlib 0.8.3 on, XLA:CPU hands elementwise and reduction fusions to YNNPACK. On brax's
batched env step this halves the speed on x86 CPUs: hopper's positional step runs at about 16k
env steps/s on jaxlib 0.10.2 against about 31k on 0.7.2, and the very same StableHLO program
(exported under 0.7.2) is just as slow on 0.10.2, so the cause is the compiler, not the program
(`bench/xla_versions.py`; jax-ml/jax#37465 reports the same regression for reductions).
`--xla_cpu_experimental_ynn_fusion_type=` (an empty set of YNNPACK fusion types) restores the old
speed. The flag only concerns the CPU backend.

XLA reads `XLA_FLAGS` once, when jax creates its first backend, and aborts the process on a flag
it does not know; the default is therefore added only for jaxlib versions known to have the
flag, only when `XLA_FLAGS` does not set it already, and not at all with
`STRL_JAX_XLA_CPU_DEFAULTS=0`. Importing `strl_jax` applies it (no effect when jax has already
created its backends). This module imports nothing outside the standard library, so that other
interpreters (the benchmarks' brax venv) can load it by path.
"""

from __future__ import annotations

import os
import re
from importlib import metadata

YNN_FUSION_FLAG = "--xla_cpu_experimental_ynn_fusion_type"
# jaxlib releases whose XLA has the flag (checked in each release's shared libraries); on others
# XLA would abort on it. 0.8.0 and older lack it; releases after 0.12 are not checked yet.
FLAG_VERSIONS = ((0, 8, 3), (0, 12, 99))
OPT_OUT_VARIABLE = "STRL_JAX_XLA_CPU_DEFAULTS"


def parse_version(text: str) -> tuple[int, ...]:
    """`"0.10.2"` -> (0, 10, 2); `"0.9.0.1"` and `"0.12.0rc1"` -> their first three numbers."""
    match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    return tuple(int(part or 0) for part in match.groups()) if match else ()


def flag_known(jaxlib_version: str | None) -> bool:
    """Whether jaxlib `jaxlib_version` has the YNNPACK fusion flag."""
    if not jaxlib_version or not parse_version(jaxlib_version):
        return False
    version = parse_version(jaxlib_version)
    low, high = FLAG_VERSIONS
    return low <= version <= high


def installed_jaxlib() -> str | None:
    try:
        return metadata.version("jaxlib")
    except metadata.PackageNotFoundError:
        return None


def cpu_flags(xla_flags: str, jaxlib_version: str | None, opt_out: str | None = None) -> str:
    """`xla_flags` with the YNNPACK default added where it applies (else unchanged)."""
    if opt_out is not None and opt_out.strip().lower() in ("0", "false", "no", "off"):
        return xla_flags
    if YNN_FUSION_FLAG.lstrip("-") in xla_flags or not flag_known(jaxlib_version):
        return xla_flags
    return f"{xla_flags} {YNN_FUSION_FLAG}=".strip()


def apply_cpu_defaults(environ: os._Environ | dict | None = None) -> bool:
    """Add the default to `XLA_FLAGS` of `environ` (the process's); True if it was added."""
    environ = os.environ if environ is None else environ
    before = environ.get("XLA_FLAGS", "")
    after = cpu_flags(before, installed_jaxlib(), environ.get(OPT_OUT_VARIABLE))
    if after == before:
        return False
    environ["XLA_FLAGS"] = after
    return True
