"""rsl_rl / IsaacLab runner configs through `--config`, and strl_jax configs out to rsl_rl's runner.

Resolution only (nothing is trained or compiled); the rsl_rl runner tests build rsl-rl-lib's
`OnPolicyRunner` on a tiny torch env.
"""

from __future__ import annotations

import copy
import json
import types
from pathlib import Path

import pytest
import yaml

from strl_jax import train as train_cli
from strl_jax.configs.from_rsl_rl import RSL_RL_UPDATE, from_rsl_rl_config, is_rsl_rl_config
from strl_jax.configs.loader import (
    ConfigYamlLoader,
    config_to_dict,
    load_config_file,
    load_preset,
    resolve_config,
)
from strl_jax.configs.schema import PolicyConfig, RunnerConfig, TrainConfig
from strl_jax.configs.to_rsl_rl import PPO_KEYS, to_rsl_rl_train_cfg
from strl_jax.errors import ConfigError

DATA = Path(__file__).parent / "data" / "rsl_rl"
ANYMAL = DATA / "isaaclab_anymal_d_rough_agent.yaml"  # IsaacLab 2.3 dump, `policy:` form
GO1_JSON = DATA / "rsl_rl5_go1_flat_train_cfg.json"  # rsl_rl 5.x `actor:` / `critic:` form
MJLAB_RNN = DATA / "mjlab_go1_rnn_agent.yaml"  # rsl_rl 5.x RNNModel pair, !!python/tuple tags
ISAACLAB_LSTM = DATA / "isaaclab_recurrent_agent.yaml"  # ActorCriticRecurrent, `policy:` form
FIXTURES = (ANYMAL, GO1_JSON, MJLAB_RNN, ISAACLAB_LSTM)
TASK = "Go1JoystickFlatTerrain"


def read(path: Path) -> dict:
    if path.suffix == ".json":
        return json.loads(path.read_text())
    return yaml.load(path.read_text(), Loader=ConfigYamlLoader)


PPO_FROM_DUMPS = {
    "class_name": "PPO",
    "num_learning_epochs": 5,
    "num_mini_batches": 4,
    "learning_rate": 0.001,
    "schedule": "adaptive",
    "gamma": 0.99,
    "lam": 0.95,
    "desired_kl": 0.01,
    "max_grad_norm": 1.0,
    "value_loss_coef": 1.0,
    "use_clipped_value_loss": True,
    "clip_param": 0.2,
}


# ------------------------------------------------------------------------------------------
# detection and the mapping, field by field
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_dumped_configs_are_detected(path):
    assert is_rsl_rl_config(read(path))


def test_strl_jax_files_are_not_rsl_rl():
    assert not is_rsl_rl_config(load_preset(TASK))
    assert not is_rsl_rl_config({"seed": 3, "policy": {"class_name": "ActorCritic"}, "runner": {}})
    legged_gym = {"runner": {"policy_class_name": "ActorCritic", "num_steps_per_env": 24}}
    assert is_rsl_rl_config(legged_gym)


def test_isaaclab_policy_form_maps_field_by_field():
    assert from_rsl_rl_config(read(ANYMAL)) == {
        "seed": 42,
        "env": {"clip_actions": None, "obs_groups": {"critic": ["state", "privileged_state"]}},
        "policy": {
            "class_name": "ActorCritic",
            "init_noise_std": 1.0,
            "noise_std_type": "scalar",
            "actor_hidden_dims": [512, 256, 128],
            "critic_hidden_dims": [512, 256, 128],
            "activation": "elu",
        },
        "algorithm": {
            **RSL_RL_UPDATE,
            **PPO_FROM_DUMPS,
            "entropy_coef": 0.005,
            "optimizer": "adam",
            "normalize_advantage_per_mini_batch": False,
        },
        "runner": {
            "num_steps_per_env": 24,
            "max_iterations": 1500,
            "empirical_normalization": False,
            "save_interval": 50,
            "experiment_name": "anymal_d_rough",
            "logger": "tensorboard",
            "neptune_project": "isaaclab",
            "wandb_project": "isaaclab",
        },
    }


