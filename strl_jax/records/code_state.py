"""The code a run was trained with: git commit, status and diff of strl_jax and named repositories.

rsl_rl/st_rl write `git/<repository>.diff` into the log folder at the start of training
(`store_code_state`, st_rl's `add_git_repo_to_log`). strl_jax does the same at the start of every
run and of every resume (a resumed run keeps the first files and adds `<repository>.resume<N>.diff`,
N the iteration it continued from), with the `git` command line, so that nothing is needed
beyond git itself and nothing fails where there is no git or no checkout.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable
from pathlib import Path

import strl_jax

GIT_DIR = "git"
GIT_TIMEOUT_S = 60


def _git(repo: Path, *args: str) -> str | None:
    """Output of `git -C repo args...`, or None if git or the repository is not there."""
    try:
        done = subprocess.run(
            ["git", "-C", str(repo), *args],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def repository_root(path: str | Path) -> Path | None:
    """The top folder of the git checkout holding `path` (a file or folder), if any."""
    path = Path(path).expanduser().resolve()
    folder = path if path.is_dir() else path.parent
    if not folder.is_dir():
        return None
    root = _git(folder, "rev-parse", "--show-toplevel")
    return Path(root.strip()) if root else None


def code_state(root: Path) -> str:
    """rsl_rl's diff file: the commit, the branch, the status and the diff against HEAD (staged
    and unstaged changes; untracked files are listed by the status)."""
    commit = (_git(root, "rev-parse", "HEAD") or "(no commit yet)").strip()
    branch = (_git(root, "rev-parse", "--abbrev-ref", "HEAD") or "").strip()
    status = _git(root, "status") or ""
    diff = _git(root, "diff", "HEAD") if commit != "(no commit yet)" else _git(root, "diff")
    return (
        f"--- git commit ---\n{commit}\n\n\n--- git branch ---\n{branch}\n\n\n"
        f"--- git status ---\n{status}\n\n\n--- git diff ---\n{diff or ''}"
    )


def store_code_state(
    log_dir: str | Path, repositories: Iterable[str | Path] = (), resumed_at: int | None = None
) -> tuple[list[Path], list[str]]:
    """Write `<log_dir>/git/<name>.diff` for strl_jax's checkout and each of `repositories`.

    Returns `(files written, notes)`: a note for each named path that is not inside a git
    checkout (strl_jax installed from a wheel is skipped quietly). Two paths in one checkout give
    one file.
    """
    folder = Path(log_dir) / GIT_DIR
    suffix = "" if not resumed_at else f".resume{resumed_at}"
    written: list[Path] = []
    notes: list[str] = []
    seen: set[Path] = set()
    own = Path(strl_jax.__file__).parent
    for path in [own, *map(Path, repositories)]:
        root = repository_root(path)
        if root is None:
            if path != own:  # strl_jax installed from a wheel is no news
                notes.append(f"runner.git_status_repos: {path} is not inside a git checkout; skipped")
            continue
        if root in seen:
            continue
        seen.add(root)
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / f"{root.name}{suffix}.diff"
        target.write_text(code_state(root))
        written.append(target)
    return written, notes
