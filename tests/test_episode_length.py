"""An env's own episode length holds unless `env.episode_length` sets one.

An MJX env by entry point whose `default_config()` asks for 200-step episodes
(`tests/user_envs/point_reach.py`) trains with 200-step episodes and its run's config.yaml records
200; `env.episode_length=50` replaces it. Registry tasks resolve the same way: a Playground task's
own `episode_length` (over `env.action_repeat`), 1000 for one without (Brax tasks).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # the entry point names `tests.user_envs.*` from the repository root
    sys.path.insert(0, str(ROOT))

from strl_jax.configs.loader import resolve_config  # noqa: E402
from strl_jax.configs.schema import EnvConfig  # noqa: E402
from strl_jax.envs.tasks import DEFAULT_EPISODE_LENGTH, make_env_from_config, with_episode_length  # noqa: E402
from strl_jax.errors import ConfigError  # noqa: E402
from strl_jax.train import main as train_main  # noqa: E402
from tests.user_envs.point_reach import EPISODE_LENGTH  # noqa: E402

REACH = "tests.user_envs.point_reach:PointReach"
STEPS = 100  # per iteration: two iterations reach the end of a 200-step episode
SMALL = [
    "env.num_envs=2",
    "policy.actor_hidden_dims=[8]",
    "policy.critic_hidden_dims=[8]",
    f"runner.num_steps_per_env={STEPS}",
    "algorithm.num_mini_batches=2",
    "algorithm.num_learning_epochs=1",
    "runner.eval_interval=0",
    "runner.print_interval=1000",
]


def trained(log_dir: Path, *overrides: str) -> tuple[int, list[float | None]]:
    """`(config.yaml's env.episode_length, each iteration's mean finished-episode length)` of a
    two-iteration run of the reach env by entry point."""
    argv = ["--task", REACH, "--quiet", "--max_iterations", "2", "--log_dir", str(log_dir)]
    assert train_main([*argv, *SMALL, *overrides]) == 0
    recorded = yaml.safe_load((log_dir / "config.yaml").read_text())["env"]["episode_length"]
    rows = [json.loads(line) for line in (log_dir / "metrics.jsonl").read_text().splitlines()]
    return recorded, [row.get("mean_episode_length") for row in rows]


def test_an_entry_points_own_episode_length_holds_and_config_yaml_records_it(tmp_path):
    recorded, lengths = trained(tmp_path / "own")
    assert recorded == EPISODE_LENGTH == 200
    assert lengths == [None, 200.0]  # no episode ends in the first 100 steps; every one at 200


def test_env_episode_length_replaces_the_envs_own(tmp_path):
    recorded, lengths = trained(tmp_path / "set", "env.episode_length=50")
    assert recorded == 50
    assert lengths == [50.0, 50.0]


def test_the_built_env_truncates_at_the_resolved_length():
    cfg = resolve_config(REACH, overrides=["env.num_envs=2"])
    assert make_env_from_config(cfg.env).episode_length == EPISODE_LENGTH
    doubled = with_episode_length(EnvConfig(task=REACH, action_repeat=2))
    assert doubled.episode_length == EPISODE_LENGTH // 2  # counted in control steps, as Playground does
    assert with_episode_length(EnvConfig(task=REACH, playground={"episode_length": 80})).episode_length == 80
    with pytest.raises(ConfigError, match="episode_length is 0"):
        with_episode_length(EnvConfig(task=REACH, playground={"episode_length": 0}))


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"task": "Go1Getup"}, 300),  # Playground's own, not 1000
        ({"task": "PandaPickCube"}, 150),  # a task without a preset
        ({"task": "Go1Getup", "action_repeat": 2}, 150),
        ({"task": "Go1Handstand", "playground": {"episode_length": 120}}, 120),
        ({"task": "Go1Getup", "episode_length": 77}, 77),  # the config's wins
        ({"task": "CartpoleBalance"}, 1000),
        ({"task": "inverted_pendulum"}, DEFAULT_EPISODE_LENGTH),  # Brax: none of its own
    ],
)
def test_registry_tasks_resolve_their_own_episode_length(env, expected):
    assert with_episode_length(EnvConfig(**env)).episode_length == expected


def test_presets_keep_theirs_and_the_loader_takes_null_but_not_zero():
    assert resolve_config(REACH).env.episode_length is None  # unset: the env's own, resolved at build
    assert resolve_config("Go1Handstand").env.episode_length == 500
    assert resolve_config("inverted_pendulum").env.episode_length == 1000
    assert resolve_config("PandaPickCube", overrides=["env.episode_length=null"]).env.episode_length is None
    with pytest.raises(ConfigError, match="env.episode_length must be at least 1"):
        resolve_config(REACH, overrides=["env.episode_length=0"])
