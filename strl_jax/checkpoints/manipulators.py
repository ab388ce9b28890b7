"""Ready-made `runner.ckpt_manipulator`s for `--load` (st_rl's `ckpt_manipulator` hook).

A manipulator is `fn(loaded, current, **kwargs) -> mapped`: `loaded` is the checkpoint's
`{"params": ..., "normalizers": ...}`, `current` the same for this run's fresh initialisation,
both nested dicts of numpy arrays; `mapped` must have `current`'s shapes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

NEW_INPUTS = ("fresh", "zero")


def copy_overlap(loaded: dict, current: dict, new_inputs: str = "fresh", **_: Any) -> dict:
    """Every array of this run, with the loaded values wherever they fit.

    An array of the same shape is taken whole; one of the same rank but another shape gives its
    leading overlap (e.g. a first layer `[4, 64]` loaded into `[6, 64]`: rows 0-3 loaded, rows
    4-5 freshly initialised, as when an observation component is appended); anything else, and
    anything the checkpoint lacks, keeps its fresh value.

    `new_inputs="zero"` starts the grown rows of every `params` kernel (its inputs axis, flax's
    second to last) at zero instead: the new inputs (an appended component, an encoder's latent,
    the outputs of new hidden units) then reach nothing at first, so the grown network acts and
    values exactly as the loaded one did and learns to use them from there (as MuJoCo
    Playground's fine-tuning of a flat-terrain policy on rough terrain starts from that policy).
    Normalisers' new entries keep their fresh statistics either way.
    """
    if new_inputs not in NEW_INPUTS:
        choices = ", ".join(NEW_INPUTS)
        raise ValueError(f"copy_overlap: new_inputs must be one of {choices}, not {new_inputs!r}")
    zero_rows = new_inputs == "zero"
    return {
        k: overlap(loaded.get(k) if isinstance(loaded, dict) else None, v, zero_rows and k == "params")
        for k, v in current.items()
    }


def overlap(loaded: Any, current: Any, zero_rows: bool, name: str = "") -> Any:
    """`current` with `loaded`'s leading overlap; `zero_rows`: grown kernel rows start at zero."""
    if isinstance(current, dict):
        source = loaded if isinstance(loaded, dict) else {}
        return {k: overlap(source.get(k), v, zero_rows, k) for k, v in current.items()}
    fresh = np.array(current)
    if loaded is None:
        return fresh
    old = np.asarray(loaded)
    if old.shape == fresh.shape:
        return old.astype(fresh.dtype)
    if old.ndim != fresh.ndim:
        return fresh
    if zero_rows and name == "kernel" and fresh.ndim >= 2:
        fresh[..., old.shape[-2] :, :] = 0
    cut = tuple(slice(0, min(a, b)) for a, b in zip(old.shape, fresh.shape, strict=True))
    fresh[cut] = old[cut]
    return fresh