def test_rsl_rl5_actor_critic_json_maps_field_by_field():
    mapped = from_rsl_rl_config(read(GO1_JSON))
    assert mapped["policy"] == {
        "class_name": "ActorCritic",
        "actor_hidden_dims": [128, 128, 128],
        "critic_hidden_dims": [256, 128],
        "activation": "elu",
        "init_noise_std": 1.0,
        "noise_std_type": "log",
    }
    assert mapped["runner"] == {
        "num_steps_per_env": 24,
        "max_iterations": 300,
        "empirical_normalization": True,  # actor and critic obs_normalization
        "save_interval": 50,
        "experiment_name": "unitree_go1_flat",
        "logger": "wandb",  # {class_name: WandbLogWriter, project_name: go1}
        "wandb_project": "go1",  # the writer's project wins over the deprecated wandb_project
        "neptune_project": "isaaclab",
    }
    assert mapped["algorithm"] == {
        **RSL_RL_UPDATE,
        **PPO_FROM_DUMPS,
        "entropy_coef": 0.01,
        "optimizer": "adam",
        "normalize_advantage_per_mini_batch": False,
    }
    assert mapped["env"] == {"clip_actions": None, "obs_groups": {"critic": ["state", "privileged_state"]}}
    assert mapped["seed"] == 42


def test_recurrent_models_map_to_actor_critic_recurrent():
    mjlab = from_rsl_rl_config(read(MJLAB_RNN))  # !!python/tuple read as lists
    assert mjlab["policy"] == {
        "class_name": "ActorCriticRecurrent",
        "actor_hidden_dims": [256, 128],
        "critic_hidden_dims": [256, 128],
        "activation": "elu",
        "init_noise_std": 0.8,
        "noise_std_type": "scalar",
        "rnn_type": "gru",
        "rnn_hidden_size": 64,
        "rnn_num_layers": 2,
    }
    assert mjlab["env"] == {"clip_actions": 10.0}  # {actor: [actor], critic: [critic]} is the default
    assert mjlab["algorithm"]["optimizer"] == "adamw"
    assert mjlab["algorithm"]["schedule"] == "fixed"
    assert mjlab["runner"]["empirical_normalization"] is True
    isaaclab = from_rsl_rl_config(read(ISAACLAB_LSTM))
    assert isaaclab["policy"] == {
        "class_name": "ActorCriticRecurrent",
        "init_noise_std": 1.0,
        "noise_std_type": "scalar",
        "actor_hidden_dims": [128, 128],
        "critic_hidden_dims": [128, 128],
        "activation": "elu",
        "rnn_type": "lstm",
        "rnn_hidden_size": 256,
        "rnn_num_layers": 1,
    }
    assert isaaclab["runner"]["empirical_normalization"] is True  # the top-level (rsl_rl 2.x) key


def test_obs_groups_name_playground_keys():
    def groups(obs_groups):
        return from_rsl_rl_config({"obs_groups": obs_groups}).get("env", {}).get("obs_groups", {})

    assert groups({"policy": ["policy"], "critic": ["critic"]}) == {}  # strl_jax's defaults
    assert groups({"actor": ["actor"], "critic": ["critic"]}) == {}
    assert groups({"actor": ["policy"], "critic": ["policy"]}) == {"critic": ["state"]}
    assert groups({"policy": ["policy", "height_scan"]}) == {"policy": ["state", "height_scan"]}
    teacher = from_rsl_rl_config({"obs_groups": {"student": ["policy"], "teacher": ["critic"]}})
    assert teacher == {"algorithm": {**RSL_RL_UPDATE, "teacher_policy": {"obs_group": "critic"}}}


def test_desired_kl_null_and_infinite_grad_norm():
    mapped = from_rsl_rl_config(
        {"num_steps_per_env": 8, "algorithm": {"desired_kl": None, "max_grad_norm": float("inf")}}
    )
    assert mapped["algorithm"] == {**RSL_RL_UPDATE, "schedule": "fixed", "max_grad_norm": None}


def test_legged_gym_train_cfg_is_flattened():
    data = {
        "runner_class_name": "OnPolicyRunner",
        "seed": 3,
        "runner": {
            "policy_class_name": "ActorCriticRecurrent",
            "algorithm_class_name": "PPO",
            "num_steps_per_env": 48,
            "max_iterations": 200,
            "experiment_name": "go1",
            "run_name": "",
            "resume": False,
            "load_run": -1,
            "checkpoint": -1,
            "resume_path": None,
        },
        "policy": {"rnn_hidden_size": 128, "actor_hidden_dims": [64]},
        "algorithm": {"gamma": 0.98},
    }
    assert from_rsl_rl_config(data) == {
        "seed": 3,
        "runner": {"num_steps_per_env": 48, "max_iterations": 200, "experiment_name": "go1"},
        "policy": {"class_name": "ActorCriticRecurrent", "rnn_hidden_size": 128, "actor_hidden_dims": [64]},
        "algorithm": {**RSL_RL_UPDATE, "class_name": "PPO", "gamma": 0.98},
    }
    data["runner"]["checkpoint"] = 500
    with pytest.raises(ConfigError, match=r"runner\.checkpoint: 500 loads a checkpoint; use --load"):
        from_rsl_rl_config(data)


