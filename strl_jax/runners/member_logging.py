"""Each member's logging in the host loop: its window of completed episodes, its metrics.jsonl
rows (`records.metric_rows`), its evaluations and its trial."""

from __future__ import annotations

import time
from typing import Any

import jax
import jax.numpy as jnp

from strl_jax.errors import ConfigError
from strl_jax.records.metric_rows import accumulate, empty_window, printing, row_from_metrics
from strl_jax.runners.devices import is_primary, local_copy
from strl_jax.runners.members import Member, run_keys
from strl_jax.runners.population import DIVERGED, PRUNED, RUNNING
from strl_jax.runners.stages import dataset_iterations, stage_row
from strl_jax.train_loops.evaluation import LOCOMOTION_METRICS
from strl_jax.train_loops.finiteness import first_non_finite


def evaluate_members(programs: Any, members: list[Member], train_state: Any, iteration: int) -> list[dict]:
    """Deterministic evaluation of every member after `iteration`, each keyed by its own seed and
    the iteration (not by host history)."""
    axis = programs.axis
    keys = [jax.random.fold_in(run_keys(m.cfg)[1], iteration) for m in members]
    params, normalizers = local_copy((train_state.params, train_state.normalizers))
    results = jax.device_get(programs.evaluate(params, normalizers, jnp.asarray(axis.stack(keys))))
    return [
        {"eval_reward": float(r["episode_reward"]), "eval_episode_length": float(r["episode_length"])}
        | {f"eval_{k}": float(v) for k, v in r.items() if k in LOCOMOTION_METRICS}
        for r in (axis.view(results, i) for i in range(len(members)))
    ]


def report_to_trial(member: Member, row: dict[str, Any], iteration: int, metric: str) -> bool:
    """st_rl's `trial.report(metric, iteration)` after an evaluation; True when the trial asks to
    be pruned."""
    if member.trial is None:
        return False
    if metric not in row or row[metric] is None:
        raise ConfigError(f"trial_metric {metric!r} is not in the evaluation rows; they hold {sorted(row)}")
    member.trial.report(float(row[metric]), iteration)
    return bool(member.trial.should_prune())


def log_iteration(
    programs: Any,
    runner: Any,
    members: list[Member],
    train_state: Any,
    metrics: dict,
    iteration: int,
    clock: dict[str, float],
    trial_metric: str,
    stage: dict[str, Any],
) -> bool:
    """Accumulate each running member's episodes; on logging iterations write its row (with its
    evaluation on evaluation iterations) and report to its trial. True if a member's status changed
    (it diverged, or its trial pruned it). `runner` is the run's runner config (host-only fields
    may differ from those of the config the programs were built for)."""
    is_last = iteration == runner.max_iterations
    logging_now = iteration % runner.log_interval == 0 or is_last
    evaluating = (
        logging_now and runner.eval_interval > 0 and (iteration % runner.eval_interval == 0 or is_last)
    )
    evals = (
        evaluate_members(programs, members, train_state, iteration) if evaluating and is_primary() else None
    )
    now = time.time()
    changed = False
    for index, member in enumerate(members):
        if member.status != RUNNING:
            continue
        member_metrics = programs.axis.view(metrics, index)
        bad = first_non_finite(member_metrics["finite"])
        if bad:  # a population member (a plain run has stopped already)
            member.status, changed = DIVERGED, True
            print(
                f"{member.log_dir.name}: the {bad[0]} is not finite at iteration {iteration}; it stops here"
            )
            continue
        accumulate(member.window, member_metrics)
        if logging_now:
            member_eval = None if evals is None else evals[index]
            row = write_row(member, runner, member_metrics, iteration, clock, now, stage, member_eval)
            if member_eval is not None and report_to_trial(member, row, iteration, trial_metric):
                member.status, changed = PRUNED, True
        member.logger.progress(iteration)
    return changed


def write_row(
    member: Member,
    runner: Any,
    metrics: dict,
    iteration: int,
    clock: dict[str, float],
    now: float,
    stage: dict[str, Any],
    evals: dict[str, float] | None,
) -> dict[str, Any]:
    """Write (and print, on printing iterations) the member's row of its window, which starts anew."""
    wall = clock["offset"] + now - clock["start"]
    row = row_from_metrics(
        iteration, member.cfg, metrics, member.window, wall, now - clock["last"], dataset_iterations(stage)
    )
    row |= stage_row(metrics)
    if evals is not None:
        row.update(evals)
        row["wall_time"] = round(clock["offset"] + time.time() - clock["start"], 4)
    member.logger.write(row)
    member.rows.append(row)
    if printing(runner, iteration, member.logger.start_iteration):
        member.logger.summary(row)
    member.window = empty_window()
    return row
