"""An Optuna search that trains each batch of trials as one population (st_rl's `trial` hook).

Each round asks Optuna for `--batch` trials, gives every trial's suggested values to one member
of a population (`runner.sweep_mode=zip`: member i takes the i-th value of every `sweep` list),
trains them together in one compiled program, and tells Optuna each member's last evaluation
return. Every evaluation is reported to the member's trial (`train(..., trial=[...])`); a trial
the pruner stops is told as pruned, and its member stops logging while the others go on.

    pip install -e ".[sweep]"
    python bench/optuna_sweep.py --task inverted_pendulum --rounds 3 --batch 4 --out /tmp/optuna_sweep

The run folders land in `<out>/round_<r>/`; the study is printed at the end (best value and
parameters) and stored as `<out>/study.json`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import optuna

from strl_jax.configs.loader import resolve_config
from strl_jax.runners.runner import train


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", default="inverted_pendulum")
    p.add_argument("--rounds", type=int, default=3, help="populations trained one after another")
    p.add_argument("--batch", type=int, default=4, help="trials (members) per population")
    p.add_argument("--iterations", type=int, default=30, help="runner.max_iterations of each population")
    p.add_argument("--out", type=Path, default=Path("runs/optuna_sweep"))
    p.add_argument("--seed", type=int, default=0, help="the sampler's seed")
    p.add_argument("overrides", nargs="*", help="config overrides for every trial (key.sub=value)")
    return p.parse_args()


def suggest(trial: optuna.Trial) -> dict[str, float]:
    """The searched space: config paths and the trial's values."""
    return {
        "algorithm.learning_rate": trial.suggest_float("learning_rate", 1e-4, 3e-3, log=True),
        "algorithm.entropy_coef": trial.suggest_float("entropy_coef", 1e-4, 3e-2, log=True),
        "algorithm.gamma": trial.suggest_float("gamma", 0.95, 0.995),
    }


def main() -> int:
    args = parse_args()
    study = optuna.create_study(
        direction="maximize",
        sampler=optuna.samplers.TPESampler(seed=args.seed),
        pruner=optuna.pruners.MedianPruner(n_startup_trials=args.batch, n_warmup_steps=args.iterations // 3),
    )
    for round_index in range(args.rounds):
        trials = [study.ask() for _ in range(args.batch)]
        points = [suggest(t) for t in trials]
        sweep = [f"sweep.{path}={[p[path] for p in points]}" for path in points[0]]
        overrides = [
            f"runner.max_iterations={args.iterations}",
            "runner.sweep_mode=zip",
            "algorithm.schedule=fixed",  # the learning rate is searched, not adapted
            *sweep,
            *args.overrides,
        ]
        cfg = resolve_config(args.task, overrides=overrides)
        result = train(cfg, args.out / f"round_{round_index}", verbose=False, trial=trials)
        for trial, member in zip(trials, result.members, strict=True):
            if member.pruned:
                study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            elif member.diverged or member.last_eval_reward is None:
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
            else:
                study.tell(trial, member.last_eval_reward)
        finished = [m.last_eval_reward for m in result.members if m.last_eval_reward is not None]
        print(f"round {round_index}: eval returns {[round(v, 1) for v in finished]}", flush=True)
    best = study.best_trial
    print(f"best eval return {best.value:.1f} with {best.params}")
    summary = [
        {"number": t.number, "state": t.state.name, "value": t.value, "params": t.params}
        for t in study.trials
    ]
    (args.out / "study.json").write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