def test_rsl_rl_configs_ask_for_rsl_rl_update():
    """Any rsl_rl config sets rsl_rl's update (exact KL, the two networks clipped apart) over a
    preset's st_rl defaults, unless it names strl_jax's fields itself; strl_jax files keep st_rl's."""
    cfg = resolve_config(TASK, overrides=["algorithm.learning_rate=1e-3"])
    assert (cfg.algorithm.kl_epsilon, cfg.algorithm.clip_grad_per_network) == (1e-5, False)
    assert from_rsl_rl_config({"num_steps_per_env": 8})["algorithm"] == RSL_RL_UPDATE
    own = {"num_steps_per_env": 8, "algorithm": {"kl_epsilon": 1e-5, "clip_grad_per_network": False}}
    assert from_rsl_rl_config(own)["algorithm"] == {"kl_epsilon": 1e-5, "clip_grad_per_network": False}


def test_distillation_student_teacher_forms():
    student = {
        "class_name": "RNNModel",
        "hidden_dims": [64],
        "activation": "elu",
        "obs_normalization": True,
        "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": 0.1, "std_type": "scalar"},
        "rnn_type": "lstm",
        "rnn_hidden_dim": 32,
        "rnn_num_layers": 1,
    }
    teacher = {"class_name": "MLPModel", "hidden_dims": [512], "distribution_cfg": {"init_std": 0.0}}
    algorithm = {
        "class_name": "Distillation",
        "gradient_length": 15,
        "max_grad_norm": None,
        "loss_type": "mse",
    }
    new_form = {
        "class_name": "DistillationRunner",
        "obs_groups": {"student": ["policy"], "teacher": ["critic"]},
        "student": student,
        "teacher": teacher,
        "algorithm": algorithm,
    }
    assert from_rsl_rl_config(new_form) == {
        "policy": {
            "class_name": "ActorCriticRecurrent",
            "actor_hidden_dims": [64],
            "activation": "elu",
            "init_noise_std": 0.1,
            "noise_std_type": "scalar",
            "rnn_type": "lstm",
            "rnn_hidden_size": 32,
            "rnn_num_layers": 1,
        },
        "runner": {"empirical_normalization": True},
        "algorithm": {
            **RSL_RL_UPDATE,
            **algorithm,
            # the teacher's layers come from its run (teacher_policy.checkpoint), not from here
            "teacher_policy": {"class_name": "ActorCritic", "obs_group": "critic"},
        },
    }
    old_form = {
        "class_name": "DistillationRunner",
        "policy": {
            "class_name": "StudentTeacher",
            "init_noise_std": 0.1,
            "student_obs_normalization": False,
            "teacher_obs_normalization": True,
            "student_hidden_dims": [256, 128],
            "teacher_hidden_dims": [512, 256],
            "activation": "elu",
        },
        "algorithm": {**RSL_RL_UPDATE, "class_name": "Distillation", "num_learning_epochs": 1},
    }
    assert from_rsl_rl_config(old_form) == {
        "policy": {
            "class_name": "ActorCritic",
            "init_noise_std": 0.1,
            "actor_hidden_dims": [256, 128],
            "activation": "elu",
        },
        "runner": {"empirical_normalization": False},
        "algorithm": {**RSL_RL_UPDATE, "class_name": "Distillation", "num_learning_epochs": 1},
    }


# ------------------------------------------------------------------------------------------
# refusals
# ------------------------------------------------------------------------------------------


def test_every_unsupported_key_is_named_with_its_path():
    data = read(ANYMAL)
    data |= {"resume": True, "load_run": "2025-01-01_.*", "class_name": "AMPRunner", "foo": 1}
    data["obs_groups"]["foo_state"] = ["policy"]
    data["algorithm"] |= {"use_mixed_precision": True, "bar": 2}
    data["policy"] |= {"state_dependent_std": True, "class_name": "ActorCriticMoE"}
    with pytest.raises(ConfigError) as err:
        from_rsl_rl_config(data)
    message = str(err.value)
    assert "9 setting(s)" in message
    for path in (
        "resume:",
        "load_run:",
        "class_name: 'AMPRunner'",
        "foo:",
        "obs_groups.foo_state:",
        "algorithm.use_mixed_precision:",
        "algorithm.bar:",
        "policy.state_dependent_std:",
        "policy.class_name:",
    ):
        assert f"\n  {path}" in message, path
    assert "--resume RUN_FOLDER" in message and "--load CHECKPOINT" in message
    assert "valid choices: ['OnPolicyRunner', 'DistillationRunner']" in message


