"""EstimatorPPO and EstimatorTPPO end to end on the pendulum whose velocities the actor never
measures: the estimate improves, logs and checkpoints hold it, a resumed run is exact, and the
exported policy takes the positions only and returns the estimate beside the action."""

from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import onnxruntime as ort
import pytest
from learning_runs import ESTIMATOR_K, estimator_config, estimator_errors, estimator_run_config

from strl_jax.agents.ppo import POLICY
from strl_jax.checkpoints.orbax_checkpoints import (
    CHECKPOINT_DIR,
    open_manager,
    restore_checkpoint,
    save_checkpoint,
)
from strl_jax.configs import ConfigError
from strl_jax.configs.loader import config_to_dict, resolve_config
from strl_jax.envs import make_env_from_config
from strl_jax.export import load_jax_policy
from strl_jax.export import main as export_main
from strl_jax.inference import load_policy
from strl_jax.networks.normalizer import init_normalizer, normalize
from strl_jax.networks.policy import make_policy_model
from strl_jax.play import main as play_main
from strl_jax.runners.learner_builder import make_learner
from strl_jax.runners.runner import train
from strl_jax.static_take import take_static
from strl_jax.train import main as train_main
from strl_jax.train_loops import update_rules

K = ESTIMATOR_K


def rows(log_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (Path(log_dir) / "metrics.jsonl").read_text().splitlines()]


def timeless(rs: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in {"wall_time", "fps", "iteration_time"}} for r in rs]


@pytest.fixture(scope="module")
def estimator_run(tmp_path_factory):
    """EstimatorPPO, 2K iterations straight."""
    path = tmp_path_factory.mktemp("estimator_run")
    return train(estimator_run_config(), path, verbose=False)


def test_estimator_is_trained_and_logged(estimator_run):
    rs = estimator_run.rows
    assert {"estimator", "estimator_rmse_velocity", "surrogate", "value_function"} <= set(rs[0])
    # BENCHMARKS.md, Learning spread: estimator: trained / initial error 0.052 / 0.105 / 0.214 over
    # 4 seeds (compiled without XLA's optimisations, as this module is; 0.052-0.218 with them):
    # margin 0.18 to the worst.
    initial, trained = estimator_errors(estimator_run_config(), estimator_run)
    assert trained < 0.4 * initial
    params = estimator_run.train_state.params["params"]
    assert {"stage_estimator", "memory_a", "memory_c"} <= set(params)
    assert set(estimator_run.rollout_state.hidden) == {"actor", "critic", "estimator"}
    tb = list((estimator_run.log_dir).glob("events.out.tfevents*"))
    assert tb


def test_resume_is_exact(estimator_run, tmp_path):
    first = train(estimator_config(f"runner.max_iterations={K}"), tmp_path, verbose=False)
    assert first.checkpoint == K
    assert train_main(["--resume", str(tmp_path), "--quiet", f"runner.max_iterations={2 * K}"]) == 0
    assert timeless(rows(tmp_path)) == timeless(rows(estimator_run.log_dir))
    abstract = jax.eval_shape(
        lambda: {"train_state": estimator_run.train_state, "rollout_state": estimator_run.rollout_state}
    )
    manager = open_manager(tmp_path / "checkpoints", read_only=True)
    try:
        state, _, step = restore_checkpoint(manager, abstract, 2 * K)
    finally:
        manager.close()
    assert step == 2 * K
    expected = (estimator_run.train_state, estimator_run.rollout_state)
    for a, b in zip(
        jax.tree.leaves((state["train_state"], state["rollout_state"])),
        jax.tree.leaves(expected),
        strict=True,
    ):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_export_takes_positions_and_returns_the_estimate(estimator_run, tmp_path):
    out = tmp_path / "exported"
    assert export_main([str(estimator_run.log_dir), "--out", str(out)]) == 0
    loaded = load_policy(estimator_run.log_dir)
    acting = loaded.acting()
    assert acting.observation_size == 2 and acting.estimates == (("estimator", 2),)
    env = make_env_from_config(loaded.cfg.env, num_envs=5)
    _, obs = jax.jit(env.reset)(jax.random.PRNGKey(0))
    positions = np.asarray(obs["policy"][:, :2])
    hidden = acting.initial_hidden(5)
    actions, estimates, new_hidden = acting.outputs(jnp.asarray(positions), hidden)
    # the same as acting on the full observation (the velocities are never read)
    full, _ = loaded.actor.act(
        loaded.params,
        loaded.normalizers,
        {"policy": obs["policy"].at[:, 2:].multiply(7.0)},
        {"actor": hidden["actor"], "estimator": hidden["estimator"]},
    )
    np.testing.assert_allclose(np.asarray(actions), np.asarray(full), atol=1e-6)

    exported = load_jax_policy((out / "policy.jax_export").read_bytes())
    a, est, h = exported(positions, hidden)
    np.testing.assert_allclose(np.asarray(a), np.asarray(actions), atol=1e-5)
    np.testing.assert_allclose(np.asarray(est["estimator"]), np.asarray(estimates["estimator"]), atol=1e-5)

    # play acts as the robot would: with the estimate in place of the velocities
    assert (
        play_main(
            [str(estimator_run.log_dir), "--episodes", "2", "--no-video", "--out", str(tmp_path / "play")]
        )
        == 0
    )

    session = ort.InferenceSession(str(out / "policy.onnx"))
    names = [o.name for o in session.get_outputs()]
    assert names == ["actions", "estimator", "h_out", "estimator_h_out"]
    feeds = {
        "obs": positions,
        "h_in": np.asarray(hidden["actor"]),
        "estimator_h_in": np.asarray(hidden["estimator"]),
    }
    a_onnx, est_onnx, h_onnx, eh_onnx = session.run(None, feeds)
    np.testing.assert_allclose(a_onnx, np.asarray(actions), atol=1e-5)
    np.testing.assert_allclose(est_onnx, np.asarray(estimates["estimator"]), atol=1e-5)
    np.testing.assert_allclose(eh_onnx, np.asarray(new_hidden["estimator"]), atol=1e-5)


