"""RND (`algorithm.rnd_cfg`) against the installed rsl_rl's RandomNetworkDistillation on identical
weights and inputs: intrinsic rewards with both normalisations over several rollouts, the loss
and the predictor's own Adam steps, the weight schedules; then a short training run with it."""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from rsl_rl.extensions import RandomNetworkDistillation
from test_checkpoint_resume import assert_trees_equal
from tiny_config import tiny

from strl_jax.agents.parts import EnvStep, StepContext, UpdateContext
from strl_jax.agents.rnd import OPTION, RndPart, RndSettings, RndState, make_rnd_part, rnd_weight
from strl_jax.config_sections import read_section
from strl_jax.configs import ConfigError, resolve_config
from strl_jax.configs.from_rsl_rl import from_rsl_rl_config
from strl_jax.configs.to_rsl_rl import to_rsl_rl_train_cfg
from strl_jax.networks.normalizer import init_normalizer
from strl_jax.runners.runner import train
from strl_jax.train_loops.learner import metric_sections

D, N, T = 5, 6, 4  # state size, envs, steps per rollout
RSL_RL_CFG = {
    "num_outputs": 3,
    "predictor_hidden_dims": [8, -1],
    "target_hidden_dims": [7],
    "activation": "elu",
    "state_normalization": True,
    "reward_normalization": True,
    "weight": 0.5,
    "weight_schedule": {"mode": "linear", "initial_step": 2, "final_step": 7, "final_value": 2.0},
    "learning_rate": 0.01,
}


def flax_mlp(net: torch.nn.Sequential) -> dict:
    """strl_jax's MLP parameters holding a torch MLP's weights."""
    linears = [m for m in net if isinstance(m, torch.nn.Linear)]
    names = [f"hidden_{i}" for i in range(len(linears) - 1)] + ["output"]
    return {
        "params": {
            name: {
                "kernel": jnp.asarray(m.weight.detach().numpy().T),
                "bias": jnp.asarray(m.bias.detach().numpy()),
            }
            for name, m in zip(names, linears, strict=True)
        }
    }


def make_pair(cfg: dict = RSL_RL_CFG) -> tuple[RandomNetworkDistillation, RndPart, RndState, object]:
    """rsl_rl's module and strl_jax's part with the same networks (weight not scaled by dt)."""
    torch.manual_seed(0)
    module = RandomNetworkDistillation(num_states=D, obs_groups={"rnd_state": ["policy"]}, **cfg)
    module.train()
    part = RndPart(
        name="rnd",
        settings=read_section(RndSettings, cfg, OPTION),
        num_states=D,
        initial_weight=cfg["weight"],
        steps_per_iteration=T,
    )
    predictor = flax_mlp(module.predictor)
    train_state = RndState(
        target=flax_mlp(module.target),
        predictor=predictor,
        opt_state=part.optimizer.init(predictor),
        state_normalizer=init_normalizer(D),
    )
    rollout = part.init(jax.random.PRNGKey(0), _init_ctx())[1]
    return module, part, train_state, rollout


def _init_ctx():
    from strl_jax.agents.parts import InitContext

    return InitContext(num_envs=N, env_ids=jnp.arange(N), obs_shapes={"policy": (D,)}, action_size=1)


def _step(part, train_state, rollout, before, after, extrinsic):
    """`(reward, rollout, fields, sums)` of `part.on_step`."""
    ctx = StepContext(
        obs={"policy": before},
        mean=jnp.zeros((N, 1)),
        std=jnp.ones((N, 1)),
        step_key=jax.random.PRNGKey(0),
        env_ids=jnp.arange(N),
        iteration=jnp.zeros((), jnp.int32),
    )
    env = EnvStep(
        obs={"policy": after}, final_obs={"policy": after}, reward=extrinsic, done=jnp.zeros(N, bool)
    )
    out = part.on_step(train_state, rollout, ctx, env, extrinsic, None)
    return out.reward, out.rollout, out.fields, out.sums


class _Batch:
    def __init__(self, state):
        self.parts = {"rnd": {"state": state}}


UPDATE_CTX = UpdateContext(axis_name=None, num_envs=N, env_ids=jnp.arange(N), recurrent=False, steps=T)


