"""configs/Go1JoystickFlatTerrain_cpu.yaml: the Go1 walking recipe for a 2-core CPU differs from
Playground's published Go1 settings (configs/Go1JoystickFlatTerrain.yaml) in exactly the settings
its header names, on the same task (bench/go1_walk.py measures what it reaches). Its learner
settings are the recipe configs/recipes/legged_cpu.yaml, which any legged task's preset or run
takes through `extends` or `--config`; a bad `extends` is refused with the choices named."""

from __future__ import annotations

import types
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

from strl_jax.agents.lr_schedulers import make_lr_scheduler
from strl_jax.configs import loader, resolve_config
from strl_jax.configs.loader import available_presets, available_recipes, config_to_dict, load_preset
from strl_jax.envs.playground_env import flatten
from strl_jax.errors import ConfigError

RECIPE = "recipes/legged_cpu"
RECIPE_FILE = Path(__file__).resolve().parents[1] / "configs" / f"{RECIPE}.yaml"
# the env settings a recipe over a task's preset leaves to the task
TASK_ENV = ("task", "episode_length", "action_repeat", "domain_randomization", "obs_groups", "playground")

PRESET = "Go1JoystickFlatTerrain_cpu"
# every setting the header explains, with its value in the CPU preset
CHANGED = {
    "env.num_envs": 512,
    "runner.num_steps_per_env": 24,
    "algorithm.num_mini_batches": 4,
    "algorithm.learning_rate": 0.001,
    "algorithm.lr_scheduler_class_name": "LinearLR",
    "algorithm.lr_scheduler.start_factor": 1.0,
    "algorithm.lr_scheduler.end_factor": 0.25,
    "algorithm.lr_scheduler.total_iters": 1400,
    "algorithm.entropy_coef": 0.0,
    "policy.init_noise_std": 0.5,
    "algorithm.clip_min_std": 0.2,
    "algorithm.target_kl": 0.2,
    "algorithm.gamma": 0.99,
    "runner.normalizer_clip": 3.0,
    "env.playground.reward_config.scales.tracking_lin_vel": 3.0,
    "env.playground.reward_config.scales.tracking_ang_vel": 2.0,
    # the run's length and its own evaluation (bench/go1_walk.py sets its own)
    "runner.max_iterations": 1500,
    "runner.eval_interval": 100,
    "runner.num_eval_envs": 32,
}


def leaves(name: str) -> dict:
    """The resolved config's settings by dotted name (an empty mapping is no setting)."""
    return {k: v for k, v in flatten(config_to_dict(resolve_config(name))).items() if v != {}}


def test_cpu_preset_differs_from_the_published_one_in_the_named_settings_only():
    cpu, published = leaves(PRESET), leaves("Go1JoystickFlatTerrain")
    differing = {k for k in cpu.keys() | published.keys() if cpu.get(k) != published.get(k)}
    assert differing == set(CHANGED)
    assert {k: cpu[k] for k in CHANGED} == CHANGED


def test_cpu_preset_keeps_the_task_and_its_evaluation_conditions():
    cfg = resolve_config(PRESET)
    assert cfg.env.task == "Go1JoystickFlatTerrain" and cfg.env.episode_length == 1000
    assert cfg.env.domain_randomization and cfg.env.action_repeat == 1
    # the command ranges and noise stay the task's: only reward weights are overridden
    assert set(flatten(cfg.env.playground)) == {
        "impl",
        "reward_config.scales.tracking_lin_vel",
        "reward_config.scales.tracking_ang_vel",
    }


def test_cpu_preset_learning_rate_falls_to_a_quarter_over_1400_iterations():
    alg = resolve_config(PRESET).algorithm
    scheduler = make_lr_scheduler(alg.lr_scheduler_class_name, alg.lr_scheduler, alg.learning_rate)
    lr = scheduler.initial(alg.learning_rate)
    rates = []
    for epoch in range(1, 1501):
        lr = scheduler.step(lr, jnp.asarray(epoch))
        rates.append(float(lr))
    np.testing.assert_allclose(rates[699], 1e-3 * (1 - 0.75 * 700 / 1400), rtol=1e-4)
    np.testing.assert_allclose(rates[1399:], 2.5e-4, rtol=1e-4)


def test_cpu_preset_is_the_task_preset_with_the_recipe_and_its_reward_weights():
    weights = [
        f"env.playground.reward_config.scales.{k}={CHANGED['env.playground.reward_config.scales.' + k]}"
        for k in ("tracking_lin_vel", "tracking_ang_vel")
    ]
    by_hand = resolve_config("Go1JoystickFlatTerrain", [str(RECIPE_FILE)], weights)
    assert config_to_dict(resolve_config(PRESET)) == config_to_dict(by_hand)
    assert RECIPE in available_recipes() and "extends" not in load_preset(PRESET)


