"""The record of a checkpoint step's files: the size and SHA-256 of each, kept in the step.

Orbax notices only some damage, and reports it as whatever its reader happens to raise (a
`UnicodeDecodeError` for random bytes in a JSON file, a tensorstore `ValueError` for an array
file); files it does not read on restore may be damaged unnoticed. Checking every file against
the record before a step is restored names the damaged file, whatever the damage, and leaves the
restore itself strict: a step whose files are as written reads, or the failure is a bug.

The record is written after orbax has finalised the step's items and before its commit renames
the step folder into place, so every committed step holds one. The commit then still writes or
rewrites the files directly in the step folder (orbax's step metadata and commit marker): they
are added once the save has been waited for (`complete_record`). A step whose writer was killed
in between is checked without them: they are orbax's bookkeeping, not needed to restore.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

RECORD = "files.json"
RECORD_FORMAT = 1
_CHUNK = 1 << 20
FileEntry = dict[str, Any]  # {"size": bytes, "sha256": hex digest}


def digest(path: Path) -> FileEntry:
    """Size and SHA-256 of one file, read in chunks (array files may be large)."""
    sha, size = hashlib.sha256(), 0
    with path.open("rb") as stream:
        while chunk := stream.read(_CHUNK):
            sha.update(chunk)
            size += len(chunk)
    return {"size": size, "sha256": sha.hexdigest()}


def step_files(folder: Path) -> list[str]:
    """The files of a step folder as sorted relative POSIX paths, the record (and its temporary
    copy) left out."""
    return sorted(
        p.relative_to(folder).as_posix()
        for p in folder.rglob("*")
        if p.is_file() and not (p.parent == folder and p.name.startswith(RECORD))
    )


def is_commit_file(name: str) -> bool:
    """Files directly in the step folder are orbax's step bookkeeping, which its commit rewrites."""
    return "/" not in name


def write_record(folder: Path, entries: Mapping[str, FileEntry], committed: bool) -> None:
    """Replace the record at once: a process killed while writing leaves the old one or none."""
    record = {"format": RECORD_FORMAT, "committed": committed, "files": dict(sorted(entries.items()))}
    temporary = folder / f"{RECORD}.tmp"
    temporary.write_text(json.dumps(record, indent=0))
    os.replace(temporary, folder / RECORD)


def record_items(folder: Path) -> None:
    """Record the item files of a step about to be committed (the commit files follow later)."""
    entries = {name: digest(folder / name) for name in step_files(folder) if not is_commit_file(name)}
    write_record(folder, entries, committed=False)


def complete_record(folder: Path) -> None:
    """Add the files the commit wrote to the record of a committed step (all of them where the
    step has no record yet); the entries recorded before the commit are kept as they are."""
    try:
        entries = dict(read_record(folder)["files"])
    except (FileNotFoundError, RecordError):
        entries = {}
    for name in step_files(folder):
        if name not in entries:
            entries[name] = digest(folder / name)
    write_record(folder, entries, committed=True)


class RecordError(ValueError):
    """A record that exists but does not read as one (truncated, overwritten)."""


def read_record(folder: Path) -> dict[str, Any]:
    """The step's record: `FileNotFoundError` where it has none, `RecordError` where it is damaged."""
    path = folder / RECORD
    try:
        record = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise
    except Exception as err:  # noqa: BLE001 - whatever a damaged file makes the reader raise
        raise RecordError(f"{RECORD} cannot be read ({type(err).__name__}: {err})") from err
    if not _is_record(record):
        raise RecordError(f"{RECORD} is not a record of the step's files")
    return record


def _is_record(record: Any) -> bool:
    if not isinstance(record, dict) or not isinstance(record.get("files"), dict):
        return False
    return all(_is_entry(entry) for entry in record["files"].values())


def _is_entry(entry: Any) -> bool:
    if not isinstance(entry, dict):
        return False
    return isinstance(entry.get("size"), int) and isinstance(entry.get("sha256"), str)


def file_damage(folder: Path, name: str, expected: Mapping[str, Any]) -> str | None:
    """What is wrong with one recorded file, or None where it holds what was written."""
    try:
        found = digest(folder / name)
    except FileNotFoundError:
        return f"{name} is missing"
    except Exception as err:  # noqa: BLE001 - a file that does not read is damaged, whatever the cause
        return f"{name} cannot be read ({type(err).__name__}: {err})"
    if found["size"] != expected["size"]:
        return f"{name} is {found['size']} bytes long, {expected['size']} were written"
    if found["sha256"] != expected["sha256"]:
        return f"{name} does not hold the bytes that were written"
    return None


def record_damage(folder: Path, record: Mapping[str, Any]) -> list[str]:
    """Every recorded file that is not as written; a record written before the commit leaves
    out the commit's files, which may be missing or rewritten in a step whose writer was killed."""
    return [
        problem
        for name, expected in sorted(record["files"].items())
        if (problem := file_damage(folder, name, expected)) is not None
    ]
