"""Encoder policies end to end on the pendulum with named components: EncoderActorCritic trains,
resumes exactly and plays; a visual deterministic policy acts with its mean."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jax
import numpy as np
import pytest
from tiny_config import tiny

from strl_jax.checkpoints.orbax_checkpoints import load_params_and_normalizers
from strl_jax.configs.loader import resolve_config
from strl_jax.errors import ConfigError
from strl_jax.play import main as play_main
from strl_jax.runners.runner import build_programs, run_keys, train
from strl_jax.train import main as train_main

NAMED = [
    "env.obs_groups.policy={cart: [0], pole: [1], velocities: [2, 3]}",
    "env.obs_groups.critic={cart: [0], pole: [1], velocities: [2, 3]}",
]
ENCODED = tiny(
    *NAMED,
    "policy.class_name=EncoderActorCritic",
    "policy.encoder_component_names=[velocities]",
    "policy.encoder_kwargs={hidden_sizes: [8], nonlinearity: ELU}",
    "policy.encoder_output_size=3",
    "policy.critic_encoder_component_names=shared",
    "runner.eval_interval=2",
)
VISUAL = tiny(
    "env.obs_groups.policy={state: [0, 1, 2, 3]}",
    "policy.class_name=VisualDeterministicAC",
    "policy.visual_component_name=state",
    "policy.visual_kwargs={image_shape: [1, 2, 2], channels: [2], kernel_sizes: [1], strides: [1], "
    "hidden_sizes: [4]}",
    "policy.visual_latent_size=3",
    "runner.eval_interval=0",
)
TIME_KEYS = {"wall_time", "fps", "iteration_time"}


def rows(log_dir: Path) -> list[dict]:
    out = [json.loads(x) for x in (Path(log_dir) / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in TIME_KEYS} for r in out]


@pytest.fixture(scope="module")
def encoded_run(tmp_path_factory):
    cfg = resolve_config("inverted_pendulum", overrides=[*ENCODED, "runner.max_iterations=4"])
    return train(cfg, tmp_path_factory.mktemp("encoded"), verbose=False)


def distance(a, b) -> float:
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b))))


def test_encoder_policy_trains_with_encoder_parameters(encoded_run):
    """The encoder's parameters are the policy's and the update trains them: between the
    checkpoints of iterations 2 and 4 every encoder and actor leaf moved."""
    params = encoded_run.train_state.params["params"]
    assert params["encoder_velocities"]["linear_1"]["kernel"].shape == (8, 3)
    assert params["actor"]["hidden_0"]["kernel"].shape == (1 + 1 + 3, 16)  # cart, pole, latent
    assert "critic_encoder_velocities" not in params  # shared: the critic reads the actor's encoder
    assert [r["iteration"] for r in encoded_run.rows] == [1, 2, 3, 4]
    earlier, _, step = load_params_and_normalizers(encoded_run.log_dir, encoded_run.train_state, step=2)
    assert step == 2
    for name in ("encoder_velocities", "actor"):
        change = jax.tree.map(distance, params[name], earlier["params"][name])
        for path, moved in jax.tree_util.tree_leaves_with_path(change):
            assert moved > 1e-6, f"{name}{jax.tree_util.keystr(path)} did not change in 2 updates"


def test_encoder_policy_resumes_exactly_and_plays(encoded_run, tmp_path, capsys):
    args = ["--task", "inverted_pendulum", "--log_dir", str(tmp_path), "--quiet", *ENCODED]
    assert train_main([*args, "runner.max_iterations=2"]) == 0
    assert train_main(["--resume", str(tmp_path), "--quiet", "--more_iterations", "2"]) == 0
    assert rows(tmp_path) == rows(encoded_run.log_dir)
    assert play_main([str(tmp_path), "--episodes", "2", "--no-video"]) == 0, capsys.readouterr().err


def test_visual_deterministic_policy_executes_its_mean():
    with pytest.raises(ConfigError, match="acts with its mean action, where the gradient of PPO's surrogate"):
        resolve_config("inverted_pendulum", overrides=VISUAL)
    # the rollout alone (a teacher's algorithm would train it): built without the config check
    blind = [o for o in VISUAL if "class_name" not in o and "kwargs" not in o]
    plain = resolve_config("inverted_pendulum", overrides=blind)
    kwargs = {
        "image_shape": [1, 2, 2],
        "channels": [2],
        "kernel_sizes": [1],
        "strides": [1],
        "hidden_sizes": [4],
    }
    policy = dataclasses.replace(plain.policy, class_name="VisualDeterministicAC", visual_kwargs=kwargs)
    cfg = dataclasses.replace(plain, policy=policy)
    programs = build_programs(cfg)
    assert programs.learner.model.deterministic
    train_state, rollout_state = programs.init(run_keys(cfg)[0])
    learner = programs.learner
    _, transitions, _ = jax.jit(learner.rollout)(train_state, rollout_state, jax.random.PRNGKey(3))
    np.testing.assert_array_equal(np.asarray(transitions.actions), np.asarray(transitions.mean))
    assert "encoder_state" in train_state.params["params"]
