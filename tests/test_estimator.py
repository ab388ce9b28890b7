"""Estimator stages (StateAc, StateAcRecurrent, PrivilegeStateAcRecurrent) and EstimatorPPO's loss
against a torch transcription of st_rl's `state_estimator.py` / `estimator.py`, component slicing
and replacement against a numpy reference, and the config rules."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from strl_jax.agents.estimator import EstimatorPart, estimator_settings
from strl_jax.agents.parts import LossContext
from strl_jax.agents.ppo import PPOBatch
from strl_jax.configs import ConfigError, resolve_config
from strl_jax.networks.estimators import draw_replacements, measured_indices, run_stages, stage_units
from strl_jax.networks.normalizer import NormalizerState, normalize
from strl_jax.networks.policy import make_policy_model

# A legged robot's layouts in miniature: the policy sees a noisy velocity, the critic the true one.
POLICY = (("lin_vel", 3), ("ang_vel", 3), ("gravity", 3), ("dof_pos", 4), ("command", 3))
CRITIC = (("lin_vel", 3), ("ang_vel", 3), ("gravity", 3), ("dof_pos", 4), ("command", 3), ("friction", 1))
COMPONENTS = {"policy": POLICY, "critic": CRITIC}
SHAPES = {"policy": (16,), "critic": (17,)}
ACTIONS = 4


def policy_cfg(class_name="StateAc", **fields):
    overrides = [
        "env.task=inverted_pendulum",
        f"policy.class_name={class_name}",
        "policy.actor_hidden_dims=[8]",
        "policy.critic_hidden_dims=[8]",
        "policy.rnn_hidden_size=6",
        "policy.estimator_obs_components=[ang_vel, gravity, dof_pos, command]",
        "policy.estimator_target_components=[lin_vel]",
        "policy.estimator_kwargs={hidden_sizes: [7, 5], nonlinearity: CELU}",
        "policy.replace_state_prob=1.0",
        "algorithm.class_name=EstimatorPPO",
    ]
    overrides += [f"policy.{k}={v}" for k, v in fields.items()]
    return resolve_config(overrides=overrides).policy


# ----------------------------------------------------------------------------- torch transcription
def torch_mlp(params: dict, activation) -> torch.nn.Module:
    """A torch MLP (st_rl `MlpModel`) with strl_jax's weights (flax kernels are `[in, out]`)."""
    layers = []
    names = sorted(k for k in params if k.startswith("hidden_")) + ["output"]
    for i, name in enumerate(names):
        kernel = np.asarray(params[name]["kernel"])
        linear = torch.nn.Linear(*kernel.shape)
        linear.weight.data = torch.tensor(kernel.T)
        linear.bias.data = torch.tensor(np.asarray(params[name]["bias"]))
        layers.append(linear)
        if i < len(names) - 1:
            layers.append(activation())
    return torch.nn.Sequential(*layers)


def torch_lstm(params: dict, input_size: int, hidden_size: int) -> torch.nn.LSTM:
    lstm = torch.nn.LSTM(input_size, hidden_size)
    for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
        getattr(lstm, f"{name}_l0").data = torch.tensor(np.asarray(params["layer_0"][name]))
    return lstm


def get_subobs_by_components(obs, names, segments):
    """st_rl utils: the named components, in the order of the segments."""
    out, start = [], 0
    for name, size in segments:
        if name in names:
            out.append(obs[..., start : start + size])
        start += size
    return torch.cat(out, dim=-1)


def substitute_estimated_state(obs, names, estimate, segments):
    """st_rl utils: write the estimate into the named components, in the order of the segments."""
    obs = obs.clone()
    start, taken = 0, 0
    for name, size in segments:
        if name in names:
            obs[..., start : start + size] = estimate[..., taken : taken + size]
            taken += size
        start += size
    return obs


