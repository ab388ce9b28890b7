"""`policy.distribution: tanh_gaussian`: brax's NormalTanhDistribution as a policy option.

Parity with brax 0.14.2 on identical inputs, the network's std head and its initial std, the
config refusals, a population trace, and one short pendulum run that learns, resumes exactly and
exports to ONNX as tanh(mean).
"""

from __future__ import annotations

import math
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from brax.training.distribution import NormalTanhDistribution
from learning_runs import tanh_config, tanh_gaussian_run, tanh_returns
from tiny_config import tiny

from strl_jax.checkpoints.orbax_checkpoints import CHECKPOINT_DIR
from strl_jax.configs.loader import resolve_config
from strl_jax.errors import ConfigError
from strl_jax.export import load_jax_policy
from strl_jax.export import main as export_main
from strl_jax.inference import get_inference_policy, load_policy
from strl_jax.networks.acting import action_size
from strl_jax.networks.actor_critic import ActorCritic
from strl_jax.networks.gaussian import ActionDistribution, gaussian_kl, tanh_std
from strl_jax.networks.policy import make_policy_model
from strl_jax.runners.population import member_configs
from strl_jax.runners.runner import build_programs, run_keys, train

ACT, OBS = 3, 5
SHAPES = {"policy": (OBS,), "critic": (OBS,)}
TANH = "policy.distribution=tanh_gaussian"
DIST = ActionDistribution("tanh_gaussian")


def brax_logits(seed: int = 0) -> jax.Array:
    """Actor outputs `[mean, std pre-activation]` spread over tanh's saturation."""
    return 2.0 * jax.random.normal(jax.random.PRNGKey(seed), (64, 2 * ACT))


def test_matches_brax_normal_tanh_distribution():
    logits = brax_logits()
    brax = NormalTanhDistribution(event_size=ACT)
    mean, pre_std = jnp.split(logits, 2, axis=-1)
    std = tanh_std(pre_std)
    np.testing.assert_allclose(std, brax.create_dist(logits).scale, rtol=1e-6)
    sample_key, entropy_key = jax.random.split(jax.random.PRNGKey(1))
    raw = brax.sample_no_postprocessing(logits, sample_key)
    np.testing.assert_array_equal(DIST.sample(sample_key, mean, std), raw)
    np.testing.assert_array_equal(DIST.postprocess(raw), brax.postprocess(raw))
    np.testing.assert_allclose(
        DIST.log_prob(raw, mean, std), brax.log_prob(logits, raw), rtol=1e-5, atol=1e-5
    )
    np.testing.assert_allclose(
        DIST.entropy(mean, std, entropy_key), brax.entropy(logits, entropy_key), rtol=1e-5, atol=1e-5
    )
    np.testing.assert_array_equal(DIST.mode(mean), brax.mode(logits))
    old = brax.create_dist(brax_logits(2))
    np.testing.assert_allclose(
        DIST.kl(old.loc, old.scale, mean, std), brax.create_dist(logits).kl_divergence(old), rtol=1e-5
    )
    # the plain Gaussian is unchanged: no squashing, analytic entropy, samples are actions
    gaussian = ActionDistribution("gaussian")
    assert not gaussian.squashed and gaussian.postprocess(raw) is raw
    np.testing.assert_allclose(
        gaussian.kl(old.loc, old.scale, mean, std), gaussian_kl(old.loc, old.scale, mean, std)
    )


def tanh_model(*overrides: str):
    cfg = resolve_config("inverted_pendulum", overrides=[TANH, "policy.actor_hidden_dims=[16]", *overrides])
    model = make_policy_model(ACT, cfg.policy)
    return model, model.init(jax.random.PRNGKey(0), SHAPES)


@pytest.mark.parametrize("init_std", [1.0, 0.3, math.log(2.0) + 0.001])
def test_network_outputs_brax_parameters_and_starts_at_init_noise_std(init_std):
    model, params = tanh_model(f"policy.init_noise_std={init_std}")
    assert "std" not in params["params"] and action_size(params) == ACT
    obs = {"policy": jax.random.normal(jax.random.PRNGKey(1), (7, OBS))}
    mean, std, _ = model.distribution(params, obs, {})
    logits = model.module.apply(params, obs["policy"], method=lambda m, x: m.actor(x))
    brax = NormalTanhDistribution(event_size=ACT).create_dist(logits)
    np.testing.assert_array_equal(mean, brax.loc)
    np.testing.assert_allclose(std, brax.scale, rtol=1e-6)
    # a zero input reaches the output layer as zeros (elu(0) = 0): the std is the bias's
    zero_mean, zero_std, _ = model.distribution(params, {"policy": jnp.zeros((1, OBS))}, {})
    np.testing.assert_allclose(zero_std, jnp.full((1, ACT), init_std), rtol=1e-5)
    np.testing.assert_array_equal(zero_mean, jnp.zeros((1, ACT)))
    if init_std == math.log(2.0) + 0.001:  # brax's initial std: the pre-activation's bias is 0
        np.testing.assert_allclose(params["params"]["actor"]["output"]["bias"], 0.0, atol=1e-6)
    assert isinstance(model.module, ActorCritic) and model.action_dist == DIST


