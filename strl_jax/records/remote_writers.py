"""Weights & Biases and Neptune runs beside TensorBoard, as rsl_rl's `logger: wandb | neptune`.

Both log every scalar under its TensorBoard tag with the iteration as step, attach the run's config
and upload files (the git diffs). Machines without internet are the common case here, so a run
without credentials logs offline into the log folder and says how to upload it later; it never
prompts for a login. A resumed run (same log folder) continues the same remote run: its id is
kept in the log folder (`wandb_run_id.txt`, `neptune_run_id.txt`).
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import netrc
import os
import secrets
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol
from urllib.parse import urlsplit

from strl_jax.errors import ConfigError

BACKENDS = ("tensorboard", "wandb", "neptune")
ENV_STEPS_SUFFIX = "/env_steps"
WANDB_ID_FILE = "wandb_run_id.txt"
NEPTUNE_ID_FILE = "neptune_run_id.txt"
WANDB_DEFAULT_HOST = "https://api.wandb.ai"


class RemoteWriter(Protocol):
    """What RunLogger needs of a W&B or Neptune run."""

    def log(
        self, scalars: dict[str, float], env_scalars: dict[str, float], iteration: int, env_steps: int
    ) -> None:
        """`scalars` at step `iteration`; `env_scalars` (tags ending in /env_steps) against `env_steps`."""

    def save_files(self, paths: list[Path]) -> None: ...

    def close(self) -> None: ...


def import_extra(module: str, backend: str) -> ModuleType:
    """Import an optional logging package, or say which extra installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ConfigError(
            f"runner.logger={backend} needs the `{module}` package ({error}); install it with "
            f'pip install -e ".[{backend}]" or choose runner.logger=tensorboard'
        ) from None


def run_id(log_dir: Path, name: str, resuming: bool) -> str:
    """The remote run's id: the stored one when a run continues in its log folder, else a new one
    (stored, so that a resume finds it)."""
    path = log_dir / name
    if resuming and path.is_file() and path.read_text().strip():
        return path.read_text().strip()
    new = secrets.token_hex(4)
    path.write_text(new + "\n")
    return new


def netrc_paths(environ: Mapping[str, str], home: Path) -> list[Path]:
    """Where wandb looks for a .netrc: $NETRC, else ~/.netrc, else ~/_netrc."""
    if environ.get("NETRC"):
        return [Path(environ["NETRC"]).expanduser()]
    return [home / ".netrc", home / "_netrc"]


def wandb_has_credentials(environ: Mapping[str, str], home: Path) -> bool:
    """Whether wandb would find a login without asking: WANDB_API_KEY, an identity token file or
    a .netrc entry for the W&B host (the sources wandb reads, in its order; no network)."""
    if environ.get("WANDB_API_KEY") or environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    host = urlsplit(environ.get("WANDB_BASE_URL") or WANDB_DEFAULT_HOST).netloc
    for path in netrc_paths(environ, home):
        if not path.is_file():
            continue
        try:
            return netrc.netrc(str(path)).authenticators(host) is not None
        except (netrc.NetrcParseError, OSError):
            return False
    return False


def wandb_mode(environ: Mapping[str, str], home: Path) -> str | None:
    """`offline` when neither WANDB_MODE nor credentials are set; None lets wandb decide."""
    if environ.get("WANDB_MODE") or wandb_has_credentials(environ, home):
        return None
    return "offline"


def neptune_mode(environ: Mapping[str, str]) -> str | None:
    """`offline` when neither NEPTUNE_MODE nor NEPTUNE_API_TOKEN is set; None lets neptune decide."""
    if environ.get("NEPTUNE_MODE") or environ.get("NEPTUNE_API_TOKEN"):
        return None
    return "offline"


def neptune_project(project: str, environ: Mapping[str, str]) -> str:
    """rsl_rl's `NEPTUNE_USERNAME/project` unless the project names its workspace already."""
    if "/" in project or not environ.get("NEPTUNE_USERNAME"):
        return project
    return f"{environ['NEPTUNE_USERNAME']}/{project}"


def neptune_path(tag: str) -> str:
    """Neptune field of a TensorBoard tag. A field cannot also be a namespace, so the env-steps
    copy of `Train/mean_reward` is `Train/mean_reward_env_steps` (rsl_rl renames `/time` alike)."""
    if tag.endswith(ENV_STEPS_SUFFIX):
        return tag[: -len(ENV_STEPS_SUFFIX)] + "_env_steps"
    return tag


def upload_base(path: Path, log_dir: Path) -> Path:
    """The folder an uploaded file's remote name is relative to: the log folder when the file is
    in it (`git/strl_jax.diff`), else the file's own folder."""
    path, log_dir = Path(path).resolve(), Path(log_dir).resolve()
    return log_dir if path.is_relative_to(log_dir) else path.parent


@contextlib.contextmanager
def environ_default(name: str, value: str) -> Iterator[None]:
    """Set an environment variable for the duration of a block unless the user set it."""
    if name in os.environ:
        yield
        return
    os.environ[name] = value
    try:
        yield
    finally:
        os.environ.pop(name, None)


def quiet_neptune_logger() -> None:
    """Drop neptune's 'initialized' and 'shutting down' lines (its logger is at INFO unless the
    user set another level); its warnings still print."""
    logger = logging.getLogger("neptune")
    if logger.level == logging.INFO:
        logger.setLevel(logging.WARNING)


def notice(message: str, verbose: bool) -> None:
    if verbose:
        print(message, file=sys.stderr, flush=True)