@pytest.mark.parametrize("prob", [1.0, 0.5])
def test_feed_forward_estimator_matches_st_rl(prob):
    """StateAc: estimate, replacement in the masked rows (gradient stopped), action mean."""
    model = make_policy_model(ACTIONS, policy_cfg(replace_state_prob=prob), COMPONENTS)
    params = model.init(jax.random.PRNGKey(0), SHAPES)
    obs = np.random.default_rng(1).normal(size=(32, 16)).astype(np.float32)
    draws = model.draw(jax.random.split(jax.random.PRNGKey(2), 32))
    mask = np.asarray(draws["estimator"])
    assert 0 < mask.sum() < 32 or prob == 1.0
    mean, _, _, est = model.forward(params, {"policy": jnp.asarray(obs)}, {}, draws)

    p = params["params"]
    estimator = torch_mlp(p["stage_estimator"]["mlp"], torch.nn.CELU)
    actor = torch_mlp(p["actor"], torch.nn.ELU)
    x = torch.tensor(obs)
    est_t = estimator(get_subobs_by_components(x, ["ang_vel", "gravity", "dof_pos", "command"], POLICY))
    m = torch.tensor(mask)
    x[m] = substitute_estimated_state(x[m], ["lin_vel"], est_t[m].detach(), POLICY)
    np.testing.assert_allclose(np.asarray(est["estimator"]), est_t.detach().numpy(), atol=1e-5)
    np.testing.assert_allclose(np.asarray(mean), actor(x).detach().numpy(), atol=1e-5)

    # Inference (no draws): every row replaced.
    mean_inf, _, _, _ = model.forward(params, {"policy": jnp.asarray(obs)}, {})
    x = torch.tensor(obs)
    x = substitute_estimated_state(x, ["lin_vel"], est_t.detach(), POLICY)
    np.testing.assert_allclose(np.asarray(mean_inf), actor(x).detach().numpy(), atol=1e-5)


def test_recurrent_adaptor_and_estimator_memories_match_st_rl():
    """PrivilegeStateAcRecurrent over a sequence with episode ends: the adaptor's and the estimator's
    own LSTM memories, each replacement with its own mask, then the actor's memory (st_rl's
    `AdaptorActorHiddenState` / `EstimatorActorHiddenState` handling, with resets zeroing all)."""
    cfg = policy_cfg(
        "PrivilegeStateAcRecurrent",
        adaptor_obs_components="[dof_pos, command]",
        adaptor_target_components="[gravity]",
        adaptor_kwargs="{hidden_sizes: [5]}",
        privilege_replace_state_prob=0.5,
        replace_state_prob=0.7,
    )
    model = make_policy_model(ACTIONS, cfg, COMPONENTS)
    params = model.init(jax.random.PRNGKey(0), SHAPES)
    T, B, H = 7, 5, 6
    rng = np.random.default_rng(3)
    obs = rng.normal(size=(T, B, 16)).astype(np.float32)
    resets = (rng.random((T, B)) < 0.25).astype(np.float32)
    resets[0] = 0
    draws = {k: jnp.asarray(rng.random((T, B)) < p) for k, p in (("adaptor", 0.5), ("estimator", 0.7))}
    hidden0 = jax.tree.map(
        lambda h: jnp.asarray(rng.normal(size=h.shape).astype(np.float32)), model.initial_hidden(B)
    )
    nobs = {"policy": jnp.asarray(obs), "critic": jnp.zeros((T, B, 17))}
    mean, _, _, est = model.sequence(params, nobs, hidden0, jnp.asarray(resets), draws)

    p = params["params"]
    adaptor_mem = torch_lstm(p["stage_adaptor"]["memory"], 7, H)
    estimator_mem = torch_lstm(p["stage_estimator"]["memory"], 13, H)
    actor_mem = torch_lstm(p["memory_a"], 16, H)
    adaptor = torch_mlp(p["stage_adaptor"]["mlp"], torch.nn.ReLU)
    estimator = torch_mlp(p["stage_estimator"]["mlp"], torch.nn.CELU)
    actor = torch_mlp(p["actor"], torch.nn.ELU)
    state = {
        k: tuple(torch.tensor(np.asarray(x)) for x in hidden0[k]) for k in ("adaptor", "estimator", "actor")
    }
    with torch.no_grad():
        for t in range(T):
            keep = torch.tensor(1 - resets[t])[None, :, None]
            state = {k: (h * keep, c * keep) for k, (h, c) in state.items()}
            x = torch.tensor(obs[t])
            feat, state["adaptor"] = adaptor_mem(
                get_subobs_by_components(x, ["dof_pos", "command"], POLICY)[None], state["adaptor"]
            )
            a_est = adaptor(feat[0])
            m = torch.tensor(np.asarray(draws["adaptor"][t]))
            x[m] = substitute_estimated_state(x[m], ["gravity"], a_est[m], POLICY)
            sub = get_subobs_by_components(x, ["ang_vel", "gravity", "dof_pos", "command"], POLICY)
            feat, state["estimator"] = estimator_mem(sub[None], state["estimator"])
            e_est = estimator(feat[0])
            m = torch.tensor(np.asarray(draws["estimator"][t]))
            x[m] = substitute_estimated_state(x[m], ["lin_vel"], e_est[m], POLICY)
            feat, state["actor"] = actor_mem(x[None], state["actor"])
            np.testing.assert_allclose(np.asarray(est["adaptor"][t]), a_est.numpy(), atol=1e-5)
            np.testing.assert_allclose(np.asarray(est["estimator"][t]), e_est.numpy(), atol=1e-5)
            np.testing.assert_allclose(np.asarray(mean[t]), actor(feat[0]).numpy(), atol=1e-5)