# ----------------------------------------------------------------------------- latent distillation
def write_named_teacher(path: Path) -> None:
    """A full-state teacher run whose observation groups name their components (no training)."""
    cfg = resolve_config(
        "inverted_pendulum_teacher",
        overrides=[
            "env.obs_groups.policy={position: [0, 1], velocity: [2, 3]}",
            "env.obs_groups.critic={position: [0, 1], velocity: [2, 3]}",
            "policy.actor_hidden_dims=[8]",
            "policy.critic_hidden_dims=[8]",
        ],
    )
    shapes = {"policy": (4,), "critic": (4,)}
    params = make_policy_model(1, cfg.policy).init(jax.random.PRNGKey(3), shapes)
    normalizers = jax.tree.map(lambda x: x + 0.5, {k: init_normalizer(s) for k, s in shapes.items()})
    manager = open_manager(path / CHECKPOINT_DIR)
    meta = {"window": {}, "wall_time": 0.0, "config": config_to_dict(cfg)}
    save_checkpoint(manager, 1, {"train_state": {"params": params, "normalizers": normalizers}}, meta)
    manager.wait_until_finished()
    manager.close()


def test_latent_distillation_regresses_the_estimate_onto_the_teachers_latent(tmp_path):
    """`distill_latent_obs_component_mapping: {estimator: velocity}`: the student's estimate is
    pulled towards the teacher's (normalised) velocity input, st_rl's `real` distance."""
    write_named_teacher(tmp_path / "teacher")
    cfg = estimator_config(
        "algorithm.class_name=EstimatorTPPO",
        f"algorithm.teacher_policy.checkpoint={tmp_path / 'teacher'}",
        "algorithm.distill_latent_obs_component_mapping={estimator: velocity}",
        "algorithm.distill_latent_coef=0.5",
    )
    learner = make_learner(make_env_from_config(cfg.env), cfg)
    teacher_part = learner.parts[0]
    (pair,) = teacher_part.latents
    assert pair[0].stage == "estimator" and pair[1].indices == (2, 3)
    ts, rs = jax.jit(learner.init)(jax.random.PRNGKey(0))
    _, tr, _ = jax.jit(learner.rollout)(ts, rs, jax.random.PRNGKey(1))
    state = ts.parts["teacher"]
    expected = normalize(state.normalizers["policy"], tr.obs["critic"])[..., 2:4]
    np.testing.assert_allclose(tr.parts["teacher"]["latent_labels"]["velocity"], expected, atol=1e-6)
    with pytest.raises(ConfigError, match="has no latent 'speed'"):
        make_learner(
            make_env_from_config(cfg.env),
            estimator_config(
                "algorithm.class_name=EstimatorTPPO",
                f"algorithm.teacher_policy.checkpoint={tmp_path / 'teacher'}",
                "algorithm.distill_latent_obs_component_mapping={estimator: speed}",
            ),
        )


