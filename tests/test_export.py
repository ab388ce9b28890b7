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
from strl_jax.errors import ExportError
from strl_jax.export import (
    ONNX_IR_VERSION,
    ONNX_OPSET,
    export_jax_policy,
    load_jax_policy,
    onnx_policy_model,
)
from strl_jax.export import main as export_main
from strl_jax.inference import get_acting_policy, get_inference_policy, load_policy
from strl_jax.networks.mlp import ACTIVATIONS
from strl_jax.networks.normalizer import NormalizerState
from strl_jax.networks.policy import make_policy_model
from strl_jax.onnx_graph import TensorSpec, function_to_onnx
from strl_jax.runners.runner import train

OBS, ACT = 7, 3
SHAPES = {"policy": (OBS,), "critic": (OBS,)}
TINY = tiny("runner.max_iterations=2")
GRAPH = {"opset": ONNX_OPSET, "ir_version": ONNX_IR_VERSION, "graph_name": "test"}


def random_policy(*overrides: str, seed: int = 0):
    """A config, scaled-up random MLP params and random normaliser statistics."""
    cfg = resolve_config("inverted_pendulum", overrides=["policy.actor_hidden_dims=[32, 16]", *overrides])
    keys = jax.random.split(jax.random.PRNGKey(seed), 4)
    params = make_policy_model(ACT, cfg.policy).init(keys[0], SHAPES)
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
    params = make_policy_model(ACT, cfg.policy).init(jax.random.PRNGKey(seed + 1), SHAPES)
    params = jax.tree.map(lambda x: 3.0 * x, params)
    return cfg, params, normalizers, obs


def session(model: onnx.ModelProto) -> ort.InferenceSession:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def run_onnx(model: onnx.ModelProto, obs: np.ndarray) -> np.ndarray:
    return session(model).run(["actions"], {"obs": obs})[0]


@pytest.mark.parametrize("clip", ["1.0", "null"])
@pytest.mark.parametrize("activation", sorted(ACTIVATIONS))
def test_onnx_matches_the_jax_policy(activation, clip):
    overrides = (f"policy.activation={activation}", f"env.clip_actions={clip}")
    cfg, params, normalizers, obs = random_policy(*overrides)
    expected = np.asarray(get_inference_policy(cfg, params, normalizers)(obs))  # eager: no compile per case
    model = onnx_policy_model(cfg, get_acting_policy(cfg, params, normalizers))
    np.testing.assert_allclose(run_onnx(model, obs), expected, atol=1e-5, rtol=0)


def test_onnx_model_interface_and_normaliser_switch():
    cfg, params, normalizers, obs = random_policy("runner.empirical_normalization=false")
    model = onnx_policy_model(cfg, get_acting_policy(cfg, params, normalizers))
    assert model.opset_import[0].version == ONNX_OPSET and model.ir_version == ONNX_IR_VERSION
    assert [i.name for i in model.graph.input] == ["obs"]
    assert [o.name for o in model.graph.output] == ["actions"]
    dims = model.graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_param == "batch" and dims[1].dim_value == OBS
    dims = model.graph.output[0].type.tensor_type.shape.dim
    assert dims[0].dim_param == "batch" and dims[1].dim_value == ACT
    expected = np.asarray(get_inference_policy(cfg, params, normalizers)(obs))
    np.testing.assert_allclose(run_onnx(model, obs[:1]), expected[:1], atol=1e-5, rtol=0)


def test_onnx_graph_holds_only_what_the_action_needs():
    """Constants are folded (the normaliser's std, no transposes) and the unused std is left out."""
    cfg, params, normalizers, _ = random_policy("policy.activation=tanh", "env.clip_actions=null")
    model = onnx_policy_model(cfg, get_acting_policy(cfg, params, normalizers))
    assert sorted(n.op_type for n in model.graph.node) == sorted(
        ["Sub", "Div"] + ["MatMul", "Add"] * 3 + ["Tanh"] * 2 + ["Identity"]
    )
    weights = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(params["params"]["actor"]))
    held = sum(int(np.prod(t.dims)) for t in model.graph.initializer)
    assert held == weights + 2 * OBS  # the actor's layers, the normaliser's mean and std


def test_onnx_refuses_what_it_cannot_express(monkeypatch):
    cfg, params, normalizers, _ = random_policy()
    monkeypatch.setitem(ACTIVATIONS, "sorted", lambda x: jnp.sort(x, axis=-1))
    sorting = dataclasses.replace(cfg, policy=dataclasses.replace(cfg.policy, activation="sorted"))
    with pytest.raises(ExportError, match="primitive 'sort' has no ONNX translation"):
        onnx_policy_model(sorting, get_acting_policy(sorting, params, normalizers))
    batch = [TensorSpec("x", ("batch", 2))]
    with pytest.raises(ExportError, match="symbolic size"):
        function_to_onnx(lambda x: (jnp.zeros(2 * x.shape[0]),), batch, ["y"], **GRAPH)


