"""The "Your own robot" example (`examples/custom_robot/`): a quadruped modelled in the repository,
its joystick task written as an MjxEnv, trained from the command line by entry point with its own
config (privileged critic, an estimator of the base velocity picked by component name, a domain
randomiser of its own), resumed, exported, played and run in C MuJoCo, at test sizes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
import yaml
from extras import require_playground
from learning_runs import STRIDER_ITERATIONS, strider_estimator_errors, train_strider

require_playground()

from strl_jax.configs.loader import resolve_config  # noqa: E402
from strl_jax.deploy import main as deploy_main  # noqa: E402
from strl_jax.envs.tasks import make_env_from_config  # noqa: E402
from strl_jax.export import main as export_main  # noqa: E402
from strl_jax.play import main as play_main  # noqa: E402
from strl_jax.train import main as train_main  # noqa: E402

TASK = "examples.custom_robot.strider:Strider"


def rows(run: Path) -> list[dict]:
    timing = {"wall_time", "fps", "iteration_time"}
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k not in timing} for line in lines]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """`STRIDER_ITERATIONS` iterations through `python -m strl_jax.train --config ...`, run from
    the repository root (`learning_runs.train_strider`)."""
    out = tmp_path_factory.mktemp("strider") / "run"
    done = train_strider(out)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def test_the_robot_trains_by_entry_point_with_its_estimator_and_locomotion_evaluation(run):
    stored = yaml.safe_load((run / "config.yaml").read_text())
    assert stored["env"]["task"] == TASK
    assert stored["env"]["randomizer"] == "examples.custom_robot.strider:randomize"
    last = rows(run)[-1]
    assert last["iteration"] == STRIDER_ITERATIONS
    # the estimator's tracking error (a component of the critic's layout, by name) and the
    # joystick probe's tracking and falls are logged
    for key in ("estimator_rmse_base_lin_vel", "eval_velrmsd", "eval_falls"):
        assert np.isfinite(last[key]), key


def test_the_estimator_learns_the_base_velocity_on_fixed_data(run):
    """The estimator's error on the same data before and after training (the untrained policy's
    first rollouts: RL's drifting data cannot hide or fake progress), `learning_runs.
    strider_estimator_errors`, also measured by bench/learning_spread.py (case `strider`)."""
    errors = strider_estimator_errors(run, STRIDER_ITERATIONS)
    # BENCHMARKS.md, Learning spread: custom-robot estimator: trained / initial error after 20
    # iterations, seeds 1-4 (and 1-2 with XLA's flags), 0.416 / 0.476 / 0.554 (estimator_loss_coef
    # 0: 1.0): margin 0.196 to the worst.
    assert errors["trained"] < 0.75 * errors["initial"], errors


def test_the_layout_names_the_components_and_the_randomiser_draws_each_envs_physics():
    cfg = resolve_config(
        overrides=[f"env.task={TASK}", "env.randomizer=examples.custom_robot.strider:randomize"]
    )
    env = make_env_from_config(cfg.env, num_envs=3)
    names = [name for name, _ in env.components["policy"]]
    assert names == [
        "base_lin_vel",
        "base_ang_vel",
        "projected_gravity",
        "dof_pos",
        "dof_vel",
        "last_action",
        "command",
    ]
    critic = dict(env.components["critic"])
    assert critic["base_lin_vel"] == 3 and critic["feet_contact"] == 4 and critic["state_command"] == 3
    assert env.observation_shapes() == {"policy": (36,), "critic": (58,)}
    assert env.physics is not None and set(env.physics.fields) == {"geom_friction", "body_mass"}


def test_resume_export_play_and_sim_to_sim(run, tmp_path, capsys):
    more = STRIDER_ITERATIONS + 1
    assert train_main(["--resume", str(run), "--quiet", "--max_iterations", str(more)]) == 0
    assert [r["iteration"] for r in rows(run)] == list(range(1, more + 1))
    # the exported policy reads what the robot measures: the estimator replaces base_lin_vel
    assert export_main([str(run), "--out", str(tmp_path / "exported")]) == 0
    model = onnx.load(str(tmp_path / "exported" / "policy.onnx"))
    (obs,) = [i for i in model.graph.input if i.name == "obs"]
    assert obs.type.tensor_type.shape.dim[-1].dim_value == 33
    assert play_main([str(run), "--episodes", "1", "--no-video", "--command", "0.3", "0", "0"]) == 0
    assert f"{TASK}, checkpoint {more}" in capsys.readouterr().out
    metrics = tmp_path / "deploy.json"
    argv = [str(run), "--episodes", "1", "--episode_length", "30", "--command", "0.3", "0", "0.5"]
    assert deploy_main([*argv, "--json", str(metrics)]) == 0
    found = json.loads(metrics.read_text())
    (native,), (jax_side,) = found["native"], found["jax"]
    assert native["length"] == jax_side["length"] == 30
    assert native["return"] == pytest.approx(jax_side["return"], rel=0.05)
    for key in ("lin_vel_rms", "yaw_rate_rms"):
        assert native[key] == pytest.approx(jax_side[key], rel=0.05, abs=0.02), key
    # the numpy twin is Go1's alone, and says so
    assert deploy_main([str(run), "--episodes", "1", "--native", "hand"]) == 2
    assert "Go1JoystickFlatTerrain" in capsys.readouterr().err