def test_null_and_false_optional_features_are_accepted():
    data = read(GO1_JSON) | {"multi_gpu": None, "torch_compile_mode": None, "upload_model": False}
    data["algorithm"] |= {"use_mixed_precision": False, "grad_reduce_bucket_mb": 25}
    data["actor"] |= {"cnn_cfg": None}
    assert from_rsl_rl_config(data) == from_rsl_rl_config(read(GO1_JSON))


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            {"critic": {"class_name": "MLPModel"}},
            "actor.class_name='RNNModel', critic.class_name='MLPModel': strl_jax has one core",
        ),
        ({"critic": {"activation": "relu"}}, "actor.activation='elu', critic.activation='relu'"),
        ({"critic": {"rnn_hidden_dim": 32}}, "actor.rnn_hidden_dim=64, critic.rnn_hidden_dim=32"),
        ({"critic": {"obs_normalization": False}}, "observation normalisation"),
        ({"actor": {"class_name": "CNNModel"}}, "actor.class_name: 'CNNModel' is not a model"),
        ({"actor": {"distribution_cfg": {"std_range": [0.05, 0.5]}}}, "algorithm.clip_min_std"),
        (
            {"actor": {"distribution_cfg": {"class_name": "BetaDistribution"}}},
            "actor.distribution_cfg.class_name: 'BetaDistribution'",
        ),
        ({"actor": {"distribution_cfg": None}}, "a deterministic actor cannot be trained"),
        ({"critic": {"distribution_cfg": {"class_name": "GaussianDistribution"}}}, "critic.distribution_cfg"),
        ({"actor": {"dropout": 0.1}}, "actor.dropout: unknown RNNModel setting"),
    ],
)
def test_what_strl_jax_cannot_express_is_refused(change, expected):
    data = read(MJLAB_RNN)
    for block, update in change.items():
        for key, value in update.items():
            if isinstance(value, dict) and isinstance(data[block].get(key), dict):
                data[block][key] = data[block][key] | value
            else:
                data[block][key] = value
    with pytest.raises(ConfigError) as err:
        from_rsl_rl_config(data)
    assert expected in str(err.value)


def test_policy_and_actor_blocks_together_are_refused():
    data = read(GO1_JSON) | {"policy": read(ANYMAL)["policy"]}
    with pytest.raises(ConfigError, match="policy: give either a policy block or actor/critic blocks"):
        from_rsl_rl_config(data)


def test_policy_form_normalisation_must_agree():
    data = read(ANYMAL)
    data["policy"]["critic_obs_normalization"] = True
    with pytest.raises(ConfigError, match="policy.actor_obs_normalization=False, policy.critic_obs_norm"):
        from_rsl_rl_config(data)


# ------------------------------------------------------------------------------------------
# through --config: loader and CLI
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_resolve_config_takes_rsl_rl_files(path):
    cfg = resolve_config(TASK, [str(path)])
    preset = resolve_config(TASK)
    mapped = from_rsl_rl_config(read(path))
    assert cfg.env.num_envs == preset.env.num_envs  # keys the file does not set keep the preset's
    for section in ("policy", "algorithm", "runner"):
        for key, value in mapped[section].items():
            got = getattr(getattr(cfg, section), key)
            assert got == (tuple(value) if isinstance(value, list) else value), (section, key)


def test_cli_maps_the_file_and_overrides_win(monkeypatch, capsys):
    seen = {}

    def fake_train(cfg, **kwargs):
        seen["cfg"] = cfg
        return types.SimpleNamespace(interrupted=None, log_dir="runs/x")

    monkeypatch.setattr(train_cli, "train", fake_train)
    argv = ["--task", TASK, "--config", str(GO1_JSON), "runner.max_iterations=7"]
    assert train_cli.main(argv) == 0
    cfg = seen["cfg"]
    assert cfg.policy.critic_hidden_dims == (256, 128)
    assert cfg.policy.noise_std_type == "log"
    assert cfg.runner.max_iterations == 7
    assert cfg.runner.logger == "wandb" and cfg.runner.wandb_project == "go1"


