"""A part defined in this file alone trains, resumes exactly and logs its metrics: adding a part
is a `PARTS` row, a builder and the algorithm table's row that uses it, with no edit of the
learner, the state containers, the logger or the checkpoint code."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, ClassVar

import chex
import jax
import jax.numpy as jnp
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tiny_config import tiny

from strl_jax.agents.algorithms import ALGORITHMS, PARTS, AlgorithmSpec, PartSpec
from strl_jax.agents.parts import (
    EnvStep,
    InitContext,
    LossContext,
    Part,
    StepContext,
    StepOutput,
    UpdateContext,
)
from strl_jax.configs.loader import resolve_config
from strl_jax.networks.mlp import MLP
from strl_jax.train_loops.learner_builder import PART_BUILDERS
from strl_jax.train_loops.runner import train

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


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The same AuxPPO run straight for 4 iterations, and stopped after 2 then resumed to 4."""
    root = tmp_path_factory.mktemp("parts")
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(ALGORITHMS, "AuxPPO", AlgorithmSpec("ppo", ("reward_predictor",)))
        patch.setitem(PARTS, "reward_predictor", PartSpec())
        patch.setitem(
            PART_BUILDERS, "reward_predictor", lambda env, cfg, spec: RewardPredictor(name="reward_predictor")
        )
        cfg = resolve_config(
            "inverted_pendulum",
            overrides=tiny("algorithm.class_name=AuxPPO", "runner.max_iterations=4"),
        )
        straight = train(cfg, root / "straight", verbose=False)
        first_half = dataclasses.replace(cfg, runner=dataclasses.replace(cfg.runner, max_iterations=2))
        train(first_half, root / "resumed", verbose=False)
        resumed = train(cfg, root / "resumed", verbose=False, resume=True)
    return straight, resumed


def rows(run) -> list[dict]:
    lines = (run.log_dir / "metrics.jsonl").read_text().splitlines()
    drop = ("wall_time", "iteration_time", "fps")
    return [{k: v for k, v in json.loads(line).items() if k not in drop} for line in lines]


def test_a_part_from_a_test_file_trains_and_logs(runs):
    straight, _ = runs
    logged = rows(straight)
    assert [r["iteration"] for r in logged] == [1, 2, 3, 4]
    for row in logged:
        assert {"reward_prediction", "prediction_error", "steps_seen", "surrogate"} <= set(row)
        assert row["steps_seen"] == 16 * 8  # one per env and step of the iteration
    # the auxiliary loss trains its network through the shared optimiser
    assert logged[-1]["reward_prediction"] < logged[0]["reward_prediction"]
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
    straight, resumed = runs
    assert rows(resumed) == rows(straight)
    chex.assert_trees_all_equal(resumed.train_state, straight.train_state)
    chex.assert_trees_all_equal(resumed.rollout_state, straight.rollout_state)


def test_every_part_has_a_row_and_a_builder():
    """The config side's rows (`agents.algorithms.PARTS`) and the learner's builders name the same
    parts, and every algorithm's parts have both."""
    assert set(PARTS) == set(PART_BUILDERS)
    assert {p for spec in ALGORITHMS.values() for p in spec.parts} <= set(PARTS)
