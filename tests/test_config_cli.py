"""Config resolution and the command line: presets, overrides, and clear errors for bad input."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from importlib import resources
from pathlib import Path

import pytest

from strl_jax.configs import ConfigError, available_presets, config_from_dict, config_to_dict, resolve_config
from strl_jax.train import main

REPO = Path(__file__).resolve().parents[1]

REQUIRED_PRESETS = {
    "inverted_pendulum",
    "inverted_double_pendulum",
    "hopper",
    "walker2d",
    "halfcheetah",
    "ant",
    "humanoid",
}


def test_every_required_preset_exists_and_validates():
    assert REQUIRED_PRESETS <= set(available_presets())
    for name in available_presets():
        cfg = resolve_config(name)
        assert name.startswith(cfg.env.task)


def test_presets_are_the_top_level_configs_folder_read_as_package_resources():
    """`strl_jax.presets` is configs/ (pyproject.toml maps it), so every file there is a preset."""
    on_disk = sorted(p.stem for p in (REPO / "configs").glob("*.yaml"))
    assert on_disk and available_presets() == on_disk
    packaged = resources.files("strl_jax.presets")
    assert sorted(p.name for p in packaged.iterdir() if p.name.endswith(".yaml")) == [
        f"{name}.yaml" for name in on_disk
    ]
    assert not (REPO / "strl_jax" / "configs" / "presets").exists()


def test_wheel_ships_every_package_and_preset(tmp_path):
    """A real (non-editable) wheel holds every strl_jax package and the presets (and their recipes) as
    `strl_jax/presets`, and an installed copy finds them through `importlib.resources`."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    for name in ("strl_jax", "configs"):
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    build = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    subprocess.run([*build, "-w", str(tmp_path / "dist"), str(src)], check=True, timeout=120)
    (wheel,) = (tmp_path / "dist").glob("strl_jax-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    packages = {str(p.relative_to(REPO)) for p in (REPO / "strl_jax").rglob("__init__.py")}
    assert packages <= names, f"packages missing from pyproject.toml's list: {sorted(packages - names)}"
    assert {f"strl_jax/presets/{p.name}" for p in (REPO / "configs").glob("*.yaml")} <= names
    recipes = {f"strl_jax/presets/recipes/{p.name}" for p in (REPO / "configs" / "recipes").glob("*.yaml")}
    assert recipes and recipes <= names
    assert not any(n.startswith("configs/") for n in names)

    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    probe = (
        "import strl_jax; from strl_jax.configs.loader import available_presets, resolve_config; "
        "print(strl_jax.__file__, ','.join(available_presets()), resolve_config('ant').env.task, "
        "resolve_config('Go1JoystickFlatTerrain_cpu').algorithm.clip_min_std)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(site)},
    )
    assert proc.returncode == 0, proc.stderr
    location, presets, task, std_floor = proc.stdout.splitlines()[-1].split()  # brax may print notes first
    assert Path(location).is_relative_to(site)
    assert presets.split(",") == available_presets() and task == "ant"
    assert std_floor == "0.2"  # the preset's recipe (recipes/legged_cpu) is in the wheel


def test_overrides_are_typed_and_nested():
    cfg = resolve_config(
        "hopper",
        overrides=[
            "algorithm.learning_rate=3e-4",
            "policy.actor_hidden_dims=[32, 16]",
            "runner.normalizer_until=1e6",
            "algorithm.clip_min_std=null",
            "env.num_envs=8",
            "seed=7",
        ],
    )
    assert cfg.algorithm.learning_rate == pytest.approx(3e-4)
    assert cfg.policy.actor_hidden_dims == (32, 16)
    assert cfg.runner.normalizer_until == 1e6
    assert cfg.algorithm.clip_min_std is None
    assert cfg.env.num_envs == 8 and cfg.seed == 7


def test_task_without_preset_uses_defaults():
    cfg = resolve_config("reacher")
    assert cfg.env.task == "reacher"
    assert cfg.algorithm.num_learning_epochs == 5


def test_config_round_trips_through_a_mapping():
    cfg = resolve_config("ant", overrides=["env.env_kwargs={ctrl_cost_weight: 0.1}"])
    assert config_from_dict(config_to_dict(cfg)) == cfg


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        (["algorithm.learnin_rate=1e-3"], "unknown config key algorithm.'learnin_rate'"),
        (["algorithm.num_learning_epochs=2.5"], "algorithm.num_learning_epochs must be an integer"),
        (["algorithm.use_clipped_value_loss=maybe"], "must be true or false"),
        (["policy.actor_hidden_dims=64"], "must be a list"),
        (["algorithm.schedule=cosine"], "valid choices: ['fixed', 'adaptive']"),
        (["algorithm.optimizer=rmsprop"], "valid choices: ['adam', 'adamw', 'sgd']"),
        (["policy.activation=swoosh"], "unknown policy.activation"),
        (["env.backend=physx"], "valid backends"),
        (["nonsense=1"], "valid keys: ['algorithm', 'env', 'policy', 'runner', 'seed', 'sweep']"),
        (["env.num_envs=10", "runner.num_steps_per_env=3", "algorithm.num_mini_batches=4"], "must divide"),
        (["no_equals_sign"], "key.sub=value"),
    ],
)
def test_bad_config_names_the_problem(overrides, needle):
    with pytest.raises(ConfigError) as err:
        resolve_config("inverted_pendulum", overrides=overrides)
    assert needle in str(err.value)


def test_unknown_task_lists_valid_tasks():
    with pytest.raises(ConfigError, match="Brax tasks: .*'ant'.*'inverted_pendulum'.*Playground tasks"):
        resolve_config("antt")


def test_cli_errors_exit_2_without_traceback(capsys):
    assert main(["--task", "antt"]) == 2
    err = capsys.readouterr().err
    assert "unknown task 'antt'" in err and "Traceback" not in err
    assert main(["algorithm.gamma=high"]) == 2
    assert "algorithm.gamma must be a number" in capsys.readouterr().err


def test_cli_missing_config_file(capsys, tmp_path):
    assert main(["--config", str(tmp_path / "nope.yaml")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_cli_subprocess_exit_code_for_unknown_key():
    proc = subprocess.run(
        [sys.executable, "-m", "strl_jax.train", "runner.max_iteration=3"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "unknown config key runner.'max_iteration'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_cli_overrides_may_follow_flags(capsys):
    """`--num_envs 8 key=value` must reach the override parser (argparse intermixing)."""
    assert main(["--num_envs", "8", "algorithm.gamma=high"]) == 2
    assert "algorithm.gamma must be a number" in capsys.readouterr().err
