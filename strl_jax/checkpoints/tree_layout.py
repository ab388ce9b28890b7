"""What a checkpoint's pytree looks like: signatures (path -> shape and dtype) checked against the
run's, and the `layout` of the leaves orbax cannot store as they are.

Orbax refuses zero-size arrays (MJX physics states hold several, e.g. `act` of a model without
actuator activations) and typed PRNG keys. `encode_state` stores those leaves as nothing
(zero-size) or as their key data and records their shape and dtype in the layout; `decode_leaf`
rebuilds them on restore.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from strl_jax.errors import CheckpointError, CheckpointMismatchError

Signature = dict[str, tuple[tuple[int, ...], str]]
Layout = dict[str, dict[str, Any]]  # path -> {"shape", "dtype", "stored": "nothing" | "key_data", "impl"}


# ---------------------------------------------------------------------------- tree signatures
def _key_name(key: Any) -> str:
    for attr in ("key", "name", "idx"):
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


def path_name(path: tuple) -> str:
    """`train_state.params.params.actor.hidden_0.kernel`: the same for a flax dataclass, a
    namedtuple or the nested dicts orbax stores them as."""
    return ".".join(_key_name(k) for k in path)


def dtype_name(dtype: Any) -> str:
    """`float32`, `bool`, ... or `key<fry>` for typed PRNG keys (which numpy cannot name)."""
    if jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
        return str(dtype)
    return str(np.dtype(dtype))


def tree_signature(tree: Any) -> Signature:
    """`{path: (shape, dtype)}` of every array leaf (arrays, ShapeDtypeStructs or orbax metadata)."""
    return {
        path_name(path): (tuple(leaf.shape), dtype_name(leaf.dtype))
        for path, leaf in jax.tree_util.tree_leaves_with_path(tree)
    }


def as_nested_dict(tree: Any) -> dict:
    """`tree` as the nested dicts (by `path_name` parts) that orbax restores it as."""
    out: dict = {}
    for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
        *parents, last = (_key_name(k) for k in path)
        node = out
        for name in parents:
            node = node.setdefault(name, {})
        node[last] = leaf
    return out


def check_signatures(expected: Signature, found: Signature, where: str, limit: int = 5) -> None:
    """Raise `CheckpointMismatchError` naming the entries whose shape or dtype differ."""
    problems = []
    for name in sorted(set(expected) | set(found), key=_relevance):
        if name not in found:
            problems.append(f"{name}: expected {_fmt(expected[name])}, missing in the checkpoint")
        elif name not in expected:
            problems.append(f"{name}: in the checkpoint ({_fmt(found[name])}), not in the configured state")
        elif expected[name] != found[name]:
            problems.append(
                f"{name}: checkpoint has {_fmt(found[name])}, the config needs {_fmt(expected[name])}"
            )
    if problems:
        more = f"\n  ... and {len(problems) - limit} more" if len(problems) > limit else ""
        raise CheckpointMismatchError(
            f"checkpoint {where} does not fit the configured task/network "
            f"({len(problems)} entries differ):\n  "
            + "\n  ".join(problems[:limit])
            + more
            + _auto_reset_hint(expected, found)
        )


def _auto_reset_hint(expected: Signature, found: Signature) -> str:
    """The setting to resume with when only the env's initial-state pool differs: runs written
    before `env.auto_reset=pool` became the default hold no pool."""
    pool = lambda sig: any(".env_state.pool" in name for name in sig)  # noqa: E731
    if pool(expected) == pool(found):
        return ""
    written = "pool" if pool(found) else "in_step"
    return (
        f"\n  its envs were written with env.auto_reset={written}: "
        f"resume with the override env.auto_reset={written}"
    )


def _relevance(name: str) -> tuple[int, str]:
    """Parameters first, then observations and normalisers: they say best what differs."""
    if name.startswith("train_state.params."):
        return 0, name
    if name.startswith(("train_state.normalizers.", "rollout_state.obs.")):
        return 1, name
    return 2, name


def _fmt(sig: tuple[tuple[int, ...], str]) -> str:
    return f"shape {sig[0]} {sig[1]}"


# ---------------------------------------------------------------------------- stored form
def encode_state(tree: Any) -> tuple[Any, Layout]:
    """`(storable tree, layout)`: orbax refuses zero-size arrays and typed PRNG keys, so the
    former become empty nodes (no data) and the latter their key data; `layout` records what
    each was, for `stored_signature` and `fill_from`. Leaves orbax cannot store at all (object
    or string arrays) raise a `CheckpointError` naming them before anything is written."""
    layout: Layout = {}

    def encode(path, leaf):
        name = path_name(path)
        dtype = getattr(leaf, "dtype", None)
        if dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
            impl = str(jax.random.key_impl(leaf))
            layout[name] = {"shape": list(leaf.shape), "dtype": str(dtype), "impl": impl}
            leaf = jax.random.key_data(leaf)
            layout[name]["stored"] = "nothing" if leaf.size == 0 else "key_data"
            return None if leaf.size == 0 else leaf
        if dtype is None or not hasattr(leaf, "shape"):
            leaf = np.asarray(leaf)
            dtype = leaf.dtype
        if np.dtype(dtype).kind in "OSUV" and not jax.numpy.issubdtype(dtype, jax.numpy.number):
            raise CheckpointError(
                f"state entry {name} cannot be checkpointed: dtype {np.dtype(dtype)} is not a "
                "numeric or bool array"
            )
        if int(np.prod(leaf.shape)) == 0:
            layout[name] = {"shape": list(leaf.shape), "dtype": dtype_name(dtype), "stored": "nothing"}
            return None
        return leaf

    return jax.tree_util.tree_map_with_path(encode, tree), layout


def layout_of(meta: Mapping[str, Any]) -> Layout:
    """The layout of a step's meta (format 1 checkpoints store every leaf as it is)."""
    return dict(meta.get("layout") or {})


def decode_leaf(template: Any, value: Any, entry: Mapping[str, Any], sharding: Any = None) -> Any:
    """One leaf of `layout` back in the form of `template` (shape and dtype of the configured state)."""
    is_key = "impl" in entry
    data_template = jax.eval_shape(jax.random.key_data, template) if is_key else template
    if entry["stored"] == "nothing":
        zeros = np.zeros(data_template.shape, data_template.dtype)
        value = zeros if sharding is None else _place(zeros, sharding)
    return jax.random.wrap_key_data(value, impl=entry["impl"]) if is_key else value


def _place(host: np.ndarray, sharding: Any) -> jax.Array:
    """`host` (the same on every process) as a global array laid out by `sharding`."""
    return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])


# ---------------------------------------------------------------------------- the manager
