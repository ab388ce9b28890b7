"""`runner.normalizer_clip`: every normalised observation is bounded before a network reads it, in
training, acting and the exported ONNX policy alike, and what cannot carry the bound refuses it."""

from __future__ import annotations

import types

import jax
import jax.numpy as jnp
import numpy as np
import onnxruntime as ort
import pytest

from strl_jax.configs.loader import resolve_config
from strl_jax.errors import ConfigError, ExportError
from strl_jax.export import export_rsl_rl, onnx_policy_model
from strl_jax.inference import get_acting_policy, get_inference_policy
from strl_jax.networks.normalizer import InputNormalization, NormalizerState, input_normalization, normalize
from strl_jax.networks.policy import make_policy_model

STATS = NormalizerState(
    mean=jnp.array([1.0, -1.0, 0.0]), var=jnp.array([0.0009, 1.0, 4.0]), count=jnp.float32(9.0)
)


def test_the_clip_bounds_each_normalised_value_and_leaves_the_rest():
    # an upright robot's gravity component: std 0.03 (+ rsl_rl's eps 0.01), read at a tilt
    obs = jnp.array([[0.7, 2.0, 1.0], [1.01, -1.5, -30.0]])
    plain = normalize(STATS, obs)
    assert float(plain[0, 0]) == pytest.approx(-7.5, rel=1e-5) and float(plain[1, 2]) == pytest.approx(
        -14.93, rel=1e-3
    )
    clipped = InputNormalization(clip=5.0)
    expected = np.clip(np.asarray(plain), -5.0, 5.0)
    groups = clipped.groups({"policy": STATS}, {"policy": obs, "raw": obs})
    np.testing.assert_array_equal(groups["policy"], expected)
    np.testing.assert_array_equal(groups["raw"], obs)  # a group without statistics passes through
    np.testing.assert_array_equal(clipped.group({"policy": STATS}, obs, "policy"), expected)
    np.testing.assert_array_equal(InputNormalization().group({"policy": STATS}, obs, "policy"), plain)
    assert InputNormalization(enabled=False, clip=5.0).group({"policy": STATS}, obs, "policy") is obs


def test_the_runner_setting_reaches_the_acting_policy_and_its_onnx_graph():
    cfg = resolve_config("inverted_pendulum", overrides=["runner.normalizer_clip=2.0"])
    assert input_normalization(cfg.runner).clip == 2.0
    assert resolve_config("inverted_pendulum").runner.normalizer_clip is None  # rsl_rl's default
    size = 4
    shapes = {"policy": (size,), "critic": (size,)}
    params = make_policy_model(1, cfg.policy).init(jax.random.PRNGKey(0), shapes)
    stats = NormalizerState(mean=jnp.zeros(size), var=jnp.full(size, 0.25), count=jnp.float32(10.0))
    normalizers = {"policy": stats, "critic": stats}
    act = get_inference_policy(cfg, params, normalizers)
    # std 0.5 + 0.01: 1.02 reads as 2.0 and anything beyond reads the same
    at_bound = np.full((1, size), 0.51 * 2.0, np.float32)
    far = np.full((1, size), 40.0, np.float32)
    np.testing.assert_allclose(act(far), act(at_bound), atol=1e-6)
    unclipped = resolve_config("inverted_pendulum")
    assert not np.allclose(get_inference_policy(unclipped, params, normalizers)(far), act(far), atol=1e-3)
    model = onnx_policy_model(cfg, get_acting_policy(cfg, params, normalizers))
    obs = np.random.default_rng(1).normal(0.0, 3.0, (32, size)).astype(np.float32)
    onnx_actions = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        ["actions"], {"obs": obs}
    )[0]
    np.testing.assert_allclose(onnx_actions, np.asarray(act(obs)), atol=1e-5, rtol=0)


@pytest.mark.parametrize("value", ["0", "-1.0", "nan", "inf"])
def test_a_clip_that_is_not_a_positive_number_is_refused(value):
    with pytest.raises(
        ConfigError, match=r"runner.normalizer_clip must be a positive number \(null: unclipped"
    ):
        resolve_config("inverted_pendulum", overrides=[f"runner.normalizer_clip={value}"])


def test_a_clip_without_the_normaliser_is_refused():
    # the legged recipe clips; turning its normaliser off alone would leave a clip that does nothing
    with pytest.raises(
        ConfigError,
        match=r"runner.normalizer_clip=3 clips normalised observations, but "
        r"runner.empirical_normalization is false: set runner.normalizer_clip=null",
    ):
        resolve_config(
            "inverted_pendulum",
            overrides=["runner.normalizer_clip=3.0", "runner.empirical_normalization=false"],
        )


def test_rsl_rl_export_refuses_a_clipped_run(tmp_path):
    cfg = resolve_config("inverted_pendulum", overrides=["runner.normalizer_clip=5"])
    with pytest.raises(
        ExportError, match=r"EmpiricalNormalization, which does not clip.*normalizer_clip=5\)"
    ):
        export_rsl_rl(types.SimpleNamespace(cfg=cfg), tmp_path)
    assert not any(tmp_path.iterdir())