def test_cli_exit_2_names_the_unsupported_keys(tmp_path, capsys):
    data = read(ANYMAL) | {"resume": True}
    data["algorithm"]["use_mixed_precision"] = True
    bad = tmp_path / "agent.yaml"
    bad.write_text(yaml.safe_dump(data))
    assert train_cli.main(["--task", TASK, "--config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: config file {str(bad)!r}: rsl_rl config: 2 setting(s)")
    assert "resume:" in err and "algorithm.use_mixed_precision:" in err
    assert "Traceback" not in err


def test_json_errors_give_line_and_column(tmp_path):
    bad = tmp_path / "train_cfg.json"
    bad.write_text('{\n  "seed": 1,\n  "num_steps_per_env": ,\n}\n')
    with pytest.raises(ConfigError, match=r"train_cfg\.json:3:24: not valid JSON: Expecting value"):
        load_config_file(bad)


# ------------------------------------------------------------------------------------------
# strl_jax -> rsl_rl
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_round_trip_recovers_network_and_algorithm(path):
    cfg = resolve_config(TASK, [str(path)])
    back = from_rsl_rl_config(copy.deepcopy(to_rsl_rl_train_cfg(cfg)))
    policy = config_to_dict(cfg.policy)
    for key, value in back["policy"].items():
        assert value == policy[key], key
    assert set(back["policy"]) >= {"class_name", "actor_hidden_dims", "critic_hidden_dims", "activation"}
    expected = {"class_name": "PPO"} | {k: getattr(cfg.algorithm, k) for k in PPO_KEYS}
    assert back["algorithm"] == RSL_RL_UPDATE | expected
    for key in ("num_steps_per_env", "max_iterations", "save_interval", "empirical_normalization"):
        assert back["runner"][key] == getattr(cfg.runner, key)
    assert back["seed"] == cfg.seed
    assert back["env"] == {"clip_actions": cfg.env.clip_actions}


def test_to_rsl_rl_refuses_what_rsl_rl_has_not():
    with pytest.raises(ConfigError, match="policy.class_name 'StateAc' has no rsl_rl equivalent"):
        to_rsl_rl_train_cfg(TrainConfig(policy=PolicyConfig(class_name="StateAc")))


def _dummy_env(num_obs: int, num_critic_obs: int, num_actions: int):
    """The smallest rsl_rl VecEnv: groups `policy` and `critic` as strl_jax names them."""
    import rsl_rl.env as vec_env
    import tensordict
    import torch

    class DummyEnv(vec_env.VecEnv):
        def __init__(self):
            self.num_envs, self.num_actions, self.max_episode_length = 4, num_actions, 10
            self.episode_length_buf = torch.zeros(4, dtype=torch.long)
            self.device, self.cfg = "cpu", {}

        def get_observations(self):
            obs = {"policy": torch.zeros(4, num_obs), "critic": torch.zeros(4, num_critic_obs)}
            return tensordict.TensorDict(obs, batch_size=[4])

        def step(self, actions):
            return self.get_observations(), torch.zeros(4), torch.zeros(4), {}

    return DummyEnv()


@pytest.mark.parametrize("recurrent", [False, True], ids=["mlp", "lstm"])
def test_rsl_rl_on_policy_runner_builds_the_same_network(recurrent):
    env = _dummy_env(num_obs=5, num_critic_obs=7, num_actions=3)
    import rsl_rl.runners as runners
    import torch

    policy = PolicyConfig(
        class_name="ActorCriticRecurrent" if recurrent else "ActorCritic",
        actor_hidden_dims=(16, 8),
        critic_hidden_dims=(12,),
        activation="tanh",
        init_noise_std=0.5,
        rnn_type="lstm",
        rnn_hidden_size=10,
        rnn_num_layers=2,
    )
    cfg = TrainConfig(policy=policy, runner=RunnerConfig(num_steps_per_env=4, empirical_normalization=True))
    runner = runners.OnPolicyRunner(env, to_rsl_rl_train_cfg(cfg), log_dir=None, device="cpu")
    actor, critic = runner.alg.actor, runner.alg.critic
    first_in = 10 if recurrent else 5
    linear = [m for m in actor.mlp if isinstance(m, torch.nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linear] == [(first_in, 16), (16, 8), (8, 3)]
    assert isinstance(actor.mlp[1], torch.nn.Tanh)
    critic_linear = [m for m in critic.mlp if isinstance(m, torch.nn.Linear)]
    assert [(m.in_features, m.out_features) for m in critic_linear] == [(10 if recurrent else 7, 12), (12, 1)]
    assert torch.allclose(actor.distribution.std_param, torch.full((3,), 0.5))
    assert actor.obs_normalization and critic.obs_normalization
    assert actor.is_recurrent == recurrent
    if recurrent:
        lstm = actor.rnn.rnn
        assert isinstance(lstm, torch.nn.LSTM)
        assert (lstm.input_size, lstm.hidden_size, lstm.num_layers) == (5, 10, 2)
        assert critic.rnn.rnn.input_size == 7
    obs = env.get_observations()
    assert runner.alg.act(obs).shape == (4, 3)
