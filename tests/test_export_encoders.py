"""Export of encoder policies: the ONNX graph (Conv, MaxPool, ...) and the jax.export artifact compute
what the JAX acting step computes, and the ONNX model documents the components of its flat `obs`."""

from __future__ import annotations

import dataclasses
import json
import types

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import onnxruntime as ort
import pytest

from strl_jax.configs.loader import resolve_config
from strl_jax.configs.schema import PolicyConfig
from strl_jax.errors import ExportError
from strl_jax.export import (
    ONNX_IR_VERSION,
    ONNX_OPSET,
    ObsLayout,
    export_jax_policy,
    export_run,
    load_jax_policy,
    onnx_policy_model,
)
from strl_jax.export import main as export_main
from strl_jax.inference import LoadedPolicy
from strl_jax.networks.acting import acting_policy, make_actor
from strl_jax.networks.conv2d import NONLINEARITIES, Conv2dHeadModel
from strl_jax.networks.normalizer import NormalizerState
from strl_jax.networks.policy import make_policy_model
from strl_jax.onnx_graph import TensorSpec, function_to_onnx

TOL = {"atol": 1e-5, "rtol": 1e-5}
GRAPH = {"opset": ONNX_OPSET, "ir_version": ONNX_IR_VERSION, "graph_name": "test"}
# proprioception around a 2x5x6 height image; the critic adds friction; an estimator may predict lin_vel
POLICY = (("base", 5), ("lin_vel", 3), ("heights", 60), ("command", 3), ("feet", 4))
CRITIC = (("friction", 2), *POLICY)
COMPONENTS = {"policy": POLICY, "critic": CRITIC}
SHAPES = {"heights": (2, 5, 6)}
OBS = sum(size for _, size in POLICY)
# padded stride-1 convs, a max pool after the first, asymmetric padding on the second: 5x6 -> 2x3 -> 1x4
CONV = {
    "channels": [3, 4],
    "kernel_sizes": [3, 2],
    "strides": [2, 1],
    "paddings": [1, [0, 1]],
    "use_maxpool": True,
    "hidden_sizes": [6],
    "nonlinearity": "LeakyReLU",
}
VISUAL = {
    "channels": [2, 3],
    "kernel_sizes": [3, 2],
    "strides": [2, 1],
    "paddings": [1, 0],
    "hidden_sizes": [5],
}
ENCODER = dict(
    class_name="EncoderActorCritic",
    actor_hidden_dims=(16, 8),
    critic_hidden_dims=(12,),
    encoder_component_names=("feet", "heights"),
    encoder_class_name=("MlpModel", "Conv2dHeadModel"),
    encoder_kwargs=({"hidden_sizes": [5], "nonlinearity": "ELU"}, CONV),
    encoder_output_size=4,
    critic_encoder_component_names="shared",
)
CASES = {
    "encoder": PolicyConfig(**ENCODER),
    "visual_gru": PolicyConfig(
        class_name="VisualDeterministicRecurrent",
        actor_hidden_dims=(8,),
        critic_hidden_dims=(8,),
        rnn_type="gru",
        rnn_hidden_size=6,
        visual_component_name="heights",
        visual_kwargs=VISUAL,
        visual_latent_size=3,
    ),
    "visual_lstm": PolicyConfig(
        class_name="VisualDeterministicRecurrent",
        actor_hidden_dims=(8,),
        critic_hidden_dims=(8,),
        rnn_type="lstm",
        rnn_num_layers=2,
        rnn_hidden_size=6,
        visual_component_name="heights",
        visual_kwargs={**VISUAL, "nonlinearity": "ELU"},
        visual_latent_size=3,
    ),
    # the estimator replaces lin_vel, so the deployed obs lacks it
    "estimator": PolicyConfig(
        **ENCODER
        | dict(
            class_name="EncoderStateAc",
            estimator_obs_components=("base", "feet"),
            estimator_target_components=("lin_vel",),
            estimator_kwargs={"hidden_sizes": [8]},
            replace_state_prob=1.0,
        )
    ),
}


def random_params(module_init, seed: int):
    """Normal random params of `module_init(key)`'s shapes, drawn by numpy (no XLA compile)."""
    rng = np.random.default_rng(seed)
    shapes = jax.eval_shape(module_init, jax.random.PRNGKey(0))
    return jax.tree.map(lambda s: (0.4 * rng.standard_normal(s.shape)).astype(s.dtype), shapes)


