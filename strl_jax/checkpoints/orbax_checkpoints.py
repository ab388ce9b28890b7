"""Orbax checkpoints of the complete run state, with shape checks and corruption fallback.

A checkpoint step holds two items: `state` (the TrainState and RolloutState pytrees) and
`meta` (JSON: iteration, the host-side logging window, elapsed wall time, the resolved config
and the `layout` of leaves orbax cannot store as they are), plus a record of its files (size and
SHA-256 of each: `checkpoints.file_record`). Orbax writes each step into a temporary folder and
renames it when complete, so a process killed while saving leaves the previous steps intact.

Before a step is restored every file is checked against its record: a step with any file
missing, cut short or overwritten (`CheckpointDamage`, naming the file) is skipped with a
`CheckpointWarning` in favour of the one before it, and with no intact step left the
`CheckpointError` names each step's damage. A step whose files are as written is restored
strictly: a failure then is a bug, and propagates with its cause. (Steps written before records
existed are read once in full instead; any failure to read one counts as its damage.)

Orbax refuses zero-size arrays and typed PRNG keys: those leaves are stored as nothing or as their
key data, their shape and dtype in `layout`, and rebuilt on restore (`checkpoints.tree_layout`).

A save that fails (disk full, permission denied, ...) is reported as one `CheckpointError`
naming the folder, the cause and the newest checkpoint still intact; orbax's helper threads of
that save are released instead of waiting out their timeouts.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import warnings
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from strl_jax.checkpoints.file_record import (
    RECORD,
    RecordError,
    complete_record,
    read_record,
    record_damage,
    record_items,
)
from strl_jax.checkpoints.orbax_threads import current_operation, quiet_orbax_errors, release_stranded_writers
from strl_jax.checkpoints.tree_layout import (
    Layout,
    Signature,
    check_signatures,
    decode_leaf,
    encode_state,
    layout_of,
    path_name,
    tree_signature,
)
from strl_jax.errors import CheckpointDamage, CheckpointError, CheckpointWarning

CHECKPOINT_DIR = "checkpoints"
SUPERSEDED_DIR = "superseded_checkpoints"
# 2: meta["layout"] lists the leaves stored as nothing or as key data; 3: the step holds a file record
FORMAT_VERSION = 3
RECORDED_FORMAT = 3  # the first format whose steps hold a record of their files


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
    recorder = None if read_only else _StepRecorder(Path(directory).absolute())
    if recorder is not None:
        options.async_options = _async_options(recorder)
    handlers = {"state": ocp.StandardCheckpointHandler(), "meta": ocp.JsonCheckpointHandler()}
    quiet_orbax_errors()
    manager = ocp.CheckpointManager(Path(directory).absolute(), item_handlers=handlers, options=options)
    if recorder is not None:
        _RECORDERS[manager] = recorder
    return manager


class _StepRecorder:
    """Orbax's post-finalisation callback: records the item files of the step being saved, in its
    temporary folder before the commit renames it, so that no committed step lacks a record."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.step: int | None = None  # set by `save_checkpoint` before each save

    def __call__(self) -> None:
        if self.step is not None and jax.process_index() == 0:
            record_items(writing_folder(self.directory, self.step))


# A writing manager's recorder, told the step of each save.
_RECORDERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _async_options(recorder: _StepRecorder) -> ocp.AsyncOptions | None:
    """Async options calling `recorder` before each commit, where this orbax offers the callback
    (else `finish_saves` records the whole step after it is committed)."""
    if "post_finalization_callback" not in getattr(ocp.AsyncOptions, "__dataclass_fields__", {}):
        return None
    return ocp.AsyncOptions(post_finalization_callback=recorder)


def writing_folder(directory: Path, step: int) -> Path:
    """The folder orbax is writing `step` into: its temporary folder, or the step folder itself
    where orbax commits in place."""
    temporary = [p for p in directory.glob(f"{step}.orbax-checkpoint-tmp*") if p.is_dir()]
    if len(temporary) == 1:
        return temporary[0]
    if not temporary and (directory / str(step)).is_dir():
        return directory / str(step)
    raise CheckpointError(
        f"cannot tell which folder step {step} is written to in {str(directory)!r}: "
        f"{sorted(p.name for p in temporary)}"
    )


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
    """Start writing step `iteration` in the background (`finish_saves` or `close_manager` wait).

    The previous save is checked first: one that failed in the background raises its
    `CheckpointError` here. Both items are copied: the writer runs while the loop goes on
    changing their values.
    """
    finish_saves(manager)
    stored, layout = encode_state(dict(state))
    meta = json.loads(
        json.dumps({"format": FORMAT_VERSION, "iteration": int(iteration), **meta, "layout": layout})
    )
    stored = host_copy(stored)
    args = ocp.args.Composite(state=ocp.args.StandardSave(stored), meta=ocp.args.JsonSave(meta))
    if manager in _RECORDERS:
        _RECORDERS[manager].step = int(iteration)
    try:
        manager.save(int(iteration), args=args, force=True)
    except Exception as err:  # noqa: BLE001 - every write failure ends the run the same way
        raise _write_failure(manager, int(iteration), current_operation(), err) from None
    _PENDING[manager] = (int(iteration), current_operation())


