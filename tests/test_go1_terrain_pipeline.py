"""st_rl's rough-terrain pipeline at a small size, end to end: a height-scan teacher's checkpoint
(configs/Go1JoystickRoughTerrain_teacher_cpu.yaml), a student that acts on what a Go1 measures
(configs/Go1JoystickRoughTerrain_student_tppo_cpu.yaml: no scan, its base velocity estimated)
trained from it, exported to ONNX, and deployed in C MuJoCo on the task's heightfield.
bench/go1_terrain.py runs the same presets at their own sizes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from learning_runs import train_main
from policy_runs import random_policy_run, random_policy_state

from strl_jax.checkpoints.orbax_checkpoints import load_params_and_normalizers
from strl_jax.configs.loader import config_to_dict, resolve_config
from strl_jax.deploy import main as deploy_main
from strl_jax.envs import make_env_from_config
from strl_jax.envs.native_mujoco import native_task
from strl_jax.inference import get_inference_policy, load_policy
from strl_jax.runners.run_start import checkpoint_manipulator
from strl_jax.runners.teachers import load_teacher

TASK = "Go1JoystickRoughTerrain"
TEACHER = "Go1JoystickRoughTerrain_teacher_cpu"
BLIND = "Go1JoystickRoughTerrain_cpu"
REPO = Path(__file__).resolve().parents[1]
QUADRUPED_RECIPE = REPO / "configs" / "recipes" / "quadruped_cpu.yaml"
FINETUNE = REPO / "configs" / "recipes" / "finetune_go1_walk.yaml"
STUDENTS = (
    "Go1JoystickRoughTerrain_student_tppo_cpu",
    "Go1JoystickRoughTerrain_student_dagger_cpu",
    "Go1JoystickRoughTerrain_student_distillation_cpu",
)
SMALL_NETS = [
    "policy.actor_hidden_dims=[16]",
    "policy.critic_hidden_dims=[16]",
]
SMALL_RUN = [
    "env.num_envs=8",
    "runner.num_steps_per_env=8",
    "algorithm.num_mini_batches=2",
    "algorithm.num_learning_epochs=2",
    "runner.eval_interval=0",
    "runner.save_interval=2",
    "runner.print_interval=1000",
    "policy.estimator_kwargs={hidden_sizes: [16], nonlinearity: celu}",
]
# what a Go1 measures, in the order of the task's `state` without base_lin_vel: gyro (3), gravity
# in the base frame (3), joint angles and velocities (12 + 12), the last action (12), the command (3)
MEASURED = 45


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    """A run folder holding one checkpoint of the teacher preset (random weights, small nets)."""
    cfg = resolve_config(
        TEACHER,
        overrides=[*SMALL_NETS, "policy.encoder_kwargs={hidden_sizes: [16]}", "policy.encoder_output_size=4"],
    )
    env = make_env_from_config(cfg.env, num_envs=1)
    return random_policy_run(cfg, env, tmp_path_factory.mktemp("terrain") / "teacher")


@pytest.fixture(scope="module")
def student(teacher, tmp_path_factory):
    """Four iterations of the TPPO student of `teacher` (small nets and envs), trained on C
    MuJoCo's heightfield contacts: its run folder and metric rows."""
    run = tmp_path_factory.mktemp("terrain") / "student"
    overrides = [
        *SMALL_NETS,
        *SMALL_RUN,
        "runner.max_iterations=4",
        f"algorithm.teacher_policy.checkpoint={teacher}",
        # deploy converts C MuJoCo's states into the layout of the env's own (6 contacts per foot)
        "env.hfield_contacts=mujoco",
    ]
    rows = train_main(run, ["--task", STUDENTS[0], *overrides])
    return run, rows


@pytest.mark.parametrize(
    "preset, published", [(BLIND, TASK), (TEACHER, "Go1JoystickRoughTerrain_height_mlp")]
)
def test_the_blind_and_teacher_presets_are_their_published_presets_under_the_quadruped_recipe(
    preset, published
):
    by_hand = resolve_config(published, [str(QUADRUPED_RECIPE), str(FINETUNE)])
    assert config_to_dict(resolve_config(preset)) == config_to_dict(by_hand)


@pytest.mark.parametrize("preset", STUDENTS)
def test_every_student_starts_fresh_at_the_recipes_learning_rate(preset):
    """Students start untrained (st_rl's pipeline), so they take the recipe's learning rate and
    its decay, not the fine-tune's rate held for a loaded policy."""
    cfg = resolve_config(preset, overrides=["algorithm.teacher_policy.checkpoint=x"])
    recipe = resolve_config(TASK, [str(QUADRUPED_RECIPE)])
    assert cfg.runner.load == ""
    assert cfg.runner.ckpt_manipulator == ""
    assert cfg.algorithm.learning_rate == recipe.algorithm.learning_rate == 1e-3
    assert cfg.algorithm.lr_scheduler == recipe.algorithm.lr_scheduler


