"""Optional packages of the test extra (`pip install -e ".[test]"`): every one of them installs
wherever strl_jax does (pyproject.toml's `requires-python` is Playground's), so a missing one is
a failure, never a skip."""

from __future__ import annotations

from types import ModuleType


def require_playground() -> ModuleType:
    """`mujoco_playground`, imported: an ImportError (a failed test, or a failed module where a
    module calls it at import) says the test extra is not installed."""
    import mujoco_playground

    return mujoco_playground