def finish_saves(manager) -> None:
    """Wait for the save in flight and complete its file record with the files orbax's commit
    wrote; raise a `CheckpointError` if it failed or left no step folder."""
    step, operation = _PENDING.pop(manager, (None, None))
    try:
        manager.wait_until_finished()
    except Exception as err:  # noqa: BLE001 - every write failure ends the run the same way
        raise _write_failure(manager, step, operation, err) from None
    if step is None:
        return
    folder = Path(manager.directory) / str(step)
    if not folder.is_dir():
        failure = OSError("the step folder is missing after the save ended")
        raise _write_failure(manager, step, operation, failure)
    if jax.process_index() == 0:
        try:
            complete_record(folder)
        except Exception as err:  # noqa: BLE001 - every write failure ends the run the same way
            raise _write_failure(manager, step, operation, err) from None


def close_manager(manager) -> None:
    """`finish_saves`, then close the manager (also when the last save failed)."""
    try:
        finish_saves(manager)
    except CheckpointError:
        with contextlib.suppress(Exception):  # the failure is reported; orbax may raise it again
            manager.close()
        raise
    try:
        manager.close()
    except Exception as err:  # noqa: BLE001 - every write failure ends the run the same way
        raise _write_failure(manager, None, None, err) from None


# A manager's save in flight: (step, orbax operation id), to name it when it fails.
_PENDING: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _write_failure(manager, step: int | None, operation: str | None, err: BaseException) -> CheckpointError:
    """The one error a failed save ends the run with, after checking what is left on disk."""
    release_stranded_writers(operation)
    _drain_errors(manager)
    directory = Path(manager.directory)
    cause = f"{type(err).__name__}: {_first_line(err)}"
    what = f"checkpoint {step}" if step is not None else "a checkpoint"
    intact = _newest_intact(directory)
    if intact is None:
        kept = "no earlier checkpoint of this run is readable"
    else:
        run = directory.parent if directory.name == CHECKPOINT_DIR else directory
        kept = f"checkpoint {intact} is intact: continue from it with --resume {run}"
    return CheckpointError(f"{what} could not be written to {str(directory)!r} ({cause}); {kept}")


def _drain_errors(manager, tries: int = 3) -> None:
    """Consume the failure that orbax would raise again at the manager's next wait or close."""
    for _ in range(tries):
        try:
            manager.wait_until_finished()
            manager.check_for_errors()
            return
        except Exception:  # noqa: BLE001 - the failure being reported, or one more of its parts
            continue


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0][:300] if text else "no message"


def _newest_intact(directory: Path) -> int | None:
    """The newest step on disk whose files are intact (what a resume would take).

    Read by a fresh manager: the one whose save failed raises that failure again on every use.
    """
    try:
        reader = open_manager(directory, read_only=True)
    except Exception:  # noqa: BLE001 - a folder that cannot even be opened holds no usable step
        return None
    try:
        for step in sorted(reader.all_steps(), reverse=True):
            try:
                check_step(reader, step)
                return step
            except Exception:  # noqa: BLE001 - a step that does not check out is not called intact
                continue
        return None
    finally:
        reader.close()


def read_meta(manager, step: int) -> dict:
    return manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]


ITEMS = ("state", "meta")  # the item folders of a step


def check_step(manager, step: int) -> None:
    """Raise a `CheckpointDamage` naming what is damaged in `step`'s files; return if nothing is.

    Every file is compared with the step's record (missing, another length, other bytes); a step
    without a record is read in full instead (`_read_unrecorded`).
    """
    folder = Path(manager.directory) / str(step)
    missing = [item for item in ITEMS if not (folder / item).is_dir()]
    if missing:
        raise CheckpointDamage(f"its {' and '.join(missing)} folder is missing")
    try:
        record = read_record(folder)
    except RecordError as err:
        raise CheckpointDamage(str(err)) from err
    except FileNotFoundError:
        record = None
    if record is None:
        _read_unrecorded(manager, step)
        return
    problems = record_damage(folder, record)
    if problems:
        raise CheckpointDamage("; ".join(problems))