def test_use_actor_rnn_reads_the_actors_memory():
    cfg = policy_cfg("StateAcRecurrent", use_actor_rnn="true", replace_state_prob=0.0)
    model = make_policy_model(ACTIONS, cfg, COMPONENTS)
    (stage,) = model.stages
    assert stage.reads_actor_memory and not stage.memory and not stage.replaces
    params = model.init(jax.random.PRNGKey(0), SHAPES)
    assert "memory" not in params["params"]["stage_estimator"]
    obs = jnp.ones((3, 16))
    hidden = model.initial_hidden(3)
    _, _, new_hidden, est = model.forward(params, {"policy": obs}, hidden)
    features = new_hidden["actor"][0][-1]  # the LSTM's top-layer output of this step
    expected = torch_mlp(params["params"]["stage_estimator"]["mlp"], torch.nn.CELU)(
        torch.tensor(np.asarray(features))
    )
    np.testing.assert_allclose(np.asarray(est["estimator"]), expected.detach().numpy(), atol=1e-5)
    assert set(new_hidden) == {"actor", "critic"}


# ----------------------------------------------------------------------------- units
def test_replacement_converts_critic_units_into_the_actors():
    """With normalisers, the actor reads normalise_policy(raw estimate): what it would have read
    had the true value been the estimate."""
    model = make_policy_model(ACTIONS, policy_cfg(), COMPONENTS)
    (stage,) = model.stages
    rng = np.random.default_rng(0)

    def normalizer(n):
        return NormalizerState(
            mean=jnp.asarray(rng.normal(size=n), jnp.float32),
            var=jnp.asarray(rng.random(n) + 0.5, jnp.float32),
            count=jnp.ones(()),
        )

    norms = {"policy": normalizer(16), "critic": normalizer(17)}
    units = stage_units(model.stages, norms, "policy")
    est = jnp.asarray(rng.normal(size=(4, 3)), jnp.float32)  # critic-normalised
    obs = jnp.asarray(rng.normal(size=(4, 16)), jnp.float32)
    raw = est * (jnp.sqrt(norms["critic"].var[:3]) + 1e-2) + norms["critic"].mean[:3]
    expected = normalize(norms["policy"], jnp.concatenate([raw, jnp.zeros((4, 13))], -1))[:, :3]
    value = est * units.scale["estimator"] + units.shift["estimator"]
    np.testing.assert_allclose(np.asarray(value), np.asarray(expected), atol=1e-5)
    np.testing.assert_allclose(
        np.asarray(est * units.raw_scale["estimator"] + units.raw_shift["estimator"]),
        np.asarray(raw),
        atol=1e-5,
    )
    del obs, stage


