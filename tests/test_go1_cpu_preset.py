"""configs/Go1JoystickFlatTerrain_cpu.yaml: the Go1 walking recipe for a 2-core CPU differs from
Playground's published Go1 settings (configs/Go1JoystickFlatTerrain.yaml) in exactly the settings
its header names, on the same task (bench/go1_walk.py measures what it reaches)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from strl_jax.agents.lr_schedulers import make_lr_scheduler
from strl_jax.configs import resolve_config
from strl_jax.configs.loader import config_to_dict
from strl_jax.envs.playground_env import flatten

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
    "algorithm.gamma": 0.99,
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
