"""Optional packages of the test extra (`pip install -e ".[test]"`): where it installs them a
missing one is a failure, not a skip."""

from __future__ import annotations

import sys
from types import ModuleType

import pytest

# The test extra installs MuJoCo Playground and its robot models from this Python on (Playground's
# own requirement); below it, Playground's tests are skipped.
PLAYGROUND_PYTHON = (3, 11)


def require_playground() -> ModuleType:
    """`mujoco_playground`; an ImportError where the test extra installs it, a skip below
    Python 3.11 where it cannot. Works at module level too."""
    if sys.version_info < PLAYGROUND_PYTHON:
        pytest.skip("the test extra installs MuJoCo Playground from Python 3.11 on", allow_module_level=True)
    import mujoco_playground

    return mujoco_playground