def legged_presets() -> list[str]:
    """The presets of Playground's joystick and gait-tracking tasks at their published settings."""
    names = [n for n in available_presets() if "Joystick" in n or "GaitTracking" in n]
    return [n for n in names if resolve_config(n).env.task == n]


def test_the_recipe_over_every_legged_preset_sets_the_learner_and_keeps_the_task():
    recipe = flatten(load_preset(RECIPE))
    names = legged_presets()
    assert {"Go1JoystickFlatTerrain", "SpotFlatTerrainJoystick", "G1JoystickFlatTerrain"} <= set(names)
    for name in names:
        task = resolve_config(name)
        cfg = resolve_config(name, [str(RECIPE_FILE)])
        settings = flatten(config_to_dict(cfg))
        assert {k: settings[k] for k in recipe} == recipe, name
        for key in TASK_ENV:
            assert getattr(cfg.env, key) == getattr(task.env, key), (name, key)
        assert cfg.policy.actor_hidden_dims == task.policy.actor_hidden_dims, name
        assert cfg.policy.critic_hidden_dims == task.policy.critic_hidden_dims, name


def test_a_config_file_extends_a_recipe_under_its_own_settings(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("extends: recipes/legged_cpu\nalgorithm: {learning_rate: 0.0005}\n")
    cfg = resolve_config("SpotFlatTerrainJoystick", [str(path)])
    assert cfg.algorithm.learning_rate == 0.0005 and cfg.algorithm.clip_min_std == 0.2
    assert cfg.env.num_envs == 512 and cfg.env.task == "SpotFlatTerrainJoystick"


@pytest.mark.parametrize(
    "extends, needle",
    [
        (
            "recipes/legged_gpu",
            "no preset or recipe named 'recipes/legged_gpu'; "
            "recipes: ['recipes/finetune_go1_walk', 'recipes/legged_cpu'",
        ),
        ("{lr: 1}", "`extends` must be a preset or recipe name or a list of them"),
    ],
)
def test_a_bad_extends_names_the_choices(tmp_path, extends, needle):
    path = tmp_path / "mine.yaml"
    path.write_text(f"extends: {extends}\n")
    with pytest.raises(ConfigError) as err:
        resolve_config("SpotFlatTerrainJoystick", [str(path)])
    assert needle in str(err.value)


def test_presets_that_extend_each_other_in_a_cycle_are_refused(tmp_path, monkeypatch):
    (tmp_path / "recipes").mkdir()
    (tmp_path / "A.yaml").write_text("extends: [recipes/b]\n")
    (tmp_path / "recipes" / "b.yaml").write_text("extends: A\nenv: {num_envs: 8}\n")
    monkeypatch.setattr(loader, "resources", types.SimpleNamespace(files=lambda _: tmp_path))
    with pytest.raises(ConfigError) as err:
        load_preset("A")
    assert "cycle: A -> recipes/b -> A" in str(err.value)


QUADRUPEDS = {
    "Go1JoystickFlatTerrain_cpu": "Go1JoystickFlatTerrain",
    "SpotFlatTerrainJoystick_cpu": "SpotFlatTerrainJoystick",
    "BarkourJoystick_cpu": "BarkourJoystick",
}


@pytest.mark.parametrize("preset", sorted(QUADRUPEDS))
def test_each_quadruped_preset_is_its_task_under_the_quadruped_recipe(preset):
    """A quadruped's CPU preset adds nothing of its own to its task's preset and the quadruped
    recipe, which is the legged recipe plus the two tracking weights."""
    recipe_file = RECIPE_FILE.parent / "quadruped_cpu.yaml"
    task = QUADRUPEDS[preset]
    by_hand = config_to_dict(resolve_config(task, [str(recipe_file)]))
    assert config_to_dict(resolve_config(preset)) == by_hand
    weights = [
        f"env.playground.reward_config.scales.{k}={CHANGED['env.playground.reward_config.scales.' + k]}"
        for k in ("tracking_lin_vel", "tracking_ang_vel")
    ]
    assert by_hand == config_to_dict(resolve_config(task, [str(RECIPE_FILE)], weights))
    assert set(flatten(resolve_config(preset).env.playground)) == {
        "impl",
        "reward_config.scales.tracking_lin_vel",
        "reward_config.scales.tracking_ang_vel",
    }