def _read_unrecorded(manager, step: int) -> None:
    """Read a step that has no record: one written before steps held records counts as intact
    if it reads in full; one written since has lost its record, which is damage."""
    folder = Path(manager.directory) / str(step)
    with unrecorded_reading(folder, "meta"):
        meta = read_meta(manager, step)
        recorded = int(meta.get("format", 1)) >= RECORDED_FORMAT
    if recorded:
        raise CheckpointDamage(f"{RECORD} is missing")
    with unrecorded_reading(folder, "state"):
        stored_signature(manager, step, layout_of(meta))
        restore_raw(manager, step)


@contextlib.contextmanager
def unrecorded_reading(folder: Path, item: str):
    """Reads of a step without a record inside: any failure (not a `CheckpointError`) becomes a
    `CheckpointDamage` naming the file the error names, else the item being read."""
    try:
        yield
    except CheckpointError:
        raise
    except Exception as err:  # noqa: BLE001 - without a record, a step that does not read is damaged
        name = named_file(err, folder) or f"its {item} item"
        cause = f"{type(err).__name__}: {_first_line(err)[:200]}"
        raise CheckpointDamage(f"{name} cannot be read ({cause})") from err


def named_file(err: BaseException, folder: Path, depth: int = 4) -> str | None:
    """The path below `folder` that `err` (or its explicit cause) names, relative to `folder`."""
    pattern = re.compile(re.escape(str(folder)) + r"/([^\s\"']+)")
    seen: BaseException | None = err
    for _ in range(depth):
        if seen is None:
            return None
        for text in (getattr(seen, "filename", None), str(seen)):
            found = pattern.search(str(text)) if text else None
            if found:
                return found.group(1)
        seen = seen.__cause__
    return None


def first_readable(manager, step: int | None, read: Callable[[int], Any]) -> tuple[Any, int]:
    """`(read(step), step)` for `step`, or else for the newest step whose files are intact.

    Damaged steps (`check_step`) are skipped with a `CheckpointWarning` naming the damage; with
    none intact, the `CheckpointError` names each step's. `read` runs on intact files only, so
    whatever it raises (a `CheckpointMismatchError`, a bug) propagates as it is.
    """
    where = str(manager.directory)
    steps = sorted(manager.all_steps(), reverse=True)
    if not steps:
        raise CheckpointError(f"no checkpoints in {where!r}")
    if step is not None and step not in steps:
        raise CheckpointError(f"no checkpoint {step} in {where!r}; available: {sorted(steps)}")
    candidates = [step] if step is not None else steps
    damaged: list[str] = []
    for i, candidate in enumerate(candidates):
        try:
            check_step(manager, candidate)
        except CheckpointDamage as err:
            if step is not None:
                raise CheckpointDamage(f"checkpoint {candidate} in {where!r} cannot be read ({err})") from err
            damaged.append(f"\n  checkpoint {candidate}: {err}")
            rest = candidates[i + 1 :]
            fallback = f"falling back to checkpoint {rest[0]}" if rest else "no older checkpoint left"
            warnings.warn(
                f"checkpoint {candidate} in {where!r} cannot be read ({err}); {fallback}",
                CheckpointWarning,
                stacklevel=3,
            )
            continue
        return read(candidate), candidate
    raise CheckpointError(f"no readable checkpoint in {where!r}:" + "".join(damaged))


def stored_signature(manager, step: int, layout: Layout | None = None) -> Signature:
    """Shapes and dtypes of the state as it was saved, from orbax's metadata and the step's
    `layout` (read from its meta unless given; no array is read)."""
    metadata = manager.item_metadata(step)["state"]
    if metadata is None:
        raise CheckpointDamage("the state item has no metadata")
    if layout is None:
        layout = layout_of(read_meta(manager, step))
    signature = tree_signature(metadata)
    for name, entry in layout.items():
        signature[name] = (tuple(entry["shape"]), entry["dtype"])
    return signature


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
        layout = layout_of(read_meta(manager, candidate))
        found = stored_signature(manager, candidate, layout)
        check_signatures(expected, found, f"{manager.directory}/{candidate}")
        raw, meta = restore_raw(manager, candidate, by_path)
        return fill_from(abstract_state, raw, layout=layout, shardings=by_path), meta

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
        raise CheckpointDamage("the state item has no metadata")
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