# ----------------------------------------------------------------------------- slicing property
names = st.sampled_from([f"c{i}" for i in range(6)])


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 3), min_size=6, max_size=6),
    order=st.permutations(list(range(6))),
    inputs=st.sets(names, min_size=1),
    targets=st.sets(names, min_size=1, max_size=3),
    seed=st.integers(0, 1000),
)
def test_component_slicing_and_replacement_match_st_rl(sizes, order, inputs, targets, seed):
    """Any layout, any components (given in any order): the stage reads the inputs and writes the
    targets in the layout's order, exactly where st_rl's helpers do."""
    layout = tuple((f"c{i}", sizes[i]) for i in order)
    cfg = dataclasses.replace(
        policy_cfg(),
        estimator_obs_components=tuple(sorted(inputs, reverse=True)),
        estimator_target_components=tuple(sorted(targets, reverse=True)),
    )
    model = make_policy_model(2, cfg, {"policy": layout, "critic": layout})
    (stage,) = model.stages
    size = sum(sizes)
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(5, size)).astype(np.float32)
    value = rng.normal(size=(5, stage.output_size)).astype(np.float32)
    rows = rng.random(5) < 0.5
    np.testing.assert_array_equal(
        obs[:, np.asarray(stage.input_idx)],
        get_subobs_by_components(torch.tensor(obs), inputs, layout).numpy(),
    )
    np.testing.assert_array_equal(
        obs[:, np.asarray(stage.target_idx)],
        get_subobs_by_components(torch.tensor(obs), targets, layout).numpy(),
    )
    nets = {"estimator": lambda x, h: (jnp.asarray(value), h)}
    replaced, _, _ = run_stages(
        nets, model.stages, jnp.asarray(obs), {}, {"estimator": jnp.asarray(rows)}, None
    )
    expected = torch.tensor(obs)
    r = torch.tensor(rows)
    expected[r] = substitute_estimated_state(expected[r], targets, torch.tensor(value)[r], layout)
    np.testing.assert_array_equal(np.asarray(replaced), expected.numpy())
    # What inference needs: everything but the replaced targets that no stage reads first.
    unread = set(stage.slot_idx) - set(stage.input_idx)
    assert set(measured_indices(model.stages, size)) == set(range(size)) - unread


def test_replacement_masks_are_per_env_with_the_stages_probabilities():
    cfg = policy_cfg(
        "PrivilegeStateAcRecurrent",
        adaptor_obs_components="[dof_pos]",
        adaptor_target_components="[gravity]",
        privilege_replace_state_prob=0.25,
        replace_state_prob=0.75,
    )
    model = make_policy_model(ACTIONS, cfg, COMPONENTS)
    keys = jax.random.split(jax.random.PRNGKey(0), 20000)
    draws = model.draw(keys)
    assert float(draws["adaptor"].mean()) == pytest.approx(0.25, abs=0.01)
    assert float(draws["estimator"].mean()) == pytest.approx(0.75, abs=0.01)
    # independent between stages, and a function of each env's key alone
    both = float((draws["adaptor"] & draws["estimator"]).mean())
    assert both == pytest.approx(0.25 * 0.75, abs=0.01)
    again = draw_replacements(model.stages, keys[:7])
    np.testing.assert_array_equal(np.asarray(again["estimator"]), np.asarray(draws["estimator"][:7]))


