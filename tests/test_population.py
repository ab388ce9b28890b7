"""Many runs in one program (`--num_seeds`, `sweep`): each member is the run of its own config.

One population (2 seeds x 2 learning rates, trained through the CLI) is compared with the single
runs of two of its members' configs; resume, trials and refusals reuse its compiled programs.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml
from tiny_config import tiny

from strl_jax.configs.loader import resolve_config
from strl_jax.errors import ConfigError
from strl_jax.inference import load_policy
from strl_jax.runners.population import POPULATION_FILE, member_configs
from strl_jax.runners.runner import build_programs, train
from strl_jax.train import main

TIME_FIELDS = ("wall_time", "iteration_time", "fps")
SWEEP = "sweep.algorithm.learning_rate=[1e-3, 3e-4]"
OVERRIDES = tiny("runner.max_iterations=4", "runner.eval_interval=2", "algorithm.schedule=fixed")
NAMES = [
    "m00_seed1_learning_rate=0.001",
    "m01_seed2_learning_rate=0.001",
    "m02_seed1_learning_rate=0.0003",
    "m03_seed2_learning_rate=0.0003",
]


def rows(path: Path) -> list[dict]:
    lines = (path / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k not in TIME_FIELDS} for line in lines]


def assert_same_rows(a: list[dict], b: list[dict], tol: float) -> None:
    assert [r["iteration"] for r in a] == [r["iteration"] for r in b]
    for ra, rb in zip(a, b, strict=True):
        assert ra.keys() == rb.keys()
        for key, value in ra.items():
            if value is None:
                assert rb[key] is None, key
            else:
                np.testing.assert_allclose(
                    rb[key], value, rtol=tol, atol=tol, err_msg=f"{key} @ {ra['iteration']}"
                )


@pytest.fixture(scope="module")
def population(tmp_path_factory) -> Path:
    log_dir = tmp_path_factory.mktemp("population") / "pop"
    argv = ["--num_seeds", "2", "--log_dir", str(log_dir), "--quiet", *OVERRIDES, SWEEP]
    assert main(argv) == 0
    return log_dir


@pytest.fixture(scope="module")
def singles(population, tmp_path_factory) -> dict[str, Path]:
    """The single run of member 3 (seed 2, lr 3e-4: another seed and another value than member 0's)."""
    out = {}
    for name in (NAMES[3],):
        cfg = resolve_config(None, [str(population / name / "config.yaml")])
        out[name] = train(cfg, tmp_path_factory.mktemp("single") / name, verbose=False).log_dir
    return out


def test_folders_configs_and_population_file(population):
    listed = json.loads((population / POPULATION_FILE).read_text())["members"]
    assert [m["name"] for m in listed] == NAMES
    assert [m["seed"] for m in listed] == [1, 2, 1, 2]
    assert [m["settings"]["algorithm.learning_rate"] for m in listed] == [1e-3, 1e-3, 3e-4, 3e-4]
    assert {m["status"] for m in listed} == {"running"}
    parent = yaml.safe_load((population / "config.yaml").read_text())
    assert parent["runner"]["num_seeds"] == 2 and parent["sweep"] == {"algorithm.learning_rate": [1e-3, 3e-4]}
    member = yaml.safe_load((population / NAMES[2] / "config.yaml").read_text())
    assert member["seed"] == 1 and member["algorithm"]["learning_rate"] == 3e-4
    assert member["runner"]["num_seeds"] == 1 and member["sweep"] == {}
    for name in NAMES:
        assert [r["iteration"] for r in rows(population / name)] == [1, 2, 3, 4]
        assert sorted(
            int(p.name) for p in (population / name / "checkpoints").iterdir() if p.name.isdigit()
        ) == [2, 4]
        assert list((population / name).glob("events.out.tfevents.*"))


def test_members_equal_their_single_runs(population, singles):
    for name, single in singles.items():
        assert_same_rows(rows(single), rows(population / name), tol=1e-4)


def test_members_differ_by_seed_and_by_value(population):
    finals = {name: rows(population / name)[-1] for name in NAMES}
    assert finals[NAMES[0]]["learning_rate"] == pytest.approx(1e-3)
    assert finals[NAMES[2]]["learning_rate"] == pytest.approx(3e-4)
    assert finals[NAMES[0]]["surrogate"] != finals[NAMES[1]]["surrogate"]  # other seed
    assert finals[NAMES[0]]["surrogate"] != finals[NAMES[2]]["surrogate"]  # other rate


def test_population_resumes_exactly(population, tmp_path):
    copy = tmp_path / "pop"
    shutil.copytree(population, copy)
    assert main(["--resume", str(copy), "--checkpoint", "2", "--quiet"]) == 0
    for name in NAMES:
        assert rows(copy / name) == rows(population / name)  # the same numbers, not close ones


def test_member_folder_is_a_run_of_its_own(population, singles, tmp_path):
    """A member resumes alone as a plain run (same program as its single run) and loads for play."""
    copy = tmp_path / "member"
    shutil.copytree(population / NAMES[3], copy)
    assert main(["--resume", str(copy), "--checkpoint", "2", "--quiet"]) == 0
    assert_same_rows(rows(population / NAMES[3]), rows(copy), tol=1e-4)
    policy = load_policy(population / NAMES[3])
    assert policy.cfg.seed == 2 and policy.cfg.algorithm.learning_rate == pytest.approx(3e-4)


class PruneAfter:
    """A stand-in for an Optuna trial: records reports, asks to be pruned after `after` of them."""

    def __init__(self, after: int | None):
        self.after, self.reports = after, []

    def report(self, value: float, step: int) -> None:
        self.reports.append((step, value))

    def should_prune(self) -> bool:
        return self.after is not None and len(self.reports) >= self.after


def test_trials_receive_evaluations_and_prune_members(population, tmp_path):
    cfg = resolve_config(None, [str(population / "config.yaml")])
    trials = [PruneAfter(None), PruneAfter(1), PruneAfter(None), PruneAfter(None)]
    result = train(cfg, tmp_path / "pop", verbose=False, trial=trials)
    evals = [
        (r["iteration"], r["eval_reward"]) for r in rows(tmp_path / "pop" / NAMES[0]) if "eval_reward" in r
    ]
    assert trials[0].reports == evals and [step for step, _ in evals] == [2, 4]
    assert len(trials[1].reports) == 1  # pruned at its first evaluation
    assert [m.pruned for m in result.members] == [False, True, False, False]
    assert [r["iteration"] for r in rows(tmp_path / "pop" / NAMES[1])] == [1, 2]
    assert [r["iteration"] for r in rows(tmp_path / "pop" / NAMES[2])] == [1, 2, 3, 4]
    status = [m["status"] for m in json.loads((tmp_path / "pop" / POPULATION_FILE).read_text())["members"]]
    assert status == ["running", "pruned", "running", "running"]
    with pytest.raises(ConfigError, match="one trial per member"):
        train(cfg, tmp_path / "other", verbose=False, trial=PruneAfter(None))


def test_optuna_trials_get_every_evaluation(population, tmp_path):
    import optuna

    study = optuna.create_study(direction="maximize")
    trials = [study.ask() for _ in NAMES]
    cfg = resolve_config(None, [str(population / "config.yaml")])
    result = train(cfg, tmp_path / "pop", verbose=False, trial=trials)
    for trial, member in zip(trials, result.members, strict=True):
        study.tell(trial, member.last_eval_reward)
    stored = {t.number: t.intermediate_values for t in study.trials}
    for number, name in enumerate(NAMES):
        evals = {
            r["iteration"]: r["eval_reward"] for r in rows(tmp_path / "pop" / name) if "eval_reward" in r
        }
        assert stored[number] == pytest.approx(evals) and set(evals) == {2, 4}
    assert study.best_value == max(m.last_eval_reward for m in result.members)


def test_single_run_trial_stops_the_run(singles, tmp_path):
    cfg = resolve_config(None, [str(singles[NAMES[3]] / "config.yaml")])
    trial = PruneAfter(1)
    result = train(cfg, tmp_path / "run", verbose=False, trial=trial)
    assert result.pruned and [r["iteration"] for r in result.rows] == [1, 2] and result.checkpoint == 2
    assert trial.reports == [(2, result.rows[-1]["eval_reward"])]


def test_member_configs_grid_order():
    cfg = resolve_config(
        "inverted_pendulum",
        overrides=[
            "runner.num_seeds=3",
            "seed=7",
            "sweep.algorithm.gamma=[0.9, 0.99]",
            "sweep.policy.init_noise_std=[0.5]",
        ],
    )
    members = member_configs(cfg)
    assert [(m.seed, m.algorithm.gamma, m.policy.init_noise_std) for m in members] == [
        (7, 0.9, 0.5), (8, 0.9, 0.5), (9, 0.9, 0.5), (7, 0.99, 0.5), (8, 0.99, 0.5), (9, 0.99, 0.5),
    ]  # fmt: skip


def test_zip_mode_pairs_the_lists():
    zipped = ["runner.sweep_mode=zip", "sweep.algorithm.gamma=[0.9, 0.99]", "sweep.algorithm.lam=[0.8, 0.95]"]
    members = member_configs(resolve_config("inverted_pendulum", overrides=zipped))
    assert [(m.seed, m.algorithm.gamma, m.algorithm.lam, m.runner.sweep_mode) for m in members] == [
        (1, 0.9, 0.8, "grid"), (1, 0.99, 0.95, "grid"),
    ]  # fmt: skip
    with pytest.raises(ConfigError, match="lengths differ"):
        resolve_config("inverted_pendulum", overrides=[*zipped, "sweep.algorithm.clip_param=[0.1]"])


@pytest.mark.parametrize(
    "override, message",
    [
        ("sweep.env.num_envs=[8, 16]", "the env is built once"),
        ("sweep.algorithm.optimizer=[adam, sgd]", "only numeric fields"),
        ("sweep.algorithm.learning_rat=[1e-3]", "has no field 'learning_rat'"),
        ("sweep.algorithm.learning_rate=[]", "non-empty list"),
        ("sweep.algorithm.learning_rate=1e-3", "non-empty list"),
        ("runner.num_seeds=0", "runner.num_seeds must be at least 1"),
    ],
)
def test_bad_sweeps_are_refused_by_name(override, message):
    with pytest.raises(ConfigError, match=message):
        resolve_config("inverted_pendulum", overrides=[override])


def test_member_values_are_checked_like_configs():
    cfg = resolve_config("inverted_pendulum", overrides=["sweep.algorithm.num_mini_batches=[4, 0]"])
    with pytest.raises(ConfigError, match=r"sweep member \(algorithm.num_mini_batches=0\).*at least 1"):
        member_configs(cfg)


def test_structural_field_is_refused_by_name():
    cfg = resolve_config(
        "inverted_pendulum", overrides=[*OVERRIDES, "sweep.algorithm.num_learning_epochs=[1, 2]"]
    )
    with pytest.raises(
        ConfigError, match=r"sweep.algorithm.num_learning_epochs cannot be swept in one program"
    ):
        build_programs(cfg)