def test_intrinsic_rewards_loss_and_predictor_steps_match_rsl_rl():
    """Three rollouts: per step the reward (state and discounted-reward normalisation, linear
    weight over env steps); after each, two Adam steps of the predictor on halves of the
    rollout's observations (the loss), then the state normaliser's update, as rsl_rl's PPO."""
    module, part, train_state, rollout = make_pair()
    step = jax.jit(functools.partial(_step, part))
    update = jax.jit(lambda s, x: part.minibatch_update(s, _Batch(x), UPDATE_CTX))
    after_update = jax.jit(lambda s, x: part.after_update(s, {"state": x}, UPDATE_CTX))
    rng = np.random.default_rng(0)
    obs = rng.normal(1.0, 2.0, (N, D)).astype(np.float32)
    for _ in range(3):
        stored = []
        for _ in range(T):
            nxt = rng.normal(1.0, 2.0, (N, D)).astype(np.float32)
            extrinsic = rng.normal(size=N).astype(np.float32)
            reward, rollout, fields, sums = step(train_state, rollout, obs, nxt, extrinsic)
            with torch.inference_mode():
                expected = module.get_intrinsic_reward({"policy": torch.from_numpy(nxt)}).numpy()
            intrinsic = sums["mean_step_intrinsic_reward"]  # the sum over envs
            np.testing.assert_allclose(intrinsic, expected.sum(), rtol=1e-5)
            np.testing.assert_allclose(reward - extrinsic, expected, rtol=1e-5, atol=1e-5)
            stored.append(fields["state"])
            obs = nxt
        states = np.stack(stored)  # [T, N, D], the observations before each step
        flat = states.reshape(-1, D)
        for half in (flat[: len(flat) // 2], flat[len(flat) // 2 :]):
            loss = module.compute_loss({"policy": torch.from_numpy(half)})
            module.optimizer.zero_grad()
            loss.backward()
            module.optimizer.step()
            train_state, metrics = update(train_state, half[None])
            np.testing.assert_allclose(metrics["rnd"], loss.item(), rtol=1e-5)
        for name, m in flax_mlp(module.predictor)["params"].items():
            for k in ("kernel", "bias"):
                np.testing.assert_allclose(
                    train_state.predictor["params"][name][k], m[k], rtol=1e-5, atol=1e-6
                )
        module.update_normalization({"policy": torch.from_numpy(flat)})
        train_state = after_update(train_state, states)
        np.testing.assert_allclose(train_state.state_normalizer.mean, module.state_normalizer.mean, rtol=1e-5)
    reward_std = module.reward_normalizer.emp_norm.std.numpy()
    np.testing.assert_allclose(
        np.sqrt(rollout.reward_normalizer.var), np.broadcast_to(reward_std, (N,)), rtol=1e-5
    )


@pytest.mark.parametrize(
    "schedule",
    [
        None,
        {"mode": "constant"},
        {"mode": "step", "final_step": 5, "final_value": 3.0},
        {"mode": "linear", "initial_step": 3, "final_step": 9, "final_value": -1.0},
    ],
)
def test_weight_schedules_match_rsl_rl(schedule):
    cfg = {**RSL_RL_CFG, "weight": 0.7, "weight_schedule": schedule}
    module, part, *_ = make_pair(cfg)
    steps = np.arange(1, 14)
    ours = np.asarray(rnd_weight(0.7, part.settings.weight_schedule, jnp.asarray(steps)))
    if schedule is None:
        expected = np.full(len(steps), 0.7)
    else:
        expected = [module.weight_scheduler(step=int(s), **schedule) for s in steps]
    np.testing.assert_allclose(ours, expected, rtol=1e-6)


def test_rnd_config_errors():
    base = {"num_outputs": 2, "predictor_hidden_dims": [4], "target_hidden_dims": [4]}
    for bad, message in [
        ({**base, "wieght": 1.0}, r"unknown algorithm.rnd_cfg key 'wieght'; valid keys: \['num_outputs'"),
        ({"predictor_hidden_dims": [4], "target_hidden_dims": [4]}, "rnd_cfg needs num_outputs: an integer"),
        ({**base, "num_outputs": 0}, "rnd_cfg.num_outputs must be an integer >= 1, got 0"),
        (
            {**base, "weight_schedule": {"mode": "cosine"}},
            r"weight_schedule.mode must be one of \['constant', 'step', 'linear'\], got 'cosine'",
        ),
        ({**base, "weight_schedule": {"mode": "step", "final_step": 3}}, "mode 'step' needs final_value"),
        (
            {**base, "weight_schedule": {"mode": "constant", "final_step": 3}},
            r"weight_schedule key 'final_step' with mode 'constant'; valid keys: \['mode'\]",
        ),
        (
            {
                **base,
                "weight_schedule": {"mode": "linear", "initial_step": 4, "final_step": 4, "final_value": 1},
            },
            "after initial_step",
        ),
        ({**base, "activation": "relu6"}, r"activation must be one of \[.*'elu'.*\], got 'relu6'"),
        ({**base, "target_hidden_dims": [0]}, "positive widths"),
    ]:
        with pytest.raises(ConfigError, match=message):
            read_section(RndSettings, bad, OPTION)
    rnd = "algorithm.rnd_cfg={num_outputs: 2, predictor_hidden_dims: [4], target_hidden_dims: [4]}"
    with pytest.raises(ConfigError, match="rnd_cfg applies to"):
        resolve_config("inverted_pendulum", overrides=[rnd, "algorithm.class_name=Distillation"])
    env = SimpleNamespace(observation_shapes=lambda: {"policy": (4,), "depth": (2, 3)}, dt=0.02)
    for group, message in [("privileged", r"valid choices: \['depth', 'policy'\]"), ("depth", "1-D")]:
        cfg = resolve_config("inverted_pendulum", overrides=[rnd[:-1] + f", obs_group: {group}}}"])
        with pytest.raises(ConfigError, match=message):
            make_rnd_part("rnd", env, cfg)


RND = (
    "algorithm.rnd_cfg={weight: 0.5, num_outputs: 4, predictor_hidden_dims: [8], target_hidden_dims: [8], "
    "state_normalization: true, reward_normalization: true, learning_rate: 0.005, "
    "weight_schedule: {mode: linear, initial_step: 4, final_step: 20, final_value: 1.0}}"
)


def test_training_with_rnd_logs_its_metrics_and_resumes_exactly(tmp_path):
    """Two iterations, then two more resumed from the checkpoint: the same numbers as four in
    one go (the predictor, its Adam state and both normalisers are in the checkpoint)."""
    cfg = resolve_config("inverted_pendulum", overrides=tiny(RND, "runner.max_iterations=4"))
    full = train(cfg, tmp_path / "full", verbose=False)
    for row in full.rows:
        for key in ("rnd", "weight", "mean_step_intrinsic_reward", "mean_step_extrinsic_reward"):
            assert math.isfinite(row[key]), (key, row)
    assert full.rows[-1]["mean_step_intrinsic_reward"] != 0.0
    rnd_state = full.train_state.parts["rnd"]
    assert float(rnd_state.state_normalizer.count) == 4 * 16 * 8

    short = resolve_config("inverted_pendulum", overrides=tiny(RND, "runner.max_iterations=2"))
    train(short, tmp_path / "split", verbose=False)
    resumed = train(cfg, tmp_path / "split", verbose=False, resume=True)
    assert [r["iteration"] for r in resumed.rows] == [3, 4]
    assert_trees_equal(resumed.train_state, full.train_state)
    for key in ("rnd", "weight", "mean_step_intrinsic_reward"):
        assert resumed.rows[-1][key] == full.rows[-1][key]

    from strl_jax.runners.runner import build_programs

    sections = metric_sections(build_programs(cfg).learner)
    assert sections["rnd"] == "Loss" and sections["weight"] == "Rnd"


RSL_RL_GO1 = Path(__file__).parent / "data" / "rsl_rl" / "rsl_rl5_go1_flat_train_cfg.json"


@pytest.mark.parametrize(
    ("rnd_state", "group"),
    [
        (None, "policy"),
        (["policy"], "policy"),
        (["policy", "critic"], "critic"),
        (["height_scan"], "rnd_state"),
    ],
)
def test_rsl_rl_config_maps_rnd_both_ways(rnd_state, group):
    """rsl_rl's `rnd_cfg` and `obs_groups.rnd_state` in; the `train_cfg` written back builds
    rsl_rl's own RandomNetworkDistillation with the same options."""
    data = json.loads(RSL_RL_GO1.read_text())
    data["algorithm"]["rnd_cfg"] = {k: v for k, v in RSL_RL_CFG.items() if k != "weight_schedule"}
    if rnd_state is not None:
        data["obs_groups"]["rnd_state"] = rnd_state
    mapped = from_rsl_rl_config(data)
    named = {} if rnd_state is None else {"obs_group": group}  # unset: the default, `policy`
    assert mapped["algorithm"]["rnd_cfg"] == {**data["algorithm"]["rnd_cfg"], **named}
    assert read_section(RndSettings, mapped["algorithm"]["rnd_cfg"], OPTION).obs_group == group
    if group == "rnd_state":
        assert mapped["env"]["obs_groups"]["rnd_state"] == ["height_scan"]
    cfg = resolve_config("inverted_pendulum", overrides=[RND])
    written = to_rsl_rl_train_cfg(cfg)
    assert written["obs_groups"]["rnd_state"] == ["policy"]
    module = RandomNetworkDistillation(
        num_states=D, obs_groups=written["obs_groups"], **written["algorithm"]["rnd_cfg"]
    )
    assert module.weight_scheduler(
        step=12, **written["algorithm"]["rnd_cfg"]["weight_schedule"]
    ) == pytest.approx(
        float(rnd_weight(0.5, read_section(RndSettings, cfg.algorithm.rnd_cfg, OPTION).weight_schedule, 12))
    )
    data["algorithm"]["rnd_cfg"] = None
    assert "rnd_cfg" not in from_rsl_rl_config(data)["algorithm"]
