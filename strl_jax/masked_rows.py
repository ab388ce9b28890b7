"""Run a batched function on only the rows that need it (finished envs, time-outs).

Resets and time-out bootstraps concern a few envs per step, but a vmapped computation costs the
same for every row. `where_rows` gathers the masked rows in chunks of a fixed size (static shapes),
computes on those and scatters the results back: the cost follows the number of masked rows, and
the result is the same as computing every row.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from strl_jax.buffers.minibatch import select_columns


def reserved_rows(num_rows: int, fraction: float, minimum: int = 16) -> int:
    """Rows to gather: `fraction` of `num_rows`, rounded up, at least `minimum`, at most all."""
    return min(num_rows, max(minimum, math.ceil(num_rows * fraction)))


def select_rows(mask: jax.Array, new: Any, old: Any) -> Any:
    """Row `i` of `new` where `mask[i]`, of `old` elsewhere (leaves with the rows first)."""

    def pick(a, b):
        return jnp.where(mask.reshape((-1,) + (1,) * (b.ndim - 1)), a.astype(b.dtype), b)

    return jax.tree.map(pick, new, old)


def where_rows(
    mask: jax.Array,
    fn: Callable[[Any], Any],
    inputs: Any,
    otherwise: Any,
    max_rows: int,
    in_axes: Any = 0,
) -> Any:
    """`where(mask, fn(inputs), otherwise)` row by row, computing `fn` only on the masked rows.

    `fn` maps a batch of rows (axis `in_axes` of each input leaf; a pytree prefix of `inputs`) to
    outputs with the rows first, shaped like `otherwise`; its rows must be independent. It runs
    on chunks of `max_rows` gathered rows, as many chunks as the masked rows need (none when no
    row is masked), and is compiled once, for one chunk.
    """
    n = mask.shape[0]
    otherwise = jax.tree.map(lambda x: jnp.asarray(x, x.dtype), otherwise)  # strong types
    if max_rows >= n:
        return select_rows(mask, fn(inputs), otherwise)
    # Masked rows first, then the padding index n, long enough that no chunk runs past the end.
    order = jnp.nonzero(mask, size=n + max_rows, fill_value=n)[0]
    count = jnp.sum(mask)

    def chunk(carry):
        start, out = carry
        idx = jax.lax.dynamic_slice(order, (start,), (max_rows,))
        rows = jnp.minimum(idx, n - 1)
        taken = jax.tree.map(lambda axis, sub: select_columns(sub, rows, axis), in_axes, inputs)
        out = jax.tree.map(lambda o, r: o.at[idx].set(r.astype(o.dtype), mode="drop"), out, fn(taken))
        return start + max_rows, out

    return jax.lax.while_loop(lambda carry: carry[0] < count, chunk, (jnp.int32(0), otherwise))[1]
