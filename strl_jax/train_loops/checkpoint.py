"""Orbax checkpoints of the complete run state, with shape checks and corruption fallback.

A checkpoint step holds two items: `state` (the TrainState and RolloutState pytrees) and
`meta` (JSON: iteration, the host-side logging window, elapsed wall time and the resolved
config). Orbax writes each step into a temporary folder and renames it when complete, so a
process killed while saving leaves the previous steps intact; a step that is nevertheless
unreadable is skipped with a `CheckpointWarning` in favour of the one before it.
"""

from __future__ import annotations

import json
import shutil
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from strl_jax.errors import CheckpointError, CheckpointMismatchError, CheckpointWarning

CHECKPOINT_DIR = "checkpoints"
SUPERSEDED_DIR = "superseded_checkpoints"
FORMAT_VERSION = 1

Signature = dict[str, tuple[tuple[int, ...], str]]


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


def tree_signature(tree: Any) -> Signature:
    """`{path: (shape, dtype)}` of every array leaf (arrays, ShapeDtypeStructs or orbax metadata)."""
    return {
        path_name(path): (tuple(leaf.shape), str(np.dtype(leaf.dtype)))
        for path, leaf in jax.tree_util.tree_leaves_with_path(tree)
    }


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
            f"({len(problems)} entries differ):\n  " + "\n  ".join(problems[:limit]) + more
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


# ---------------------------------------------------------------------------- the manager
def open_manager(directory: str | Path, max_to_keep: int | None = None, read_only: bool = False):
    """A CheckpointManager for `directory` with the `state` + `meta` items registered.

    `read_only` only promises not to write (orbax's own read-only mode logs a warning per use).
    """
    if read_only and not Path(directory).is_dir():
        raise CheckpointError(f"no checkpoints in {str(directory)!r}")
    policy = ocp.checkpoint_managers.LatestN(max_to_keep) if max_to_keep and max_to_keep > 0 else None
    options = ocp.CheckpointManagerOptions(
        preservation_policy=policy,
        cleanup_tmp_directories=not read_only,
        create=not read_only,
        enable_async_checkpointing=True,
    )
    handlers = {"state": ocp.StandardCheckpointHandler(), "meta": ocp.JsonCheckpointHandler()}
    return ocp.CheckpointManager(Path(directory).absolute(), item_handlers=handlers, options=options)


def host_copy(tree: Any) -> Any:
    """Own copies, so the next (donating) iteration cannot touch what is being written: numpy
    arrays where this process holds the whole array, else fresh device copies of the global
    arrays (orbax then writes each process's shards; it copies them to host before returning)."""

    def copy(x):
        if isinstance(x, jax.Array) and not x.is_fully_addressable:
            return jax.numpy.copy(x)
        return np.array(x, copy=True)

    return jax.tree.map(copy, tree)


def save_checkpoint(manager, iteration: int, state: Mapping[str, Any], meta: Mapping[str, Any]) -> None:
    """Start writing step `iteration` in the background (call `manager.wait_until_finished`).

    Both items are copied first: the writer runs while the loop goes on changing its values.
    """
    meta = json.loads(json.dumps({"format": FORMAT_VERSION, "iteration": int(iteration), **meta}))
    state = host_copy(dict(state))
    args = ocp.args.Composite(state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta))
    manager.save(int(iteration), args=args, force=True)


def read_meta(manager, step: int) -> dict:
    return manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]


def first_readable(manager, step: int | None, read: Callable[[int], Any]) -> tuple[Any, int]:
    """`(read(step), step)` for `step`, or else for the newest step that `read` manages to read.

    Unreadable steps are skipped with a `CheckpointWarning`; a `CheckpointMismatchError` (a
    config problem, not a damaged file) is raised at once.
    """
    where = str(manager.directory)
    steps = sorted(manager.all_steps(), reverse=True)
    if not steps:
        raise CheckpointError(f"no checkpoints in {where!r}")
    if step is not None and step not in steps:
        raise CheckpointError(f"no checkpoint {step} in {where!r}; available: {sorted(steps)}")
    candidates = [step] if step is not None else steps
    for i, candidate in enumerate(candidates):
        try:
            return read(candidate), candidate
        except CheckpointMismatchError:
            raise
        except Exception as err:  # noqa: BLE001 - any damage to a step is handled the same way
            reason = f"{type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"
            if step is not None:
                message = f"checkpoint {candidate} in {where!r} cannot be read ({reason})"
                raise CheckpointError(message) from None
            rest = candidates[i + 1 :]
            fallback = f"falling back to checkpoint {rest[0]}" if rest else "no older checkpoint left"
            warnings.warn(
                f"checkpoint {candidate} in {where!r} cannot be read ({reason}); {fallback}",
                CheckpointWarning,
                stacklevel=3,
            )
    raise CheckpointError(f"no readable checkpoint in {where!r}")


def stored_signature(manager, step: int) -> Signature:
    """Shapes and dtypes of the stored state, from orbax's metadata (no array is read)."""
    metadata = manager.item_metadata(step)["state"]
    if metadata is None:
        raise ValueError("the checkpoint has no state metadata")
    return tree_signature(metadata)