def test_recurrent_policy_shares_the_head():
    model, params = tanh_model("policy.class_name=ActorCriticRecurrent", "policy.rnn_hidden_size=8")
    assert model.recurrent and action_size(params) == ACT
    mean, std, _ = model.distribution(params, {"policy": jnp.ones((2, OBS))}, model.initial_hidden(2))
    assert mean.shape == std.shape == (2, ACT) and bool(jnp.all(std > 0.001))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["policy.distribution=beta"],
            r"unknown policy.distribution 'beta'; valid choices: \['gaussian', 'tanh",
        ),
        (
            [TANH, "algorithm.class_name=TPPO", "algorithm.teacher_policy.checkpoint=x"],
            "algorithm.class_name=TPPO",
        ),
        (
            [TANH, "algorithm.class_name=Distillation", "algorithm.teacher_policy.checkpoint=x"],
            "Distillation",
        ),
        ([TANH, "algorithm.symmetry_cfg={use_data_augmentation: true}"], "algorithm.symmetry_cfg"),
        ([TANH, "algorithm.class_name=APPO"], "algorithm.class_name=APPO"),
        ([TANH, "policy.noise_std_type=log"], "policy.noise_std_type=log"),
        ([TANH, "algorithm.clip_min_std=0.1"], "algorithm.clip_min_std"),
        ([TANH, "policy.init_noise_std=0.001"], r"policy.init_noise_std must exceed 0.001"),
    ],
)
def test_combinations_that_cannot_work_are_refused(overrides, message):
    with pytest.raises(ConfigError, match=message):
        resolve_config("inverted_pendulum", overrides=overrides)


def test_population_with_swept_init_std_starts_each_member_at_its_std():
    """Members built inside the vmap, the initial std traced into the std head's bias: each
    member's initial std is its own swept value (2 seeds x 2 values, seeds varying fastest)."""
    cfg = resolve_config(
        "inverted_pendulum",
        overrides=tiny(TANH, "runner.num_seeds=2", "sweep.policy.init_noise_std=[0.5, 1.0]"),
    )
    programs = build_programs(cfg)
    members = member_configs(cfg)
    assert [m.policy.init_noise_std for m in members] == [0.5, 0.5, 1.0, 1.0]
    train_state, _ = programs.init(jnp.stack([run_keys(m)[0] for m in members]))
    bias = np.asarray(train_state.params["params"]["actor"]["output"]["bias"])  # [members, mean | std]
    np.testing.assert_allclose(tanh_std(bias[:, 1]), [0.5, 0.5, 1.0, 1.0], rtol=1e-6)


# One short run of the 200-step pendulum (tests/learning_runs.py): learns, resumes exactly, exports
# as tanh(mean).
@pytest.fixture(scope="module")
def learned(tmp_path_factory):
    return tanh_gaussian_run(tmp_path_factory.mktemp("tanh"))


def test_inverted_pendulum_learns(learned):
    """The sampled policy's training return: 12-14 when first logged (a random policy), best over 60
    iterations far above it (deterministic evaluations are a poor signal here: the untrained mean
    action already balances 40-115 steps of 200)."""
    returns = tanh_returns(learned)
    # BENCHMARKS.md, Learning spread: tanh: best 94.6 / 200 / 200 over 12 runs (seeds 1-8 flag on,
    # 1-4 flag off; first return 12.1-13.6, so the threshold is 70): margin 24.6 to the worst seed.
    assert max(returns) >= max(70.0, 3.0 * returns[0]), returns


def test_resume_continues_exactly(learned, tmp_path):
    """From the checkpoint at iteration 40 to 60: the same parameters, optimiser and normalisers."""
    run = tmp_path / "run"
    shutil.copytree(learned.log_dir, run)
    shutil.rmtree(run / CHECKPOINT_DIR / "60")
    resumed = train(tanh_config(), run, verbose=False, resume=True)
    assert [r["iteration"] for r in resumed.rows] == list(range(41, 61))
    jax.tree.map(np.testing.assert_array_equal, resumed.train_state, learned.train_state)


def test_export_writes_tanh_of_the_mean(learned, tmp_path):
    assert export_main([str(learned.log_dir), "--out", str(tmp_path)]) == 0
    loaded = load_policy(learned.log_dir)
    state = learned.train_state
    obs = np.asarray(2.0 * jax.random.normal(jax.random.PRNGKey(3), (16, 4)), np.float32)
    expected = np.asarray(get_inference_policy(loaded.cfg, state.params, state.normalizers)(obs))
    mean, _, _ = loaded.actor.distribution(state.params, state.normalizers, {"policy": obs}, {})
    np.testing.assert_allclose(expected, np.tanh(np.asarray(mean)), atol=1e-6)
    assert np.abs(expected).max() <= 1.0
    model = onnx.load(str(tmp_path / "policy.onnx"))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(session.run(["actions"], {"obs": obs})[0], expected, atol=1e-5)
    exported = load_jax_policy((tmp_path / "policy.jax_export").read_bytes())
    np.testing.assert_allclose(np.asarray(exported(obs)), expected, atol=1e-6)


def test_rsl_rl_export_is_refused(learned, tmp_path, capsys):
    assert export_main([str(learned.log_dir), "--out", str(tmp_path), "--format", "rsl_rl"]) == 2
    err = capsys.readouterr().err
    assert "policy.distribution is 'tanh_gaussian'" in err and "Traceback" not in err