def init_wandb_run(
    wandb: ModuleType,
    log_dir: Path,
    project: str,
    config: dict[str, Any],
    resuming: bool,
    mode: str | None,
    settings: dict[str, Any],
) -> Any:
    """`wandb.init` of the log folder's run; a failure to start says how to log offline."""
    try:
        return wandb.init(
            project=project,
            entity=os.environ.get("WANDB_USERNAME"),
            name=log_dir.name,
            dir=str(log_dir),
            config={"log_dir": str(log_dir.resolve()), **config},
            id=run_id(log_dir, WANDB_ID_FILE, resuming),
            resume="allow",
            mode=mode,
            settings=wandb.Settings(**settings),
        )
    except wandb.errors.Error as error:
        raise ConfigError(
            f"W&B could not start a run ({error}); set WANDB_MODE=offline to log into the log "
            "folder and upload later with `wandb sync`"
        ) from None


class WandbWriter:
    """A W&B run in `<log_dir>/wandb/`, named after the log folder, with the config attached."""

    def __init__(self, log_dir: Path, project: str, config: dict[str, Any], resuming: bool, verbose: bool):
        wandb = import_extra("wandb", "wandb")
        self.log_dir = log_dir
        self.step_tags: set[str] = set()
        mode = wandb_mode(os.environ, Path.home())
        settings: dict[str, Any] = {}
        if "WANDB_CONSOLE" not in os.environ:
            settings["console"] = "off"  # stdout and stderr stay ours, unwrapped
        # silent: no banner, run summary or file-link warnings around our console blocks (wandb
        # reads it from the environment when its process-wide setup first runs)
        with environ_default("WANDB_SILENT", "true"):
            self.run = init_wandb_run(wandb, log_dir, project, config, resuming, mode, settings)
        self.run.define_metric("env_steps")
        if self.run.settings.mode == "offline":
            reason = "no W&B credentials" if mode else "WANDB_MODE=offline"
            notice(
                f"W&B: offline ({reason}); run files in {log_dir}/wandb, upload later with: "
                f"wandb sync {log_dir}/wandb/offline-run-*",
                verbose,
            )

    def log(
        self, scalars: dict[str, float], env_scalars: dict[str, float], iteration: int, env_steps: int
    ) -> None:
        for tag in env_scalars.keys() - self.step_tags:
            self.run.define_metric(tag, step_metric="env_steps")  # plotted against env steps
            self.step_tags.add(tag)
        data = {**scalars, **env_scalars}
        if env_scalars:
            data["env_steps"] = env_steps
        self.run.log(data, step=iteration)

    def save_files(self, paths: list[Path]) -> None:
        for path in paths:
            path = Path(path).resolve()
            self.run.save(str(path), base_path=str(upload_base(path, self.log_dir)), policy="now")

    def close(self) -> None:
        self.run.finish()


class NeptuneWriter:
    """A Neptune run (neptune 1.x, rsl_rl's client) whose offline data lives in `<log_dir>/.neptune/`.

    A resume passes the stored `custom_run_id`, which continues the run when logging online;
    `neptune sync` registers each offline session as a run of its own (it ignores custom ids).
    """

    def __init__(self, log_dir: Path, project: str, config: dict[str, Any], resuming: bool, verbose: bool):
        neptune = import_extra("neptune", "neptune")
        utils = import_extra("neptune.utils", "neptune")
        self.log_dir = log_dir
        mode = neptune_mode(os.environ)
        name = neptune_project(project, os.environ)
        quiet_neptune_logger()
        with environ_default("NEPTUNE_DATA_DIRECTORY", str(log_dir / ".neptune")):
            try:
                self.run = neptune.init_run(
                    project=name if mode is None else None,
                    name=log_dir.name,
                    custom_run_id=run_id(log_dir, NEPTUNE_ID_FILE, resuming),
                    mode=mode,
                    capture_stdout=False,
                    capture_stderr=False,
                )
            except neptune.exceptions.NeptuneException as error:
                raise ConfigError(
                    f"Neptune could not start a run ({error}); set NEPTUNE_MODE=offline to log into "
                    "the log folder and upload later with `neptune sync`"
                ) from None
        self.run["log_dir"] = str(log_dir.resolve())
        self.run["config"] = utils.stringify_unsupported(config)
        if mode == "offline":
            notice(
                f"Neptune: offline (no NEPTUNE_API_TOKEN); run files in {log_dir}/.neptune, upload later "
                f"with: neptune sync --path {log_dir} --project WORKSPACE/{project}",
                verbose,
            )

    def log(
        self, scalars: dict[str, float], env_scalars: dict[str, float], iteration: int, env_steps: int
    ) -> None:
        for tag, value in scalars.items():
            self.run[tag].append(value, step=iteration)
        for tag, value in env_scalars.items():
            self.run[neptune_path(tag)].append(value, step=env_steps)

    def save_files(self, paths: list[Path]) -> None:
        for path in paths:
            path = Path(path).resolve()
            field = path.relative_to(upload_base(path, self.log_dir)).as_posix().replace(".", "_")
            self.run[f"files/{field}"].upload(str(path))

    def close(self) -> None:
        self.run.stop()


def make_remote_writer(
    backend: str, log_dir: Path, project: str, config: dict[str, Any], resuming: bool, verbose: bool
) -> RemoteWriter | None:
    """The W&B or Neptune run of `runner.logger`; None for tensorboard (written by RunLogger itself)."""
    if backend not in BACKENDS:
        raise ConfigError(f"runner.logger must be one of {', '.join(BACKENDS)}, not {backend!r}")
    if backend == "wandb":
        return WandbWriter(log_dir, project, config, resuming, verbose)
    if backend == "neptune":
        return NeptuneWriter(log_dir, project, config, resuming, verbose)
    return None
