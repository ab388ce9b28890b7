"""Inference policy and export: the ONNX model and the jax.export artifact compute the same
actions as the JAX policy (normaliser and clipping included)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from tiny_config import tiny

from strl_jax.configs.loader import resolve_config
from strl_jax.export import (
    ONNX_OPSET,
    ExportError,
    export_jax_policy,
    load_jax_policy,
    onnx_policy_model,
)
from strl_jax.export import main as export_main
from strl_jax.inference import get_acting_policy, get_inference_policy, load_policy
from strl_jax.networks.actor_critic import make_actor_critic
from strl_jax.networks.mlp import ACTIVATIONS
from strl_jax.networks.normalizer import NormalizerState
from strl_jax.networks.policy import make_policy_model
from strl_jax.train_loops.runner import train

OBS, ACT = 7, 3
TINY = tiny("runner.max_iterations=2")


def random_policy(*overrides: str, seed: int = 0):
    """A config, scaled-up random MLP params and random normaliser statistics."""
    cfg = resolve_config("inverted_pendulum", overrides=["policy.actor_hidden_dims=[32, 16]", *overrides])
    keys = jax.random.split(jax.random.PRNGKey(seed), 4)
    params = make_actor_critic(ACT, cfg.policy).init(keys[0], jnp.zeros((1, OBS)), jnp.zeros((1, OBS)))
    params = jax.tree.map(lambda x: 3.0 * x, params)
    stats = NormalizerState(
        mean=jax.random.normal(keys[1], (OBS,)),
        var=jnp.exp(jax.random.normal(keys[2], (OBS,))),
        count=jnp.float32(100.0),
    )
    obs = np.asarray(3.0 * jax.random.normal(keys[3], (64, OBS)), np.float32)
    return cfg, params, {"policy": stats, "critic": stats}, obs


def random_recurrent_policy(rnn_type: str, num_layers: int, seed: int = 0):
    """A recurrent config with a tiny memory, scaled-up random params and random normaliser statistics."""
    cfg, _, normalizers, obs = random_policy(
        "policy.class_name=ActorCriticRecurrent",
        f"policy.rnn_type={rnn_type}",
        f"policy.rnn_num_layers={num_layers}",
        "policy.rnn_hidden_size=6",
        "policy.actor_hidden_dims=[8]",
        "policy.critic_hidden_dims=[8]",
        "env.clip_actions=1.0",
        seed=seed,
    )
    shapes = {"policy": (OBS,), "critic": (OBS,)}
    params = make_policy_model(ACT, cfg.policy).init(jax.random.PRNGKey(seed + 1), shapes)
    params = jax.tree.map(lambda x: 3.0 * x, params)
    return cfg, params, normalizers, obs


def run_onnx(model: onnx.ModelProto, obs: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(["actions"], {"obs": obs})[0]


@pytest.mark.parametrize("clip", ["1.0", "null"])
@pytest.mark.parametrize("activation", sorted(ACTIVATIONS))
def test_onnx_matches_the_jax_policy(activation, clip):
    overrides = (f"policy.activation={activation}", f"env.clip_actions={clip}")
    cfg, params, normalizers, obs = random_policy(*overrides)
    expected = np.asarray(get_inference_policy(cfg, params, normalizers)(obs))  # eager: no compile per case
    model = onnx_policy_model(cfg, params, normalizers, OBS)
    np.testing.assert_allclose(run_onnx(model, obs), expected, atol=1e-5, rtol=0)


def test_onnx_model_interface_and_normaliser_switch():
    cfg, params, normalizers, obs = random_policy("runner.empirical_normalization=false")
    model = onnx_policy_model(cfg, params, normalizers, OBS)
    assert model.opset_import[0].version == ONNX_OPSET
    assert [i.name for i in model.graph.input] == ["obs"]
    assert [o.name for o in model.graph.output] == ["actions"]
    dims = model.graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_param == "batch" and dims[1].dim_value == OBS
    expected = np.asarray(get_inference_policy(cfg, params, normalizers)(obs))
    np.testing.assert_allclose(run_onnx(model, obs[:1]), expected[:1], atol=1e-5, rtol=0)


def test_onnx_refuses_what_it_cannot_express():
    cfg, params, normalizers, _ = random_policy()
    weird = dataclasses.replace(cfg, policy=dataclasses.replace(cfg.policy, activation="weird"))
    with pytest.raises(ExportError, match="activation 'weird' has no ONNX form here; supported: \\['crelu'"):
        onnx_policy_model(weird, params, normalizers, OBS)
    recurrent, params, _, _ = random_recurrent_policy("gru", 1)
    weird = dataclasses.replace(recurrent, policy=dataclasses.replace(recurrent.policy, activation="weird"))
    with pytest.raises(ExportError, match="activation 'weird' has no ONNX form here"):
        onnx_policy_model(weird, params, normalizers, OBS)
    other = dataclasses.replace(cfg, policy=dataclasses.replace(cfg.policy, class_name="Transformer"))
    with pytest.raises(ExportError, match="supports ActorCritic and ActorCriticRecurrent policies"):
        onnx_policy_model(other, params, normalizers, OBS)


RECURRENT_CASES = [(rnn_type, layers) for rnn_type in ("gru", "lstm") for layers in (1, 2)]


@pytest.fixture(scope="module", params=RECURRENT_CASES, ids=[f"{t}-{n}" for t, n in RECURRENT_CASES])
def recurrent_onnx(request):
    """A random recurrent policy, its ONNX model and an onnxruntime session (built once per case)."""
    rnn_type, layers = request.param
    cfg, params, normalizers, obs = random_recurrent_policy(rnn_type, layers)
    model = onnx_policy_model(cfg, params, normalizers, OBS)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return cfg, params, normalizers, obs, model, session


def test_onnx_recurrent_interface(recurrent_onnx):
    cfg, _, _, _, model, _ = recurrent_onnx
    lstm = cfg.policy.rnn_type == "lstm"
    assert [i.name for i in model.graph.input] == ["obs", "h_in"] + (["c_in"] if lstm else [])
    assert [o.name for o in model.graph.output] == ["actions", "h_out"] + (["c_out"] if lstm else [])
    dims = [(d.dim_value, d.dim_param) for d in model.graph.input[1].type.tensor_type.shape.dim]
    assert dims == [(cfg.policy.rnn_num_layers, ""), (0, "batch"), (6, "")]


def test_onnx_recurrent_policy_matches_the_jax_policy_over_steps(recurrent_onnx):
    cfg, params, normalizers, obs, _, session = recurrent_onnx
    acting = get_acting_policy(cfg, params, normalizers)
    lstm = cfg.policy.rnn_type == "lstm"
    in_names = ["h_in", "c_in"] if lstm else ["h_in"]
    out_names = ["actions", "h_out", "c_out"] if lstm else ["actions", "h_out"]
    batch = 8
    h_jax = acting.initial_hidden(batch)
    h_onnx = [np.asarray(h) for h in jax.tree.leaves(h_jax)]
    for t in range(5):
        o = obs[batch * t : batch * (t + 1)]
        a_jax, h_jax = acting.step(o, h_jax)  # eager: no compile per case
        a_onnx, *h_onnx = session.run(out_names, {"obs": o, **dict(zip(in_names, h_onnx, strict=True))})
        np.testing.assert_allclose(a_onnx, np.asarray(a_jax), atol=1e-5, rtol=0)
        for got, want in zip(h_onnx, jax.tree.leaves(h_jax), strict=True):
            np.testing.assert_allclose(got, np.asarray(want), atol=1e-5, rtol=0)
    assert all(float(np.abs(h).max()) > 0.1 for h in h_onnx)
    assert 0 < float(np.abs(a_onnx).max()) <= 1.0


def test_jax_export_artifact_reproduces_the_policy():
    cfg, params, normalizers, obs = random_policy("policy.activation=tanh")
    policy = get_inference_policy(cfg, params, normalizers)
    exported = load_jax_policy(export_jax_policy(get_acting_policy(cfg, params, normalizers), OBS))
    for batch in (1, 33):
        expected = np.asarray(policy(obs[:batch]))
        np.testing.assert_allclose(np.asarray(exported(obs[:batch])), expected, atol=1e-6)


@pytest.mark.parametrize("rnn_type", ["gru", "lstm"])
def test_jax_export_of_a_recurrent_policy_carries_the_hidden_state(rnn_type):
    cfg = resolve_config(
        "inverted_pendulum",
        overrides=[
            "policy.class_name=ActorCriticRecurrent",
            f"policy.rnn_type={rnn_type}",
            "policy.rnn_hidden_size=8",
            "policy.actor_hidden_dims=[16]",
        ],
    )
    shapes = {"policy": (OBS,), "critic": (OBS,)}
    params = make_policy_model(ACT, cfg.policy).init(jax.random.PRNGKey(0), shapes)
    _, _, normalizers, obs = random_policy()
    acting = get_acting_policy(cfg, params, normalizers)
    with pytest.raises(ValueError, match="get_acting_policy"):
        get_inference_policy(cfg, params, normalizers)
    exported = load_jax_policy(export_jax_policy(acting, OBS))
    h_jax = h_exp = acting.initial_hidden(5)
    for t in range(3):
        a_jax, h_jax = acting.step(obs[5 * t : 5 * t + 5], h_jax)
        a_exp, h_exp = exported(obs[5 * t : 5 * t + 5], h_exp)
        np.testing.assert_allclose(np.asarray(a_exp), np.asarray(a_jax), atol=1e-6)
    assert any(float(jnp.abs(h).max()) > 0 for h in jax.tree.leaves(h_exp))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("run")
    return train(resolve_config("inverted_pendulum", overrides=TINY), log_dir, verbose=False)


def test_export_cli_writes_artifacts_that_match_the_checkpoint(trained, tmp_path, capsys):
    assert export_main([str(trained.log_dir), "--out", str(tmp_path)]) == 0
    assert "obs [batch, 4] -> actions [batch, 1]" in capsys.readouterr().out
    obs = np.asarray(2.0 * jax.random.normal(jax.random.PRNGKey(3), (16, 4)), np.float32)
    state = trained.train_state
    cfg = load_policy(trained.log_dir).cfg
    expected = np.asarray(get_inference_policy(cfg, state.params, state.normalizers)(obs))
    model = onnx.load(str(tmp_path / "policy.onnx"))
    np.testing.assert_allclose(run_onnx(model, obs), expected, atol=1e-5, rtol=0)
    exported = load_jax_policy((tmp_path / "policy.jax_export").read_bytes())
    np.testing.assert_allclose(np.asarray(exported(obs)), expected, atol=1e-6)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [(["{tmp}/nowhere"], "does not exist"), (["{run}", "--checkpoint", "99"], "no checkpoint 99 in")],
)
def test_export_cli_errors(trained, tmp_path, capsys, argv, needle):
    argv = [a.format(tmp=tmp_path, run=trained.log_dir) for a in argv]
    assert export_main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err