def restore_checkpoint(
    manager, abstract_state: Mapping[str, Any], step: int | None = None, shardings: Any = None
) -> tuple[dict[str, Any], dict, int]:
    """Restore `(state, meta, step)`: `step`, or else the newest readable one.

    The shapes are compared with `abstract_state` before any array is read, so that a checkpoint
    from another task or network fails with a message naming the entry. Arrays are then matched
    by path, so empty parts of the state (`{}`, `None`) need not be stored alike. With
    `shardings` (a tree like `abstract_state`), each process reads only its shards of each
    array, placed on the current mesh: a run saved on N devices resumes on M.
    """
    expected = tree_signature(abstract_state)
    by_path = None
    if shardings is not None:
        is_sharding = lambda x: isinstance(x, jax.sharding.Sharding)  # noqa: E731
        by_path = {
            path_name(p): s for p, s in jax.tree_util.tree_leaves_with_path(shardings, is_leaf=is_sharding)
        }

    def read(candidate: int):
        check_signatures(expected, stored_signature(manager, candidate), f"{manager.directory}/{candidate}")
        raw, meta = restore_raw(manager, candidate, by_path)
        return fill_from(abstract_state, raw), meta

    (state, meta), found = first_readable(manager, step, read)
    return dict(state), meta, found


def restore_raw(
    manager, step: int, shardings: Mapping[str, Any] | None = None
) -> tuple[dict[str, Any], dict]:
    """The stored state as nested dicts of arrays, plus meta.

    The target is built from the stored metadata: arrays go to `shardings[path]` where given,
    else to this process's first device (whatever devices the checkpoint was written from).
    """
    metadata = manager.item_metadata(step)["state"]
    if metadata is None:
        raise ValueError("the checkpoint has no state metadata")
    default = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    target = jax.tree_util.tree_map_with_path(
        lambda p, m: jax.ShapeDtypeStruct(
            tuple(m.shape), m.dtype, sharding=(shardings or {}).get(path_name(p), default)
        ),
        metadata,
    )
    args = ocp.args.Composite(state=ocp.args.StandardRestore(target), meta=ocp.args.JsonRestore())
    restored = manager.restore(step, args=args)
    return dict(restored["state"]), dict(restored["meta"])


def fill_from(abstract: Any, raw: Any, prefix: str = "") -> Any:
    """`abstract`'s structure with the arrays of `raw` (same paths, as `tree_signature` names them)."""
    flat = {path_name(p): leaf for p, leaf in jax.tree_util.tree_leaves_with_path(raw)}

    def pick(p, leaf):
        value = flat[prefix + path_name(p)]
        if isinstance(value, jax.Array) and value.dtype == leaf.dtype:
            return value  # already placed where it belongs (possibly one shard of a global array)
        return np.asarray(value, leaf.dtype)

    return jax.tree_util.tree_map_with_path(pick, abstract)


def supersede_after(manager, log_dir: Path, step: int) -> list[int]:
    """Move steps newer than `step` aside: the continued run writes those steps again."""
    newer = [s for s in manager.all_steps() if s > step]
    if not newer:
        return []
    target_root = Path(log_dir) / SUPERSEDED_DIR
    target_root.mkdir(parents=True, exist_ok=True)
    for s in newer:
        target, n = target_root / str(s), 1
        while target.exists():
            target, n = target_root / f"{s}_{n}", n + 1
        shutil.move(str(Path(manager.directory) / str(s)), str(target))
    manager.reload()
    warnings.warn(
        f"continuing from checkpoint {step}: moved newer checkpoints {newer} to {str(target_root)!r}",
        CheckpointWarning,
        stacklevel=2,
    )
    return newer


# ---------------------------------------------------------------------------- locating checkpoints
def locate(path: str | Path) -> tuple[Path, int | None]:
    """`(checkpoints folder, step or None)` for a run folder, a checkpoints folder or a step folder."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"{str(path)!r} does not exist")
    if (path / CHECKPOINT_DIR).is_dir():
        return path / CHECKPOINT_DIR, None
    if path.is_dir() and path.name.isdigit() and (path / "state").is_dir():
        return path.parent, int(path.name)
    if path.is_dir() and any(p.name.isdigit() for p in path.iterdir()):
        return path, None
    raise CheckpointError(
        f"no checkpoints found at {str(path)!r}: expected a run folder (with {CHECKPOINT_DIR}/), "
        f"a {CHECKPOINT_DIR}/ folder or one checkpoint step folder"
    )


def load_params_and_normalizers(
    path: str | Path, abstract_train_state: Any, step: int | None = None
) -> tuple[Any, Any, int]:
    """`(params, normalizers, step)` of another run, checked against `abstract_train_state`.

    For warm starts and export: the newest readable step unless `step` (or a step folder) is given.
    """
    directory, located = locate(path)
    wanted = {"params": abstract_train_state.params, "normalizers": abstract_train_state.normalizers}
    expected = {f"train_state.{k}": v for k, v in tree_signature(wanted).items()}
    prefixes = tuple(f"train_state.{k}." for k in wanted)

    def read(candidate: int):
        stored = stored_signature(manager, candidate)
        found = {k: v for k, v in stored.items() if k.startswith(prefixes)}
        check_signatures(expected, found, f"{directory}/{candidate}")
        raw, _ = restore_raw(manager, candidate)
        return fill_from(wanted, raw, prefix="train_state.")

    manager = open_manager(directory, read_only=True)
    try:
        picked, found = first_readable(manager, step if step is not None else located, read)
    finally:
        manager.close()
    return picked["params"], picked["normalizers"], found


def read_checkpoint_meta(path: str | Path, step: int | None = None) -> tuple[dict, int]:
    """`(meta, step)` of the newest readable (or the given) step: holds the config it was made with."""
    directory, located = locate(path)
    manager = open_manager(directory, read_only=True)
    try:
        return first_readable(manager, step if step is not None else located, lambda c: read_meta(manager, c))
    finally:
        manager.close()
