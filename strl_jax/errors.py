"""Every error a user can act on, in one module that imports nothing of strl_jax.

Each message says what is wrong and what the valid choices are; the command-line tools turn
these into a one-line `error: ...` and an exit code instead of a traceback.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A configuration problem the user can fix; the message says what and how."""


class CheckpointError(Exception):
    """A checkpoint problem the user can act on; the message says what and where."""


class CheckpointDamage(CheckpointError):
    """A checkpoint step whose files are missing, truncated or unreadable (resume falls back)."""


class CheckpointMismatchError(CheckpointError):
    """The checkpoint's arrays do not fit the state the config builds."""


class CheckpointWarning(UserWarning):
    """A checkpoint was skipped (unreadable) or moved aside."""


class MotionFileError(ValueError):
    """A motion file or dataset that cannot be used; the message names the file and the problem."""


class ExportError(ValueError):
    """The policy cannot be expressed in the requested format; the message says why."""


class CollectError(Exception):
    """A collection that cannot start or continue; the message says why."""


class CollectionIncomplete(CollectError):
    """`max_env_steps` ran out before the dataset met its minimums (what was found is saved)."""


class PlotError(ValueError):
    """A run folder without readable metrics."""


class NonFiniteError(RuntimeError):
    """Training produced a NaN or infinity; the message names the first non-finite quantity."""


class DivergenceError(RuntimeError):
    """Training stayed finite but ran away (`runner.stop_on_divergence`); the message says what."""


class DivergenceWarning(RuntimeWarning):
    """Training stayed finite but ran away: the KL, value loss or action std far past its bound."""