def array_code(x: jax.Array, h: jax.Array) -> tuple[jax.Array, ...]:
    """Most translated primitives, on a symbolic batch: x [batch, 4], h [2, batch, 3]."""
    w = jnp.arange(12.0).reshape(4, 3) / 10.0
    y = jnp.einsum("bi,ij->bj", x, w) + h[-1] * h[0, :, :]
    z = jnp.concatenate([y, jnp.expand_dims(jnp.max(x, axis=-1), -1), x[:, 1:3]], axis=-1)
    z = jnp.where(z > 0.5, jnp.clip(z, -1.0, 2.0), jnp.square(z) ** 1.5 + jax.lax.rsqrt(1.0 + z * z))
    pairs = jnp.einsum("bi,bj->bij", x[:, :2], x[:, 2:])  # a batched contraction: Einsum
    whole = jnp.stack([z, z * 2]).reshape(2, -1, 3, 2).transpose(1, 0, 3, 2)
    counts = (x > 0).astype(jnp.int32).sum(-1) + jnp.argmax(x, axis=-1) % 3
    tail = jnp.split(jax.nn.softplus(x), 2, axis=-1)[1] ** -2 + jax.nn.gelu(x[:, :2], approximate=False)
    return z.min(-1), pairs, whole, counts, tail, jnp.log1p(jnp.abs(x)) - jnp.expm1(-jnp.abs(x))


def test_onnx_graph_translates_general_array_code():
    """The translator on code beyond the policies: same numbers as JAX at any batch size."""
    inputs = [TensorSpec("x", ("batch", 4)), TensorSpec("h", (2, "batch", 3))]
    names = ["a", "b", "c", "d", "e", "f"]
    model = function_to_onnx(array_code, inputs, names, **GRAPH)
    assert [o.type.tensor_type.shape.dim[0].dim_param for o in model.graph.output] == ["batch"] * 6
    run = session(model)
    key_x, key_h = jax.random.split(jax.random.PRNGKey(5))
    for batch in (1, 5):
        x = np.asarray(jax.random.normal(key_x, (batch, 4)), np.float32)
        h = np.asarray(jax.random.normal(key_h, (2, batch, 3)), np.float32)
        for got, want in zip(run.run(names, {"x": x, "h": h}), array_code(x, h), strict=True):
            assert got.shape == want.shape and got.dtype == want.dtype
            np.testing.assert_allclose(got, np.asarray(want), atol=1e-5, rtol=1e-5)


RECURRENT_CASES = [(rnn_type, layers) for rnn_type in ("gru", "lstm") for layers in (1, 2)]


@pytest.fixture(scope="module", params=RECURRENT_CASES, ids=[f"{t}-{n}" for t, n in RECURRENT_CASES])
def recurrent_onnx(request):
    """A random recurrent policy, its ONNX model and an onnxruntime session (built once per case)."""
    rnn_type, layers = request.param
    cfg, params, normalizers, obs = random_recurrent_policy(rnn_type, layers)
    model = onnx_policy_model(cfg, get_acting_policy(cfg, params, normalizers))
    return cfg, params, normalizers, obs, model, session(model)


def test_onnx_recurrent_interface(recurrent_onnx):
    cfg, _, _, _, model, _ = recurrent_onnx
    lstm = cfg.policy.rnn_type == "lstm"
    assert [i.name for i in model.graph.input] == ["obs", "h_in"] + (["c_in"] if lstm else [])
    assert [o.name for o in model.graph.output] == ["actions", "h_out"] + (["c_out"] if lstm else [])
    dims = [(d.dim_value, d.dim_param) for d in model.graph.input[1].type.tensor_type.shape.dim]
    assert dims == [(cfg.policy.rnn_num_layers, ""), (0, "batch"), (6, "")]


def test_onnx_recurrent_policy_matches_the_jax_policy_over_steps(recurrent_onnx):
    cfg, params, normalizers, obs, _, onnx_session = recurrent_onnx
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
        a_onnx, *h_onnx = onnx_session.run(out_names, {"obs": o, **dict(zip(in_names, h_onnx, strict=True))})
        np.testing.assert_allclose(a_onnx, np.asarray(a_jax), atol=1e-5, rtol=0)
        for got, want in zip(h_onnx, jax.tree.leaves(h_jax), strict=True):
            np.testing.assert_allclose(got, np.asarray(want), atol=1e-5, rtol=0)
    assert all(float(np.abs(h).max()) > 0.1 for h in h_onnx)
    assert 0 < float(np.abs(a_onnx).max()) <= 1.0


def test_jax_export_artifact_reproduces_the_policy():
    cfg, params, normalizers, obs = random_policy("policy.activation=tanh")
    policy = get_inference_policy(cfg, params, normalizers)
    exported = load_jax_policy(export_jax_policy(get_acting_policy(cfg, params, normalizers)))
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
    params = make_policy_model(ACT, cfg.policy).init(jax.random.PRNGKey(0), SHAPES)
    _, _, normalizers, obs = random_policy()
    acting = get_acting_policy(cfg, params, normalizers)
    with pytest.raises(ValueError, match="get_acting_policy"):
        get_inference_policy(cfg, params, normalizers)
    exported = load_jax_policy(export_jax_policy(acting))
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
