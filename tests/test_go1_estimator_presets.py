"""The Go1JoystickFlatTerrain teacher / estimator / student presets resolve, and each builds its
learner's policy model on the env's named components: the teacher's actor reads
`privileged_state`, the estimators read the 45 values of `state` other than base_lin_vel and
predict the critic's 3-value base_lin_vel, which always replaces the actor's (the exported policy
takes 45 of the 48 inputs), and the student's teacher group has the teacher's input shape.

Building a Playground env only traces shapes (no training, no jit of the env step).
"""

from __future__ import annotations

from functools import cache

import jax
import pytest
from extras import require_playground

require_playground()

from strl_jax.configs import resolve_config  # noqa: E402
from strl_jax.envs import make_env_from_config  # noqa: E402
from strl_jax.networks.policy import make_policy_model  # noqa: E402
from strl_jax.runners.teachers import teacher_obs_group  # noqa: E402

TASK = "Go1JoystickFlatTerrain"
TEACHER = f"{TASK}_teacher"
ESTIMATORS = [f"{TASK}_estimator", f"{TASK}_estimator_recurrent", f"{TASK}_student"]
STATE = 48  # Playground's `state`
PRIVILEGED = 123  # Playground's `privileged_state`
MEASURED = ["base_ang_vel", "projected_gravity", "dof_pos", "dof_vel", "last_action", "command"]
# a run folder is only read when the student starts training
DUMMY_TEACHER = "algorithm.teacher_policy.checkpoint=runs/go1_teacher"


def config(name: str):
    overrides = [DUMMY_TEACHER] if name.endswith("_student") else []
    return resolve_config(name, overrides=overrides)


@cache
def env_of(name: str):
    return make_env_from_config(config(name).env, num_envs=2)


def model_of(name: str):
    env = env_of(name)
    return env, make_policy_model(env.action_size, config(name).policy, env.components)


@pytest.mark.parametrize("name", [TEACHER, *ESTIMATORS])
def test_preset_keeps_the_ppo_preset_settings(name):
    """Env, sizes and PPO hyperparameters are those of configs/Go1JoystickFlatTerrain.yaml."""
    base, cfg = resolve_config(TASK), config(name)
    assert cfg.env.task == TASK and cfg.env.num_envs == base.env.num_envs
    assert cfg.env.playground == base.env.playground
    assert cfg.env.domain_randomization == base.env.domain_randomization
    assert cfg.runner == base.runner
    skip = {"class_name", "teacher_policy", "clip_min_std"}  # the student keeps a std floor
    for field in base.algorithm.__dataclass_fields__:
        if field not in skip and not field.startswith(("estimator_", "distill", "teacher_", "update_times")):
            assert getattr(cfg.algorithm, field) == getattr(base.algorithm, field), field


def test_teacher_actor_reads_the_privileged_state():
    env, model = model_of(TEACHER)
    shapes = env.observation_shapes()
    assert shapes["policy"] == shapes["critic"] == (PRIVILEGED,)
    assert not model.stages and not model.recurrent
    params = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), shapes))
    assert params["params"]["actor"]["hidden_0"]["kernel"].shape == (PRIVILEGED, 512)
    assert env.components["policy"][0] == ("state_base_lin_vel", 3)


@pytest.mark.parametrize("name", ESTIMATORS)
def test_estimator_reads_45_values_and_replaces_base_lin_vel(name):
    env, model = model_of(name)
    cfg = config(name)
    assert env.observation_shapes()["policy"] == (STATE,)
    assert model.recurrent == (cfg.policy.class_name == "StateAcRecurrent")
    (stage,) = model.stages
    policy = dict(env.components["policy"])
    assert list(policy) == ["base_lin_vel", *MEASURED]
    assert len(stage.input_idx) == sum(policy[n] for n in MEASURED) == 45
    assert stage.output_size == 3 and stage.targets == (("base_lin_vel", 3),)
    critic = [n for n, _ in env.components["critic"]]
    start = sum(size for n, size in env.components["critic"][: critic.index("base_lin_vel")])
    assert stage.target_idx == (start, start + 1, start + 2)  # the true velocity, not `state_...`
    assert stage.slot_idx == (0, 1, 2) and stage.replace_prob == 1.0
    assert stage.hidden_sizes == (128, 64) and stage.nonlinearity == "celu"
    measured = model.measured_indices(STATE)
    assert len(measured) == 45 and list(measured) == list(range(3, STATE))
    # the policy model initialises on the env's shapes (traced only)
    jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), env.observation_shapes()))


def test_recurrent_estimator_preset_uses_a_gru_and_whole_env_minibatches():
    cfg = config(f"{TASK}_estimator_recurrent")
    assert cfg.policy.rnn_type == "gru" and cfg.policy.rnn_hidden_size == 256
    assert cfg.policy.actor_hidden_dims == cfg.policy.critic_hidden_dims == (256, 128)
    assert cfg.env.num_envs % cfg.algorithm.num_mini_batches == 0
    _, model = model_of(f"{TASK}_estimator_recurrent")
    assert model.stages[0].memory  # the estimator's own GRU


def test_student_teacher_group_has_the_teacher_input_shape():
    student = config(f"{TASK}_student")
    assert student.algorithm.class_name == "EstimatorTPPO"
    assert student.algorithm.teacher_policy.class_name == config(TEACHER).policy.class_name
    assert resolve_config(f"{TASK}_student").algorithm.teacher_policy.checkpoint == ""
    group = teacher_obs_group(student)
    assert group == "critic"
    student_shape = env_of(f"{TASK}_student").observation_shapes()[group]
    assert student_shape == env_of(TEACHER).observation_shapes()["policy"] == (PRIVILEGED,)
    assert env_of(TEACHER).action_size == env_of(f"{TASK}_student").action_size == 12