def random_policy(case: str, seed: int = 0):
    """`(cfg, params, normalizers)` of a case: random params and normaliser statistics."""
    base = resolve_config("inverted_pendulum", overrides=["env.clip_actions=4.0"])
    cfg = dataclasses.replace(base, policy=CASES[case])
    model = make_policy_model(2, cfg.policy, COMPONENTS, SHAPES)
    params = random_params(lambda key: model.init(key, {"policy": (OBS,), "critic": (OBS + 2,)}), seed)
    rng = np.random.default_rng(seed + 1)
    stats = lambda n: NormalizerState(  # noqa: E731
        mean=jnp.asarray(rng.standard_normal(n), jnp.float32),
        var=jnp.asarray(np.exp(rng.standard_normal(n)), jnp.float32),
        count=jnp.float32(100.0),
    )
    return cfg, params, {"policy": stats(OBS), "critic": stats(OBS + 2)}  # estimates: critic units


def acting_of(cfg, params, normalizers):
    model = make_policy_model(2, cfg.policy, COMPONENTS, SHAPES)
    return acting_policy(make_actor(model, cfg), params, normalizers)


def observations(batch: int, size: int, seed: int) -> np.ndarray:
    return 2.0 * np.random.default_rng(seed).standard_normal((batch, size)).astype(np.float32)


def session(model: onnx.ModelProto) -> ort.InferenceSession:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


@pytest.fixture(scope="module", params=["encoder", "visual_gru", "visual_lstm"])
def policy(request):
    """A case's config, acting policy and jitted step (one compile at batch 5 for every test)."""
    cfg, params, normalizers = random_policy(request.param)
    acting = acting_of(cfg, params, normalizers)
    return request.param, cfg, acting, jax.jit(acting.step)


def test_onnx_encoder_policy_matches_the_jax_policy(policy):
    """Batch 5 against the JAX step, batch 1 against its first row (rows never mix)."""
    case, cfg, acting, step = policy
    model = onnx_policy_model(cfg, acting)
    ops = {n.op_type for n in model.graph.node}
    assert "Conv" in ops and ("MaxPool" in ops) == (case == "encoder")
    outputs = [o.name for o in model.graph.output]
    inputs = [i.name for i in model.graph.input][1:]
    run = session(model)
    hidden = acting.initial_hidden(5)
    for t in range(3 if acting.recurrent else 1):
        obs = observations(5, OBS, seed=t)
        leaves = [np.asarray(h) for h in jax.tree.leaves(hidden)]
        actions, hidden = step(obs, hidden)
        want = [np.asarray(x) for x in (actions, *jax.tree.leaves(hidden))]
        for batch in (5, 1):
            feed = dict(zip(inputs, (h[:, :batch] for h in leaves), strict=True))
            got = run.run(outputs, {"obs": obs[:batch], **feed})
            cut = [want[0][:batch]] + [h[:, :batch] for h in want[1:]]
            for g, w in zip(got, cut, strict=True):
                assert g.shape == w.shape
                np.testing.assert_allclose(g, w, **TOL)
    assert float(np.std(want[0])) > 1e-3


def test_jax_export_of_an_encoder_policy(policy):
    _, _, acting, step = policy
    exported = load_jax_policy(export_jax_policy(acting, platforms=("cpu",)))
    obs, hidden = observations(5, OBS, seed=7), acting.initial_hidden(5)
    want = step(obs, hidden)
    got = exported(obs, hidden) if acting.recurrent else (exported(obs), hidden)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), **TOL)
    first = (
        exported(obs[:1], jax.tree.map(lambda h: h[:, :1], hidden)) if acting.recurrent else exported(obs[:1])
    )
    np.testing.assert_allclose(np.asarray(jax.tree.leaves(first)[0]), np.asarray(want[0])[:1], **TOL)


def test_onnx_documents_the_deployed_obs_layout(tmp_path, monkeypatch, capsys):
    """The estimator's target leaves the input; the layout in the metadata is what `obs` holds."""
    cfg, params, normalizers = random_policy("estimator")
    env = types.SimpleNamespace(components=COMPONENTS, component_shapes=SHAPES)
    loaded = LoadedPolicy(cfg=cfg, params=params, normalizers=normalizers, step=7, env=env)
    monkeypatch.setattr("strl_jax.export.load_policy", lambda *args: loaded)
    assert export_main(["run", "--out", str(tmp_path)]) == 0
    summary = capsys.readouterr().out
    deployed = "base[0:5], heights[5:65] [2, 5, 6], command[65:68], feet[68:72]"
    assert f"obs [batch, 72] -> actions [batch, 2], estimator [batch, 3]; obs = {deployed}" in summary
    model = onnx.load(str(tmp_path / "policy.onnx"))
    meta = {p.key: p.value for p in model.metadata_props}
    assert json.loads(meta["obs_components"]) == [["base", 5], ["heights", 60], ["command", 3], ["feet", 4]]
    assert json.loads(meta["image_shapes"]) == {"heights": [2, 5, 6]}
    assert deployed in model.doc_string
    acting = loaded.acting()
    obs = observations(5, 72, seed=3)
    actions, estimates, _ = jax.jit(acting.outputs)(obs, {})
    got = session(model).run(["actions", "estimator"], {"obs": obs})
    np.testing.assert_allclose(got[0], np.asarray(actions), **TOL)
    np.testing.assert_allclose(got[1], np.asarray(estimates["estimator"]), **TOL)
    assert export_run(loaded, tmp_path / "again", onnx_model=False) == [
        tmp_path / "again" / "policy.jax_export"
    ]
    with pytest.raises(ExportError, match="holds 75 values, the policy reads 72"):
        onnx_policy_model(cfg, acting, ObsLayout(POLICY, SHAPES))


