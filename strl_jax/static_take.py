"""Indexing with static indices as slices and a concatenation, not a gather.

Adjacent indices form one slice, so XLA sees plain slices (cheap, fusable) and the ONNX export
(`strl_jax.onnx_graph`) needs no gather: used for observation groups and components everywhere.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp


def contiguous_runs(indices: Sequence[int], size: int) -> tuple[tuple[int, int], ...]:
    """`(start, stop)` runs covering `indices` in order (negative indices count from `size`)."""
    runs: list[list[int]] = []
    for i in (int(i) % size for i in indices):
        if runs and runs[-1][1] == i:
            runs[-1][1] = i + 1
        else:
            runs.append([i, i + 1])
    return tuple((start, stop) for start, stop in runs)


def take_static(x: jax.Array, indices: Sequence[int]) -> jax.Array:
    """`x[..., indices]` for static `indices`, as slices (no gather): adjacent indices form one slice."""
    parts = [x[..., start:stop] for start, stop in contiguous_runs(indices, x.shape[-1])]
    return parts[0] if len(parts) == 1 else jnp.concatenate(parts, axis=-1)
