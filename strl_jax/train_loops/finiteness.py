"""The per-iteration finiteness checks: inside the iteration, per checked quantity (loss terms and
gradients of every optimiser step, the parameters after the update) the first optimiser step at
which it was not finite; on the host, the names of those that failed, the earliest first."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

NEVER = np.iinfo(np.int32).max  # a finiteness check that never failed


def finite(tree: Any) -> jax.Array:
    """True when every element of every leaf is finite (a scalar bool)."""
    leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.asarray(True)


def first_failure(ok: jax.Array) -> jax.Array:
    """Index of the first False of a `[steps]` bool array (the optimiser step), or `NEVER`."""
    return jnp.where(jnp.all(ok), NEVER, jnp.argmin(ok)).astype(jnp.int32)


def check_name(stage: int, quantity: str) -> str:
    """`"<stage>:<quantity>"`: within one optimiser step, loss terms (1) come before gradients (2)
    and parameters (3); the prefix keeps that order when the names are sorted on the host."""
    return f"{stage}:{quantity}"


def first_non_finite(checks: dict) -> list[str]:
    """The quantities that stopped being finite, the earliest first: by optimiser step, then by
    stage (host side). A NaN spreads to everything after it; the first name is the cause."""
    failed = sorted((int(step), name) for name, step in checks.items() if int(step) != NEVER)
    return [name.split(":", 1)[1] for _, name in failed]
