"""Orbax's helper threads and logs around a save that failed: the id of the save in flight, the
release of its stranded writer threads, and orbax's own error logs kept out of the user's way
(the failure reaches the user once, as the `CheckpointError` of `checkpoints.orbax_checkpoints`)."""

from __future__ import annotations

import inspect
import logging
import threading
from typing import Any


def current_operation() -> str | None:
    """Orbax's id of the save just started (its helper threads carry it)."""
    try:
        from orbax.checkpoint._src.futures import synchronization

        return synchronization.OperationIdGenerator.get_current_operation_id()
    except (ImportError, AttributeError):
        return None


def release_stranded_writers(operation: str | None) -> None:
    """End the helper threads of a failed orbax save.

    They wait for signals from the part that failed, which never come: without this they hold
    the process for orbax's coordination timeout (minutes), also at exit, then log timeouts.
    Each is cancelled and sent the signals it waits for, so it returns without doing anything;
    the coroutine it would have run is closed (else Python reports it as never awaited at exit).
    """
    if operation is None:
        return
    try:
        from orbax.checkpoint._src.futures import future as ocp_future

        thread_type = ocp_future._SignalingThread
    except (ImportError, AttributeError):
        return
    for thread in threading.enumerate():
        if not isinstance(thread, thread_type) or not thread.is_alive():
            continue
        if getattr(thread, "_operation_id", None) != operation:
            continue
        thread.cancel()
        close_unstarted_coroutines(getattr(thread, "_target", None))
        signals = getattr(thread, "_receive_signals", None)
        if signals:
            ocp_future.set_signals(signals, operation_id=operation)


def close_unstarted_coroutines(function: Any, depth: int = 0) -> None:
    """Close the not yet started coroutines that `function` (a thread's target) would await."""
    for cell in getattr(function, "__closure__", None) or ():
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if inspect.iscoroutine(value):
            if inspect.getcoroutinestate(value) == inspect.CORO_CREATED:
                value.close()
        elif callable(value) and depth < 3:
            close_unstarted_coroutines(value, depth + 1)


class OrbaxErrorFilter(logging.Filter):
    """Drops orbax's own error logs (tracebacks from its writer threads): every failure they
    describe reaches the user once, as a `CheckpointError` or `CheckpointWarning` with its cause."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.levelno >= logging.ERROR and "orbax" in record.pathname)


def quiet_orbax_errors() -> None:
    absl_logger = logging.getLogger("absl")
    if not any(isinstance(f, OrbaxErrorFilter) for f in absl_logger.filters):
        absl_logger.addFilter(OrbaxErrorFilter())
