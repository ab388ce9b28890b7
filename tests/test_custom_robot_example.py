"""The "Your own robot" example (`examples/custom_robot/`): a quadruped modelled in the repository,
its joystick task written as an MjxEnv, trained from the command line by entry point with its own
config (privileged critic, an estimator of the base velocity picked by component name, a domain
randomiser of its own), resumed, exported, played and run in C MuJoCo, at test sizes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
import yaml
from extras import require_playground

require_playground()

from strl_jax.configs.loader import resolve_config  # noqa: E402
from strl_jax.deploy import main as deploy_main  # noqa: E402
from strl_jax.envs.tasks import make_env_from_config  # noqa: E402
from strl_jax.export import main as export_main  # noqa: E402
from strl_jax.play import main as play_main  # noqa: E402
from strl_jax.train import main as train_main  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CONFIG = "examples/custom_robot/strider.yaml"
TASK = "examples.custom_robot.strider:Strider"
SMALL = [
    "--num_envs",
    "4",
    "--quiet",
    "policy.actor_hidden_dims=[16]",
    "policy.critic_hidden_dims=[16]",
    "policy.estimator_kwargs.hidden_sizes=[8]",
    "runner.num_steps_per_env=8",
    "algorithm.num_mini_batches=2",
    "algorithm.num_learning_epochs=1",
    "runner.eval_interval=2",
    "runner.num_eval_envs=2",
    "runner.save_interval=1",
    "env.episode_length=100",
]


def rows(run: Path) -> list[dict]:
    timing = {"wall_time", "fps", "iteration_time"}
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k not in timing} for line in lines]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """Two iterations through `python -m strl_jax.train --config ...`, run from the repository
    root (the entry point's module is imported from the working folder)."""
    out = tmp_path_factory.mktemp("strider") / "run"
    command = [sys.executable, "-m", "strl_jax.train", "--config", CONFIG, "--max_iterations", "2"]
    done = subprocess.run(
        [*command, "--log_dir", str(out), *SMALL], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def test_the_robot_trains_by_entry_point_with_its_estimator_and_locomotion_evaluation(run):
    stored = yaml.safe_load((run / "config.yaml").read_text())
    assert stored["env"]["task"] == TASK
    assert stored["env"]["randomizer"] == "examples.custom_robot.strider:randomize"
    last = rows(run)[-1]
    assert last["iteration"] == 2
    # the estimator learns the base velocity (a component of the critic's layout, by name) and
    # the joystick probe evaluates tracking and falls
    for key in ("estimator_rmse_base_lin_vel", "eval_velrmsd", "eval_falls"):
        assert np.isfinite(last[key]), key


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
    assert train_main(["--resume", str(run), "--quiet", "--max_iterations", "3"]) == 0
    assert [r["iteration"] for r in rows(run)] == [1, 2, 3]
    # the exported policy reads what the robot measures: the estimator replaces base_lin_vel
    assert export_main([str(run), "--out", str(tmp_path / "exported")]) == 0
    model = onnx.load(str(tmp_path / "exported" / "policy.onnx"))
    (obs,) = [i for i in model.graph.input if i.name == "obs"]
    assert obs.type.tensor_type.shape.dim[-1].dim_value == 33
    assert play_main([str(run), "--episodes", "1", "--no-video", "--command", "0.3", "0", "0"]) == 0
    assert f"{TASK}, checkpoint 3" in capsys.readouterr().out
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