def test_estimator_tppo_trains_with_a_teacher_and_resumes_exactly(tmp_path):
    """EstimatorTPPO with a teacher that acts half the time and a latent target: it logs the
    distillation, estimator and latent terms (the latent test above checks their labels), and a
    resumed run is exact."""
    write_named_teacher(tmp_path / "teacher")

    def cfg(iterations):
        return estimator_config(
            "algorithm.class_name=EstimatorTPPO",
            f"algorithm.teacher_policy.checkpoint={tmp_path / 'teacher'}",
            "algorithm.teacher_act_prob=0.5",
            "algorithm.distill_latent_obs_component_mapping={estimator: velocity}",
            f"runner.max_iterations={iterations}",
            "runner.eval_interval=2",
        )

    full = train(cfg(4), tmp_path / "full", verbose=False)
    train(cfg(2), tmp_path / "split", verbose=False)
    assert train_main(["--resume", str(tmp_path / "split"), "--quiet", "runner.max_iterations=4"]) == 0
    assert timeless(rows(tmp_path / "split")) == timeless(full.rows)
    logged = {"distillation", "distill_latent_estimator", "estimator", "estimator_rmse_velocity"}
    assert logged | {"teacher_act_fraction"} <= set(full.rows[-1])
    assert 0.0 < full.rows[-1]["teacher_act_fraction"] < 1.0


def test_estimator_distillation_clones_through_the_estimate_and_trains_it(tmp_path):
    """EstimatorDistillation: rsl_rl's behaviour-cloning walk with the estimator's regression on
    every step. With one window (one epoch of 16 steps, gradient_length 16) the update's logged
    terms are those of its starting weights over the rollout: the cloning loss of the actor fed the
    estimate under the stored draws and the normalisers' units (as PPO's evaluation,
    `PolicyModel.sequence`, feeds it: half the steps see the estimate), and the estimator's loss;
    its step lowers the estimator's error on that rollout (the cloning loss does not reach the
    estimator)."""
    write_named_teacher(tmp_path / "teacher")
    cfg = estimator_config(
        "algorithm.class_name=EstimatorDistillation",
        f"algorithm.teacher_policy.checkpoint={tmp_path / 'teacher'}",
        "algorithm.num_learning_epochs=1",
        "algorithm.gradient_length=16",
        "policy.replace_state_prob=0.5",  # the stored draws decide which steps see the estimate
    )
    learner = make_learner(make_env_from_config(cfg.env), cfg)
    ts, rs = jax.jit(learner.init)(jax.random.PRNGKey(0))
    ts, rs, metrics = jax.jit(learner.iteration)(ts, rs)  # normalisers away from their start
    scalars = metrics["scalars"]
    assert {"distillation", "estimator", "estimator_rmse_velocity"} <= set(scalars)
    assert all(np.isfinite(float(scalars[k])) for k in ("distillation", "estimator"))
    # the actor's statistics apart from the critic's, so that an estimate fed unconverted would differ
    actor = ts.normalizers["policy"]
    actor = actor.replace(mean=actor.mean + 0.5, var=actor.var * 4.0)
    ts = ts.replace(normalizers={**ts.normalizers, "policy": actor})
    units = learner.model.units(ts.normalizers)
    np.testing.assert_allclose(units.scale["estimator"], 0.5, rtol=0.02)
    _, tr, _ = jax.jit(learner.rollout)(ts, rs, jax.random.PRNGKey(1))
    out = jax.jit(lambda ts, tr: update_rules.cloning_update(learner, ts, tr))(ts, tr)

    def terms(params):
        statistics = learner.normalization.statistics(ts.normalizers)
        nobs = learner.normalization.groups(ts.normalizers, tr.obs)
        resets = jnp.concatenate([jnp.zeros_like(tr.dones[:1]), tr.dones[:-1]])
        units = learner.model.units(statistics)
        mean, _, _, est = learner.model.sequence(params, nobs, tr.initial_hidden, resets, tr.draws, units)
        (stage,) = learner.model.stages
        target = take_static(nobs["critic"], stage.target_idx)
        labels = tr.parts["teacher"]["action_labels"]
        return float(jnp.mean(jnp.square(mean - labels))), float(
            jnp.mean(jnp.sum(jnp.square(est["estimator"] - target), -1))
        )

    cloning, estimator = terms(ts.params)
    assert float(out.metrics["distillation"]) == pytest.approx(cloning, rel=1e-5)
    assert float(out.metrics["estimator"]) == pytest.approx(estimator, rel=1e-5)
    assert terms(out.trainable[POLICY])[1] < estimator


def test_distillation_without_the_estimators_loss_is_refused_by_name():
    """A policy with an estimator under rsl_rl's Distillation would never train it: the error names
    EstimatorDistillation; latent targets are TPPO's, under either cloning update."""
    with pytest.raises(ConfigError, match="'EstimatorDistillation'.*class_name is Distillation"):
        estimator_config("algorithm.class_name=Distillation")
    with pytest.raises(ConfigError, match="a TPPO option, not EstimatorDistillation's"):
        estimator_config(
            "algorithm.class_name=EstimatorDistillation",
            "algorithm.distill_latent_obs_component_mapping={estimator: velocity}",
        )