def test_the_teacher_preset_starts_acting_as_the_shipped_flat_policy():
    """The preset's warm start (runner.load, its manipulator) on the real checkpoint: whatever the
    scan reads, the teacher's first actions are examples/go1_walk's on the same 48 values."""
    cfg = resolve_config(TEACHER)
    env = make_env_from_config(cfg.env, num_envs=1)
    fresh = random_policy_state(cfg, env)
    params, normalizers, _ = load_params_and_normalizers(
        REPO / cfg.runner.load, fresh, manipulate=checkpoint_manipulator(cfg, fresh)
    )
    flat = load_policy(REPO / "examples" / "go1_walk")
    obs = np.random.default_rng(0).normal(size=(4, 48 + 17 * 11)).astype(np.float32)
    expected = get_inference_policy(flat.cfg, flat.params, flat.normalizers)(obs[:, :48])
    np.testing.assert_allclose(
        get_inference_policy(cfg, params, normalizers)(obs), expected, rtol=0, atol=1e-5
    )


def test_the_teacher_reads_the_scan_and_the_student_only_what_a_go1_measures(teacher):
    teacher_policy = load_policy(teacher)
    student_cfg = resolve_config(STUDENTS[0], overrides=[f"algorithm.teacher_policy.checkpoint={teacher}"])
    env = make_env_from_config(student_cfg.env, num_envs=1)
    shapes = env.observation_shapes()
    scan = 17 * 11
    assert teacher_policy.observation_size == 48 + scan  # `state` and the scan
    assert shapes["teacher"] == (48 + scan,) and shapes["policy"] == (48,)  # the teacher's input
    assert shapes["critic"] == (123 + scan,)  # privileged_state and the clean scan


@pytest.mark.parametrize("preset", STUDENTS)
def test_every_student_preset_takes_the_teacher_on_its_teacher_group(teacher, preset):
    """Each student (TPPO, DAgger, rsl_rl's Distillation) loads the teacher's checkpoint and feeds it
    the group it was trained on; none of them gives its own actor the scan or the true velocity:
    each estimates the velocity from the 45 values a Go1 measures."""
    cfg = resolve_config(preset, overrides=[f"algorithm.teacher_policy.checkpoint={teacher}"])
    env = make_env_from_config(cfg.env, num_envs=1)
    shapes = env.observation_shapes()
    loaded = load_teacher(cfg, shapes, env.action_size)
    assert loaded.actor.obs_group == "teacher"
    layout = [name for name, _ in env.components["policy"]]
    assert "height_scan" not in layout
    # the estimator's target, the true velocity, is read by name from the critic group, whose scan
    # comes last
    critic = [name for name, _ in env.components["critic"]]
    assert "base_lin_vel" in critic and critic[-1] == "height_scan"
    # the estimate, trained by the student's algorithm, always replaces the measured velocity
    assert cfg.algorithm.class_name.startswith("Estimator")
    assert (
        cfg.policy.estimator_target_components == ("base_lin_vel",) and cfg.policy.replace_state_prob == 1.0
    )
    sizes = dict(env.components["policy"])
    assert sum(sizes[c] for c in cfg.policy.estimator_obs_components) == MEASURED
    assert shapes["policy"] == (MEASURED + 3,)


def test_the_student_trains_exports_and_deploys_on_the_heightfield(student, tmp_path):
    run, rows = student
    assert [r["iteration"] for r in rows] == [1, 2, 3, 4]
    # No check of the estimator's learning here: over these few iterations its logged error falls
    # as far without its loss as with it (0.92 -> 0.29 and 0.27 m/s: the normaliser's first updates),
    # so tests/test_estimator_training.py and tests/test_custom_robot_example.py hold that.
    out = tmp_path / "m.json"
    # C MuJoCo alone: on flat ground tests/test_deploy.py holds the two engines to 0.5% over 8 steps,
    # on the heightfield tests/test_hfield_contacts.py holds MJX under the student's contact rule to
    # C MuJoCo's accelerations
    argv = [str(run), "--episodes", "2", "--episode_length", "8", "--no-jax", "--json", str(out)]
    assert deploy_main(argv) == 0
    model = onnx.load(str(run / "exported" / "policy.onnx"))
    inputs = model.graph.input[0].type.tensor_type.shape.dim
    assert inputs[-1].dim_value == MEASURED
    episodes = json.loads(out.read_text())["native"]
    assert [e["length"] for e in episodes] == [8, 8] and episodes[0]["return"] != episodes[1]["return"]
    # C MuJoCo steps the task's own heightfield (not a plane)
    task = native_task(load_policy(run).env.env, TASK, 8, None)
    assert np.any(np.asarray(task.model.geom_type) == 1) and task.model.nhfield == 1
    assert len(task.terminations) == 1  # and ends an episode off the field's edge, as the JAX env does


def test_the_shipped_student_acts_on_what_a_go1_measures():
    """examples/go1_rough_student's ONNX: the 45 measured values (no scan, no base velocity) and
    its recurrent states in; joint targets and the estimated base velocity out."""
    model = onnx.load(str(REPO / "examples" / "go1_rough_student" / "exported" / "policy.onnx"))
    shapes = {
        i.name: [d.dim_value or d.dim_param for d in i.type.tensor_type.shape.dim]
        for i in [*model.graph.input, *model.graph.output]
    }
    assert shapes["obs"] == ["batch", MEASURED]
    assert shapes["actions"] == ["batch", 12] and shapes["estimator"] == ["batch", 3]
    components = json.loads({p.key: p.value for p in model.metadata_props}["obs_components"])
    preset = resolve_config(STUDENTS[2], overrides=["algorithm.teacher_policy.checkpoint=x"])
    # the estimator's inputs: `state` without base_lin_vel
    assert [name for name, _ in components] == list(preset.policy.estimator_obs_components)
    assert sum(size for _, size in components) == MEASURED
