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

`STRL_JAX_XLA_CPU_FAST_COMPILE=1` trades step speed for compile time, for runs that compile more
than they step (the test suite sets it): `--xla_cpu_use_fusion_emitters=false` emits fusions with
XLA's older elemental emitter, whose programs compile 13-34% faster and whose env steps run 20-35%
slower at training sizes (BENCHMARKS.md, "Compile time on the CPU"). Off by default.
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
FAST_COMPILE_FLAG = "--xla_cpu_use_fusion_emitters"
# found in the shared libraries of jaxlib 0.8.0, 0.9.0 and 0.10.2
FAST_COMPILE_VERSIONS = ((0, 8, 0), (0, 12, 99))
FAST_COMPILE_VARIABLE = "STRL_JAX_XLA_CPU_FAST_COMPILE"


def parse_version(text: str) -> tuple[int, ...]:
    """`"0.10.2"` -> (0, 10, 2); `"0.9.0.1"` and `"0.12.0rc1"` -> their first three numbers."""
    match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    return tuple(int(part or 0) for part in match.groups()) if match else ()


def flag_known(jaxlib_version: str | None, versions: tuple = FLAG_VERSIONS) -> bool:
    """Whether jaxlib `jaxlib_version` lies in `versions` (first, last), the releases known to
    have a flag (by default the YNNPACK fusion flag's)."""
    if not jaxlib_version or not parse_version(jaxlib_version):
        return False
    version = parse_version(jaxlib_version)
    low, high = versions
    return low <= version <= high


def switched_on(value: str | None) -> bool:
    """Whether an environment variable's value asks for something ("1", "true", "yes", "on")."""
    return value is not None and value.strip().lower() in ("1", "true", "yes", "on")


def installed_jaxlib() -> str | None:
    try:
        return metadata.version("jaxlib")
    except metadata.PackageNotFoundError:
        return None


def cpu_flags(
    xla_flags: str, jaxlib_version: str | None, opt_out: str | None = None, fast_compile: str | None = None
) -> str:
    """`xla_flags` with the YNNPACK default added where it applies, and the fast-compile flag where
    `fast_compile` (STRL_JAX_XLA_CPU_FAST_COMPILE's value) asks for it; a flag `xla_flags` sets
    already is left as it is."""
    added = []
    opted_out = opt_out is not None and opt_out.strip().lower() in ("0", "false", "no", "off")
    if not opted_out and YNN_FUSION_FLAG.lstrip("-") not in xla_flags and flag_known(jaxlib_version):
        added.append(f"{YNN_FUSION_FLAG}=")
    fast = switched_on(fast_compile) and flag_known(jaxlib_version, FAST_COMPILE_VERSIONS)
    if fast and FAST_COMPILE_FLAG.lstrip("-") not in xla_flags:
        added.append(f"{FAST_COMPILE_FLAG}=false")
    return " ".join([xla_flags, *added]).strip() if added else xla_flags


def added_flags() -> tuple[str, ...]:
    """The flags `cpu_flags` may add, as they appear in `XLA_FLAGS` (bench workers take them out
    and add them again for their own jaxlib)."""
    return (f"{YNN_FUSION_FLAG}=", f"{FAST_COMPILE_FLAG}=false")


def apply_cpu_defaults(environ: os._Environ | dict | None = None) -> bool:
    """Add the defaults to `XLA_FLAGS` of `environ` (the process's); True if any was added."""
    environ = os.environ if environ is None else environ
    before = environ.get("XLA_FLAGS", "")
    after = cpu_flags(
        before, installed_jaxlib(), environ.get(OPT_OUT_VARIABLE), environ.get(FAST_COMPILE_VARIABLE)
    )
    if after == before:
        return False
    environ["XLA_FLAGS"] = after
    return True