# ----------------------------------------------------------------------------- loss
@pytest.mark.parametrize(
    ("func", "kwargs"),
    [("mse_loss", {}), ("l1_loss", {}), ("smooth_l1_loss", {"beta": 0.3}), ("huber_loss", {"delta": 0.5})],
)
def test_estimator_loss_matches_st_rl(func, kwargs):
    """`getattr(F, estimator_loss_func)(estimate, target, reduction="none").sum(-1).mean()`, the
    target being the critic observation's components."""
    model = make_policy_model(ACTIONS, policy_cfg(), COMPONENTS)
    part = EstimatorPart(
        name="estimator", stages=model.stages, loss_func=func, loss_kwargs=kwargs, coefs={"estimator": 0.7}
    )
    rng = np.random.default_rng(0)
    critic = rng.normal(size=(3, 10, 17)).astype(np.float32)
    estimate = rng.normal(size=(3, 10, 3)).astype(np.float32)
    batch = PPOBatch(
        obs={"critic": jnp.asarray(critic)},
        hidden={},
        resets=None,
        actions=None,
        old_log_prob=None,
        old_mean=None,
        old_std=None,
        old_values=None,
        advantages=None,
        returns=None,
    )
    ctx = LossContext(
        batch=batch,
        mean=None,
        std=None,
        values=None,
        iteration=None,
        estimates={"estimator": jnp.asarray(estimate)},
    )
    losses, coefs, metrics = part.losses(None, None, ctx, None)
    target = get_subobs_by_components(torch.tensor(critic), ["lin_vel"], CRITIC)
    expected = getattr(F, func)(torch.tensor(estimate), target, **kwargs, reduction="none").sum(-1).mean()
    assert float(losses["estimator_loss"]) == pytest.approx(float(expected), rel=1e-5)
    assert coefs == {"estimator_loss": 0.7} and "estimator" in metrics


# ----------------------------------------------------------------------------- config rules
def test_config_rules():
    with pytest.raises(ConfigError, match="exclude each other"):
        policy_cfg("StateAcRecurrent", use_actor_rnn="true")
    with pytest.raises(ConfigError, match="needs a recurrent policy"):
        policy_cfg(use_actor_rnn="true", replace_state_prob=0.0)
    with pytest.raises(ConfigError, match=r"replace_state_prob must lie in \[0, 1\]"):
        policy_cfg(replace_state_prob=1.5)
    with pytest.raises(ConfigError, match="hidden_sizes"):
        policy_cfg(estimator_kwargs="{hidden_size: [3]}")
    with pytest.raises(ConfigError, match="nonlinearity"):
        policy_cfg(estimator_kwargs="{nonlinearity: Swoosh}")
    with pytest.raises(ConfigError, match="has no adaptor"):
        policy_cfg(adaptor_target_components="[friction]")
    with pytest.raises(ConfigError, match="only .*EstimatorPPO"):
        resolve_config(
            "inverted_pendulum",
            overrides=[
                "policy.class_name=StateAc",
                "policy.estimator_obs_components=[a]",
                "policy.estimator_target_components=[b]",
            ],
        )
    with pytest.raises(ConfigError, match="has none"):
        estimator_settings(
            resolve_config("inverted_pendulum", overrides=["algorithm.class_name=PPO"]).__class__(
                algorithm=dataclasses.replace(
                    resolve_config("inverted_pendulum").algorithm, class_name="EstimatorPPO"
                )
            )
        )
    with pytest.raises(ConfigError, match="estimator_loss_func"):
        resolve_config(
            overrides=["algorithm.estimator_loss_func=cross_entropy"]
            + [
                f"policy.{k}={v}"
                for k, v in (
                    ("class_name", "StateAc"),
                    ("estimator_obs_components", "[a]"),
                    ("estimator_target_components", "[b]"),
                )
            ]
            + ["algorithm.class_name=EstimatorPPO"]
        )
    cfg = policy_cfg()
    with pytest.raises(ConfigError, match="unknown policy component"):
        make_policy_model(ACTIONS, dataclasses.replace(cfg, estimator_obs_components=("joint",)), COMPONENTS)
    with pytest.raises(ConfigError, match="must be a component of the policy group"):
        make_policy_model(
            ACTIONS, dataclasses.replace(cfg, estimator_target_components=("friction",)), COMPONENTS
        )
    make_policy_model(  # a purely auxiliary estimate may predict what the actor never sees
        ACTIONS,
        dataclasses.replace(cfg, estimator_target_components=("friction",), replace_state_prob=0.0),
        COMPONENTS,
    )
    with pytest.raises(ConfigError, match="no named components"):
        make_policy_model(ACTIONS, cfg, {"critic": CRITIC})
