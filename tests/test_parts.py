"""A part defined in this file alone, with settings of its own, trains, resumes exactly and logs
its metrics: adding a part is its module (here this file: the part, its typed settings and its
builder) and its `PARTS` row, with no edit of the config schema, the learner, the state
containers, the logger or the checkpoint code. Its settings come from `algorithm.parts.<name>`."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, ClassVar

import chex
import jax
import jax.numpy as jnp
import pytest
from learning_runs import own_part_config, own_part_registered, own_part_run
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tiny_config import tiny

from strl_jax.agents.algorithms import ALGORITHMS, PARTS, PartSpec
from strl_jax.agents.parts import (
    EnvStep,
    InitContext,
    LossContext,
    Part,
    PartBuild,
    StepContext,
    StepOutput,
    UpdateContext,
)
from strl_jax.config_sections import key, number
from strl_jax.configs.loader import ConfigError, resolve_config
from strl_jax.networks.mlp import MLP
from strl_jax.runners.programs import build_programs
from strl_jax.runners.runner import train

PREDICTOR = MLP(hidden_dims=(8,), output_dim=1)


@dataclasses.dataclass(frozen=True, eq=False, kw_only=True)
class RewardPredictor(Part):
    """An auxiliary loss with its own network and state: an MLP on the critic observation predicts
    the env's reward. Train state: its params and an average of its error after each update;
    rollout state: steps each env has taken; step fields: the observation and the reward."""

    sections: ClassVar[dict[str, str]] = {"reward_prediction": "Loss", "prediction_error": "Aux"}
    coef: float = 0.5

    def init(self, key: jax.Array, ctx: InitContext) -> tuple[Any, Any]:
        params = PREDICTOR.init(key, jnp.zeros((1, *ctx.obs_shapes["critic"])))
        train = {"params": params, "error": jnp.zeros((), jnp.float32)}
        return train, jnp.zeros((ctx.num_envs,), jnp.int32)

    def trainable(self, train: Any) -> Any:
        return train["params"]

    def with_trainable(self, train: Any, params: Any) -> Any:
        return {**train, "params": params}

    def on_step(self, train, rollout, ctx: StepContext, env: EnvStep, reward, acted) -> StepOutput:
        fields = {"obs": ctx.obs["critic"], "reward": env.reward}
        return StepOutput(
            reward=reward,
            rollout=rollout + 1,
            fields=fields,
            sums={"env_steps_seen": jnp.ones_like(env.reward).sum()},
        )

    def error(self, params: Any, fields: dict) -> jax.Array:
        prediction = PREDICTOR.apply(params, fields["obs"])[..., 0]
        return jnp.mean(jnp.square(prediction - fields["reward"]))

    def losses(self, params, train, ctx: LossContext, inputs):
        loss = self.error(params, ctx.batch.parts[self.name])
        return (
            {"reward_prediction_loss": loss},
            {"reward_prediction_loss": self.coef},
            {"reward_prediction": loss},
        )

    def after_update(self, train, fields: dict, ctx: UpdateContext) -> Any:
        return {**train, "error": 0.5 * train["error"] + 0.5 * self.error(train["params"], fields)}

    def iteration_metrics(self, train, sums, num_samples, iteration):
        return {"prediction_error": train["error"], "steps_seen": sums["env_steps_seen"]}


@dataclasses.dataclass(frozen=True)
class RewardPredictorSettings:
    """The part's typed settings, `algorithm.parts.reward_predictor` (read and checked by
    `config_sections.read_section`, as the row's `section`)."""

    coef: float = key(number(minimum=0.0), 0.5)


def build_reward_predictor(b: PartBuild) -> RewardPredictor:
    return RewardPredictor(name=b.name, coef=b.settings.coef)


