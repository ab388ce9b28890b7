"""The members of a run on the host: a plain run is one member in the run's own folder, a
population's members each have a folder, checkpoints, logger and logging window of their own."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import jax
import yaml

from strl_jax.checkpoints.orbax_checkpoints import (
    CHECKPOINT_DIR,
    CheckpointError,
    close_manager,
    open_manager,
    save_checkpoint,
)
from strl_jax.configs.loader import config_to_dict
from strl_jax.configs.schema import TrainConfig
from strl_jax.errors import ConfigError
from strl_jax.records.code_state import store_code_state
from strl_jax.records.metric_rows import empty_window
from strl_jax.records.run_logger import RunLogger
from strl_jax.runners.devices import is_primary
from strl_jax.runners.population import (
    POPULATION_FILE,
    RUNNING,
    is_population,
    member_configs,
    member_name,
    read_member_status,
    sweep_settings,
    write_population_file,
)


@dataclasses.dataclass(frozen=True)
class Roster:
    """Who runs: each member's config and folder name under the run's folder ("": the run's own
    folder, a plain run), and the swept fields."""

    configs: list[TrainConfig]
    names: list[str]
    paths: list[str]
    population: bool  # its members write folders of their own and stop alone


def roster(cfg: TrainConfig) -> Roster:
    """A plain run is a population of one, in the run's own folder."""
    if not is_population(cfg):
        return Roster([cfg], [""], [], population=False)
    members = member_configs(cfg)
    paths = list(sweep_settings(cfg))
    names = [member_name(i, m, paths) for i, m in enumerate(members)]
    return Roster(members, names, paths, population=True)


@dataclasses.dataclass
class Member:
    """One member of the loop: its folder, checkpoints, logger and logging window."""

    cfg: TrainConfig
    log_dir: Path
    manager: Any
    logger: RunLogger | None = None
    window: dict[str, Any] = dataclasses.field(default_factory=empty_window)
    rows: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    status: str = RUNNING
    trial: Any = None
    divergence_warned: bool = False  # the divergence warning is given once per run


def run_keys(cfg: TrainConfig) -> tuple[jax.Array, jax.Array]:
    """`(init key, eval key)`: both functions of the seed alone; evaluation i uses fold_in(eval, i)."""
    init_key, eval_key = jax.random.split(jax.random.PRNGKey(cfg.seed))
    return init_key, eval_key


def open_members(
    cfg: TrainConfig, run: Roster, log_dir: Path, resume: bool, trials: list[Any]
) -> list[Member]:
    """Each member's folder, checkpoint manager and trial; a resumed population keeps its
    members' stored status."""
    if resume and run.population and not (log_dir / POPULATION_FILE).is_file():
        raise CheckpointError(f"{str(log_dir)!r} is not a population run (no {POPULATION_FILE})")
    status = read_member_status(log_dir, run.names) if resume else [RUNNING] * len(run.names)
    members = []
    for name, member_cfg, member_status, trial in zip(run.names, run.configs, status, trials, strict=True):
        member_dir = log_dir / name
        if resume and not (member_dir / CHECKPOINT_DIR).is_dir():
            raise CheckpointError(f"no checkpoints to resume from in {str(member_dir)!r}")
        member_dir.mkdir(parents=True, exist_ok=True)
        manager = open_manager(member_dir / CHECKPOINT_DIR, cfg.runner.max_checkpoints_to_keep)
        members.append(Member(member_cfg, member_dir, manager, status=member_status, trial=trial))
    return members


def member_trials(trial: Any, count: int) -> list[Any]:
    """One trial (or None) per member: a population takes a list of them."""
    if trial is None:
        return [None] * count
    trials = list(trial) if isinstance(trial, list | tuple) else [trial]
    if len(trials) != count:
        raise ConfigError(
            f"trial: {len(trials)} given for {count} run(s); a population of {count} members takes a "
            "list with one trial per member, in the order of population.json"
        )
    return trials


def start_members(
    cfg: TrainConfig,
    run: Roster,
    members: list[Member],
    log_dir: Path,
    sections: dict[str, str],
    resumed_at: int | None,
    start_iteration: int,
    verbose: bool,
) -> None:
    """config.yaml and the code state of the run (and of each member), and a logger per member."""
    primary = is_primary()
    code_files: list[Path] = []
    if primary:
        (log_dir / "config.yaml").write_text(yaml.safe_dump(config_to_dict(cfg), sort_keys=False))
        code_files, notes = store_code_state(log_dir, cfg.runner.git_status_repos, resumed_at=resumed_at)
        for note in notes if verbose else ():
            print(note)
    runner = cfg.runner
    for member in members:
        member_config = config_to_dict(member.cfg)
        if primary and member.log_dir != log_dir:
            (member.log_dir / "config.yaml").write_text(yaml.safe_dump(member_config, sort_keys=False))
        member.logger = RunLogger(
            member.log_dir,
            runner.max_iterations,
            start_iteration=start_iteration,
            verbose=verbose and not run.population,
            enabled=primary,
            sections=sections,
            backend=runner.logger,
            project=runner.wandb_project if runner.logger == "wandb" else runner.neptune_project,
            config=member_config,
        )
        member.logger.save_files(code_files)
    if primary and run.population:
        write_population_file(log_dir, run, [m.status for m in members])


def save_members(
    axis: Any, members: list[Member], state: dict[str, Any], iteration: int, meta: dict[str, Any]
) -> None:
    """A checkpoint of every member (pruned and diverged ones too: a population resumes together)."""
    for index, member in enumerate(members):
        member_meta = {"window": member.window, **meta, "config": config_to_dict(member.cfg)}
        save_checkpoint(member.manager, iteration, axis.view(state, index), member_meta)


def close_members(members: list[Member]) -> None:
    """Wait for every member's checkpoint in flight, then close the loggers; the first failed
    save is raised after all were waited for."""
    failed: list[CheckpointError] = []
    try:
        for member in members:
            try:
                close_manager(member.manager)
            except CheckpointError as err:
                failed.append(err)
        if failed:
            raise failed[0]
    finally:
        for member in members:
            if member.logger is not None:
                member.logger.close()


def any_running(members: list[Member]) -> bool:
    return any(m.status == RUNNING for m in members)