def conv_code(x: jax.Array) -> tuple[jax.Array, ...]:
    """Convolutions and pools beyond the encoders': x [batch, 7, 6, 4] (NHWC)."""
    w = jnp.linspace(-1.0, 1.0, 3 * 2 * 2 * 4).reshape(3, 2, 2, 4)  # HWIO, 2 groups of 2 channels
    nhwc = jax.lax.conv_general_dilated(
        x,
        w,
        window_strides=(2, 1),
        padding=((1, 2), (0, 1)),
        rhs_dilation=(1, 2),
        dimension_numbers=("NHWC", "HWIO", "NHWC"),
        feature_group_count=2,
    )
    nchw = jnp.transpose(x, (0, 3, 1, 2))
    pooled = jax.lax.reduce_window(
        nchw, -jnp.inf, jax.lax.max, (1, 1, 3, 2), (1, 1, 2, 2), ((0, 0), (0, 0), (1, 1), (0, 1))
    )
    smallest = jax.lax.reduce_window(nchw, jnp.inf, jax.lax.min, (1, 1, 2, 2), (1, 1, 1, 2), "VALID")
    return nhwc, pooled, smallest


def test_onnx_translates_general_convolutions_and_pools():
    names = ["nhwc", "pooled", "smallest"]
    model = function_to_onnx(conv_code, [TensorSpec("x", ("batch", 7, 6, 4))], names, **GRAPH)
    run = session(model)
    for batch in (1, 3):
        x = observations(batch, 7 * 6 * 4, seed=batch).reshape(batch, 7, 6, 4)
        for got, want in zip(run.run(names, {"x": x}), conv_code(x), strict=True):
            assert got.shape == want.shape
            np.testing.assert_allclose(got, np.asarray(want), **TOL)


def test_onnx_conv_encoder_nonlinearities():
    """Every nonlinearity a conv encoder takes, in one graph: [batch, 20] -> one output each."""
    nets = {
        name: Conv2dHeadModel((1, 4, 5), [2], [2], [1], [3], paddings=[1], nonlinearity=name, flat_input=True)
        for name in NONLINEARITIES
    }
    params = {
        name: random_params(lambda k, n=net: n.init(k, jnp.zeros((1, 20))), 1) for name, net in nets.items()
    }

    def fn(x: jax.Array) -> tuple[jax.Array, ...]:
        return tuple(net.apply(params[name], 3.0 * x) for name, net in nets.items())

    model = function_to_onnx(fn, [TensorSpec("x", ("batch", 20))], list(nets), **GRAPH)
    x = observations(4, 20, seed=2)
    for name, got, want in zip(nets, session(model).run(list(nets), {"x": x}), jax.jit(fn)(x), strict=True):
        np.testing.assert_allclose(got, np.asarray(want), err_msg=name, **TOL)


def transposed_conv(x: jax.Array) -> tuple[jax.Array]:
    return (
        jax.lax.conv_general_dilated(
            x, jnp.ones((1, 1, 2, 2)), (1, 1), ((1, 1), (1, 1)), lhs_dilation=(2, 2)
        ),
    )


def batch_pool(x: jax.Array) -> tuple[jax.Array]:
    return (jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (2, 1, 1, 1), (1, 1, 1, 1), "VALID"),)


def test_onnx_refuses_what_it_cannot_express():
    spec = [TensorSpec("x", ("batch", 1, 5, 5))]
    with pytest.raises(ExportError, match=r"lhs_dilation \(a transposed convolution\)"):
        function_to_onnx(transposed_conv, spec, ["y"], **GRAPH)
    with pytest.raises(ExportError, match="reduce_window_max over the first two axes"):
        function_to_onnx(batch_pool, spec, ["y"], **GRAPH)
    with pytest.raises(ExportError, match="primitive 'sort' has no ONNX translation"):
        function_to_onnx(lambda x: (jnp.sort(x, axis=-1),), spec, ["y"], **GRAPH)