ROW = PartSpec(build_reward_predictor, section=RewardPredictorSettings, option="parts.reward_predictor")
OWN = tiny("algorithm.parts.reward_predictor.coef=0.25")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """PPO with the part (its settings under `algorithm.parts`) straight for 4 iterations
    (`learning_runs.own_part_run`, also measured by bench/learning_spread.py, case `part`), the
    same run stopped after 2 then resumed to 4, and the part the learner was built with."""
    root = tmp_path_factory.mktemp("parts")
    with own_part_registered():
        straight = own_part_run(root / "straight")
        cfg = own_part_config()
        first_half = dataclasses.replace(cfg, runner=dataclasses.replace(cfg.runner, max_iterations=2))
        train(first_half, root / "resumed", verbose=False)
        resumed = train(cfg, root / "resumed", verbose=False, resume=True)
        (part,) = build_programs(cfg).learner.parts  # the cached programs of the runs
    return straight, resumed, part


def rows(run) -> list[dict]:
    lines = (run.log_dir / "metrics.jsonl").read_text().splitlines()
    drop = ("wall_time", "iteration_time", "fps")
    return [{k: v for k, v in json.loads(line).items() if k not in drop} for line in lines]


def test_a_part_from_a_test_file_trains_and_logs(runs):
    straight, _, part = runs
    assert part.coef == 0.25  # from algorithm.parts.reward_predictor, through its typed settings
    logged = rows(straight)
    assert [r["iteration"] for r in logged] == [1, 2, 3, 4]
    for row in logged:
        assert {"reward_prediction", "prediction_error", "steps_seen", "surrogate"} <= set(row)
        assert row["steps_seen"] == 16 * 8  # one per env and step of the iteration
    # the auxiliary loss trains its network through the shared optimiser. BENCHMARKS.md, Learning
    # spread: part loss: iteration 4's over iteration 1's, seeds 0-5, 0.25 / 0.30 / 0.33 (weight 0:
    # 0.87): margin 0.17 to the worst.
    assert logged[-1]["reward_prediction"] < 0.5 * logged[0]["reward_prediction"]
    params = straight.train_state.parts["reward_predictor"]["params"]
    assert int(jnp.sum(straight.rollout_state.parts["reward_predictor"])) == 4 * 16 * 8
    assert "reward_predictor" in str(jax.tree_util.tree_structure(straight.train_state.opt_state))
    assert jax.tree.leaves(params)
    events = EventAccumulator(str(straight.log_dir))
    events.Reload()
    assert {"Loss/reward_prediction", "Aux/prediction_error", "Train/steps_seen"} <= set(
        events.Tags()["scalars"]
    )


def test_a_part_from_a_test_file_resumes_exactly(runs):
    straight, resumed, _ = runs
    assert rows(resumed) == rows(straight)
    chex.assert_trees_all_equal(resumed.train_state, straight.train_state)
    chex.assert_trees_all_equal(resumed.rollout_state, straight.rollout_state)


def test_every_algorithms_part_has_a_row_with_a_builder():
    assert {p for spec in ALGORITHMS.values() for p in spec.parts} <= set(PARTS)
    assert all(callable(row.build) for row in PARTS.values())


def test_own_part_settings_are_checked_by_name(monkeypatch):
    with pytest.raises(ConfigError, match=r"unknown part algorithm.parts.reward_predictor; parts that take"):
        resolve_config("inverted_pendulum", overrides=OWN)  # no row: no such part
    monkeypatch.setitem(PARTS, "reward_predictor", ROW)
    with pytest.raises(ConfigError, match=r"unknown algorithm.parts.reward_predictor key 'weight'"):
        resolve_config("inverted_pendulum", overrides=tiny("algorithm.parts.reward_predictor.weight=1"))
    with pytest.raises(ConfigError, match=r"algorithm.parts.reward_predictor.coef must be a number >= 0"):
        resolve_config("inverted_pendulum", overrides=tiny("algorithm.parts.reward_predictor.coef=-1"))
    with pytest.raises(ConfigError, match=r"algorithm.parts.reward_predictor must be a mapping"):
        resolve_config("inverted_pendulum", overrides=tiny("algorithm.parts.reward_predictor=3"))
