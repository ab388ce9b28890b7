"""The MuJoCo Playground presets (configs/<Task>.yaml) hold the brax PPO settings Playground
publishes for each task, under strl_jax's names.

Expected values are computed here from Playground's own `brax_ppo_config`, independently of the
mapping code in bench/brax_mapping.py; a last test checks that the files are what
`bench/playground_settings.py` writes (headers included).
"""

from __future__ import annotations

import contextlib
import io
import math
import sys
from functools import cache
from pathlib import Path

import pytest
from extras import require_playground

require_playground()

from mujoco_playground import dm_control_suite, locomotion, registry  # noqa: E402
from mujoco_playground.config import dm_control_suite_params, locomotion_params  # noqa: E402

from strl_jax.configs import available_presets, resolve_config  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
LOCOMOTION = list(locomotion.ALL_ENVS)
SUITE = list(dm_control_suite.ALL_ENVS)
TASKS = LOCOMOTION + SUITE
# brax 0.14.2 ppo.train / make_ppo_networks defaults that Playground's settings rely on
BRAX_DEFAULTS = dict(
    clipping_epsilon=0.3,
    gae_lambda=0.95,
    max_grad_norm=None,
    policy_hidden_layer_sizes=(32, 32, 32, 32),
    value_hidden_layer_sizes=(256, 256, 256, 256, 256),
    policy_obs_key="state",
    value_obs_key="state",
)
EVAL_ENVS = 128  # learning/train_jax_ppo.py's default


def published(task: str) -> dict:
    """Playground's brax PPO settings for `task` over brax's defaults, network_factory flattened."""
    params = locomotion_params if task in LOCOMOTION else dm_control_suite_params
    rl = params.brax_ppo_config(task, "jax").to_dict()
    return {**BRAX_DEFAULTS, **rl, **rl.pop("network_factory", {})}


@cache
def observation_keys(task: str) -> tuple[str, ...] | None:
    """Keys of the task's observation dict (None: one array), from its reset's shape."""
    import jax

    from strl_jax.envs.menagerie import use_offline_menagerie

    use_offline_menagerie(task)
    with contextlib.redirect_stdout(io.StringIO()):
        env = registry.load(task, config_overrides={"impl": "jax"})
    obs = jax.eval_shape(env.reset, jax.random.PRNGKey(0)).obs
    return tuple(obs) if isinstance(obs, dict) else None


def test_every_task_with_published_ppo_settings_has_a_preset():
    assert set(TASKS) <= set(available_presets())


@pytest.mark.parametrize("task", TASKS)
def test_preset_holds_the_published_settings(task):
    rl = published(task)
    cfg = resolve_config(task)
    ar = rl["action_repeat"]
    unrolls = rl["batch_size"] * rl["num_minibatches"] // rl["num_envs"]
    assert unrolls * rl["num_envs"] == rl["batch_size"] * rl["num_minibatches"]
    steps = rl["num_envs"] * unrolls * rl["unroll_length"] * ar

    assert cfg.env.task == task
    assert cfg.env.num_envs == rl["num_envs"]
    assert cfg.env.episode_length == math.ceil(rl["episode_length"] / ar)
    assert cfg.env.action_repeat == ar
    assert cfg.env.playground == {"impl": "jax"}
    with contextlib.redirect_stdout(io.StringIO()):
        assert cfg.env.domain_randomization == (registry.get_domain_randomizer(task) is not None)

    assert cfg.runner.num_steps_per_env == unrolls * rl["unroll_length"]
    assert cfg.runner.empirical_normalization == rl["normalize_observations"]
    assert cfg.runner.max_iterations == math.ceil(rl["num_timesteps"] / steps)
    assert cfg.runner.eval_interval == math.ceil(cfg.runner.max_iterations / (rl["num_evals"] - 1))
    assert cfg.runner.num_eval_envs == EVAL_ENVS

    alg = cfg.algorithm
    assert alg.num_mini_batches == rl["num_minibatches"]
    assert alg.num_learning_epochs == rl["num_updates_per_batch"]
    assert alg.learning_rate == rl["learning_rate"]
    assert alg.entropy_coef == rl["entropy_cost"]
    assert alg.gamma == rl["discounting"]
    assert alg.lam == rl["gae_lambda"]
    assert alg.clip_param == rl["clipping_epsilon"]
    assert alg.reward_scale == rl["reward_scaling"]
    assert alg.max_grad_norm == rl["max_grad_norm"]
    assert alg.schedule == "fixed"  # brax has no adaptive-KL schedule in these settings

    assert cfg.policy.actor_hidden_dims == tuple(rl["policy_hidden_layer_sizes"])
    assert cfg.policy.critic_hidden_dims == tuple(rl["value_hidden_layer_sizes"])
    assert rl["policy_obs_key"] == "state" and "policy" not in cfg.env.obs_groups
    if rl["value_obs_key"] == "privileged_state":
        assert "critic" not in cfg.env.obs_groups  # strl_jax's default critic input

    # the CPU size of the README keeps the batch layout valid
    assert resolve_config(task, overrides=["env.num_envs=256"]).env.num_envs == 256


@pytest.mark.parametrize("task", [t for t in LOCOMOTION if published(t)["value_obs_key"] == "state"])
def test_critic_sees_the_state_where_playground_value_network_does(task):
    """strl_jax's critic defaults to `privileged_state` where the task has one; Playground's
    value network reads `state` for these tasks, so their presets name it."""
    keys = observation_keys(task)
    expected = {"critic": "state"} if keys is not None and "privileged_state" in keys else {}
    assert resolve_config(task).env.obs_groups == expected


def test_presets_are_what_the_generator_writes(monkeypatch):
    sys.path.insert(0, str(REPO / "bench"))
    try:
        import playground_settings as writer
    finally:
        sys.path.remove(str(REPO / "bench"))
    monkeypatch.setattr(writer, "observation_keys", lambda task, overrides: observation_keys(task))
    for task in TASKS:
        pub = writer.published_settings(task)
        groups = writer.obs_groups(task, pub, {"impl": "jax"})
        text = writer.preset_text(task, pub, groups, writer.has_randomizer(task))
        assert (REPO / "configs" / f"{task}.yaml").read_text() == text, task