def fill_from(
    abstract: Any,
    raw: Any,
    prefix: str = "",
    layout: Layout | None = None,
    shardings: Mapping[str, Any] | None = None,
) -> Any:
    """`abstract`'s structure with the arrays of `raw` (same paths, as `tree_signature` names
    them); the leaves in `layout` are rebuilt from `abstract` (zero-size) or their key data,
    placed by `shardings[path]` where given."""
    flat = {path_name(p): leaf for p, leaf in jax.tree_util.tree_leaves_with_path(raw)}
    layout, shardings = layout or {}, shardings or {}

    def pick(p, leaf):
        name = prefix + path_name(p)
        if name in layout:
            return decode_leaf(leaf, flat.get(name), layout[name], shardings.get(name))
        value = flat[name]
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
    if path.is_file():
        raise CheckpointError(
            f"{str(path)!r} is a file: rsl_rl/st_rl torch checkpoints (.pt) load with --load only; "
            f"give a strl_jax run folder (with {CHECKPOINT_DIR}/), a {CHECKPOINT_DIR}/ folder or one "
            "step folder"
        )
    raise CheckpointError(
        f"no checkpoints found at {str(path)!r}: expected a run folder (with {CHECKPOINT_DIR}/), "
        f"a {CHECKPOINT_DIR}/ folder or one checkpoint step folder"
    )


def load_params_and_normalizers(
    path: str | Path,
    abstract_train_state: Any,
    step: int | None = None,
    manipulate: Callable[[dict], dict] | None = None,
    manipulator_name: str = "the checkpoint manipulator",
) -> tuple[Any, Any, int]:
    """`(params, normalizers, step)` of another run, checked against `abstract_train_state`.

    For warm starts and export: the newest readable step unless `step` (or a step folder) is given.
    `manipulate` (st_rl's `ckpt_manipulator`) maps the stored `{"params", "normalizers"}` (nested
    dicts of numpy arrays) onto the configured shapes first; its result is what gets checked.
    (rsl_rl/st_rl `.pt` files: `checkpoints.torch_checkpoints.load_torch_params_and_normalizers`.)
    """
    directory, located = locate(path)
    wanted = {"params": abstract_train_state.params, "normalizers": abstract_train_state.normalizers}
    expected = {f"train_state.{k}": v for k, v in tree_signature(wanted).items()}
    prefixes = tuple(f"train_state.{k}." for k in wanted)

    def read(candidate: int):
        layout = layout_of(read_meta(manager, candidate))
        if manipulate is None:
            stored = stored_signature(manager, candidate, layout)
            found = {k: v for k, v in stored.items() if k.startswith(prefixes)}
            check_signatures(expected, found, f"{directory}/{candidate}")
        raw, _ = restore_raw(manager, candidate)
        return raw, layout

    manager = open_manager(directory, read_only=True)
    try:
        (raw, layout), found_step = first_readable(manager, step if step is not None else located, read)
    finally:
        manager.close()
    if manipulate is not None:
        loaded = jax.device_get({k: raw["train_state"][k] for k in wanted})
        where = f"{directory}/{found_step}"
        mapped = apply_manipulator(
            loaded, manipulate, manipulator_name, where, expected, wanted, "train_state."
        )
        raw = {"train_state": mapped}
    picked = fill_from(wanted, raw, prefix="train_state.", layout=layout)
    return picked["params"], picked["normalizers"], found_step


def apply_manipulator(
    loaded: dict,
    manipulate: Callable[[dict], dict],
    name: str,
    where: str,
    expected: Signature,
    keys: Any,
    prefix: str = "",
) -> dict:
    """`manipulate(loaded)`, checked: a dict with exactly `keys` whose shapes (named with `prefix`)
    match `expected`."""
    try:
        mapped = manipulate(loaded)
    except Exception as err:  # noqa: BLE001 - the user's function: report it with its name
        raise CheckpointError(f"{name} failed on {where}: {type(err).__name__}: {err}") from err
    if not isinstance(mapped, Mapping) or set(mapped) != set(keys):
        raise CheckpointError(
            f"{name} must return a dict with keys {sorted(keys)}, got "
            f"{sorted(mapped) if isinstance(mapped, Mapping) else type(mapped).__name__}"
        )
    found = {prefix + k: v for k, v in tree_signature(mapped).items()}
    check_signatures(expected, found, f"{where} as mapped by {name}")
    return dict(mapped)


def read_checkpoint_meta(path: str | Path, step: int | None = None) -> tuple[dict, int]:
    """`(meta, step)` of the newest readable (or the given) step: holds the config it was made with."""
    directory, located = locate(path)
    manager = open_manager(directory, read_only=True)
    try:
        return first_readable(manager, step if step is not None else located, lambda c: read_meta(manager, c))
    finally:
        manager.close()
