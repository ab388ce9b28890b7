"""Ready-made `runner.ckpt_manipulator`s for `--load` (st_rl's `ckpt_manipulator` hook).

A manipulator is `fn(loaded, current, **kwargs) -> mapped`: `loaded` is the checkpoint's
`{"params": ..., "normalizers": ...}`, `current` the same for this run's fresh initialisation,
both nested dicts of numpy arrays; `mapped` must have `current`'s shapes.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def copy_overlap(loaded: dict, current: dict, **_: Any) -> dict:
    """Every array of this run, with the loaded values wherever they fit.

    An array of the same shape is taken whole; one of the same rank but another shape gives its
    leading overlap (e.g. a first layer `[4, 64]` loaded into `[6, 64]`: rows 0-3 loaded, rows
    4-5 freshly initialised, as when an observation component is appended); anything else, and
    anything the checkpoint lacks, keeps its fresh value.
    """
    if isinstance(current, dict):
        source = loaded if isinstance(loaded, dict) else {}
        return {k: copy_overlap(source.get(k), v) for k, v in current.items()}
    fresh = np.array(current)
    if loaded is None:
        return fresh
    old = np.asarray(loaded)
    if old.shape == fresh.shape:
        return old.astype(fresh.dtype)
    if old.ndim != fresh.ndim:
        return fresh
    overlap = tuple(slice(0, min(a, b)) for a, b in zip(old.shape, fresh.shape, strict=True))
    fresh[overlap] = old[overlap]
    return fresh
