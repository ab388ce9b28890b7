"""Keep known-harmless start-up chatter of the physics packages out of the console.

Importing MuJoCo's MJX prints "Failed to import warp: ..." and "Failed to import mujoco_warp:
..." where the optional NVIDIA Warp backend is not installed (strl_jax never uses it unless
`env.playground.impl=warp` is asked for, which then fails with its own error), and every Brax
system loaded from MJCF warns that Brax's pipelines are no longer maintained (strl_jax's Brax
tasks default to the maintained MJX backend). Only these exact lines are dropped: anything else
those imports print, and every other warning, still reaches the console.
"""

from __future__ import annotations

import contextlib
import io
import sys
import warnings

KNOWN_IMPORT_LINES = ("Failed to import warp:", "Failed to import mujoco_warp:")
BRAX_UNMAINTAINED_WARNING = r"Brax System, piplines and environments are not actively being maintained"


def import_physics_quietly() -> None:
    """Import `mujoco.mjx` (which brax imports) without its known lines; filter brax's notice."""
    warnings.filterwarnings("ignore", message=BRAX_UNMAINTAINED_WARNING, category=UserWarning)
    if "mujoco.mjx" in sys.modules:
        return
    captured = io.StringIO()
    try:
        with contextlib.redirect_stdout(captured):
            import mujoco.mjx  # noqa: F401, PLC0415 - imported here for its side effect only
    finally:
        for line in captured.getvalue().splitlines(keepends=True):
            if not line.startswith(KNOWN_IMPORT_LINES):
                sys.stdout.write(line)


import_physics_quietly()
