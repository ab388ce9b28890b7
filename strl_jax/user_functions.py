"""Functions a config names as `module:function` (st_rl's hooks such as `ckpt_manipulator`)."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from typing import Any

from strl_jax.errors import ConfigError


def is_function_spec(spec: str) -> bool:
    """Whether `spec` looks like `package.module:function`."""
    module, _, name = spec.partition(":")
    return bool(module and name) and all(
        part.isidentifier() for part in [*module.split("."), *name.split(".")]
    )


def check_function_spec(spec: str, option: str) -> None:
    """A ConfigError unless `spec` looks like `package.module:function`."""
    if not is_function_spec(spec):
        raise ConfigError(f"{option}={spec!r} must name a function as 'package.module:function'")


def ensure_cwd_on_path() -> None:
    """Modules a config names are imported from the current folder too, as `python -m` does."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)


def import_function(spec: str, option: str) -> Callable[..., Any]:
    """The callable `spec` names (imported from the current folder or the installed packages), or a
    ConfigError saying what is missing."""
    check_function_spec(spec, option)
    ensure_cwd_on_path()
    module_name, _, name = spec.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as err:
        raise ConfigError(f"{option}={spec!r}: cannot import module {module_name!r} ({err})") from None
    for attr in name.split("."):
        if not hasattr(target, attr):
            raise ConfigError(f"{option}={spec!r}: module {module_name!r} has no attribute {name!r}")
        target = getattr(target, attr)
    if not callable(target):
        raise ConfigError(f"{option}={spec!r} is a {type(target).__name__}, not a function")
    return target
