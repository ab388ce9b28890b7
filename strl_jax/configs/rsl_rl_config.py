"""rsl_rl / IsaacLab runner configs in and out of strl_jax's `TrainConfig`.

Users arrive with an IsaacLab `agent.yaml` (the dumped `RslRlOnPolicyRunnerCfg`, `policy:` block) or
an rsl_rl `train_cfg` (5.x: `actor:` / `critic:` model blocks). `from_rsl_rl_config` turns one into
the nested strl_jax mapping that `deep_merge` / `config_from_dict` take, and refuses, all at once,
every key that would switch on something strl_jax does not have; `to_rsl_rl_train_cfg` writes the
`train_cfg` that the installed rsl_rl's `OnPolicyRunner` builds the same network from.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from strl_jax.agents.algorithms import ALGORITHMS
from strl_jax.agents.rnd import SCHEDULE_KEYS, parse_rnd_config
from strl_jax.configs.schema import AlgorithmConfig, PolicyConfig, RunnerConfig, TrainConfig
from strl_jax.errors import ConfigError
from strl_jax.networks.policy_classes import POLICY_CLASSES

# rsl_rl 5.x model classes and whether they are recurrent
MODEL_CLASSES = {"MLPModel": False, "RNNModel": True}
# rsl_rl <= 3 (IsaacLab `policy:` block) class names -> strl_jax policy.class_name
OLD_POLICY_CLASSES = {
    "ActorCritic": "ActorCritic",
    "ActorCriticRecurrent": "ActorCriticRecurrent",
    "StudentTeacher": "ActorCritic",
    "StudentTeacherRecurrent": "ActorCriticRecurrent",
}
RUNNER_CLASSES = ("OnPolicyRunner", "DistillationRunner")
GAUSSIAN = "GaussianDistribution"
DEFAULT_STD_RANGE = (1e-6, 1e6)  # rsl_rl GaussianDistribution's std_range default
# rsl_rl's defaults of the resume bookkeeping keys: at these values they load nothing
LOAD_DEFAULTS = {"load_run": ".*", "load_checkpoint": "model_.*.pt"}
# rsl_rl 5.x's update where st_rl's differs, set for every rsl_rl config (the file may still set
# them): the exact KL for the adaptive schedule, and the actor's and the critic's gradients
# clipped separately
RSL_RL_UPDATE = {"kl_epsilon": 0.0, "clip_grad_per_network": True}
# rsl_rl PPO.__init__ arguments that strl_jax's algorithm section has under the same name
PPO_KEYS = (
    "num_learning_epochs",
    "num_mini_batches",
    "clip_param",
    "gamma",
    "lam",
    "value_loss_coef",
    "entropy_coef",
    "learning_rate",
    "max_grad_norm",
    "optimizer",
    "use_clipped_value_loss",
    "schedule",
    "desired_kl",
    "normalize_advantage_per_mini_batch",
)


# --------------------------------------------------------------------------------------------
# strl_jax -> rsl_rl
# --------------------------------------------------------------------------------------------


# strl_jax's aliases -> the one name rsl_rl's `resolve_nn_activation` knows for the same function
RSL_RL_ACTIVATION_ALIASES = {"celu": "crelu", "leaky_relu": "lrelu", "leakyrelu": "lrelu", "silu": "swish"}


def rsl_rl_activation(name: str) -> str:
    """rsl_rl's name for strl_jax's activation (rsl_rl calls torch.nn.CELU `crelu`, SiLU `swish`)."""
    key = name.lower()
    return RSL_RL_ACTIVATION_ALIASES.get(key, key)


def _rsl_rl_model(policy: PolicyConfig, hidden_dims: tuple[int, ...], normalize: bool) -> dict:
    """One rsl_rl 5.x model block (`MLPModel` or `RNNModel`) for strl_jax's actor or critic."""
    recurrent = policy.class_name == "ActorCriticRecurrent"
    model = {
        "class_name": "RNNModel" if recurrent else "MLPModel",
        "hidden_dims": list(hidden_dims),
        "activation": rsl_rl_activation(policy.activation),
        "obs_normalization": normalize,
    }
    if recurrent:
        model |= {
            "rnn_type": policy.rnn_type,
            "rnn_hidden_dim": policy.rnn_hidden_size,
            "rnn_num_layers": policy.rnn_num_layers,
        }
    return model


def _rsl_rl_algorithm(alg: AlgorithmConfig) -> dict:
    """rsl_rl's PPO block; rsl_rl clips with a number, so no clipping is an infinite norm."""
    out: dict[str, Any] = {"class_name": "PPO"}
    out |= {key: getattr(alg, key) for key in PPO_KEYS}
    if out["max_grad_norm"] is None:
        out["max_grad_norm"] = math.inf
    # a strl_jax (jnp) augmentation function is no torch one: rsl_rl gets the network without it
    return out | {"rnd_cfg": _rsl_rl_rnd(alg), "symmetry_cfg": None}


def _rsl_rl_rnd(alg: AlgorithmConfig) -> dict | None:
    """rsl_rl's `rnd_cfg` (every option spelt out; the group goes to `obs_groups.rnd_state`)."""
    if alg.rnd_cfg is None:
        return None
    rnd = parse_rnd_config(alg.rnd_cfg)
    schedule = rnd.weight_schedule
    keys = SCHEDULE_KEYS[schedule.mode]
    return {
        "weight": rnd.weight,
        "weight_schedule": {"mode": schedule.mode, **{k: getattr(schedule, k) for k in keys}},
        "reward_normalization": rnd.reward_normalization,
        "state_normalization": rnd.state_normalization,
        "learning_rate": rnd.learning_rate,
        "num_outputs": rnd.num_outputs,
        "predictor_hidden_dims": list(rnd.predictor_hidden_dims),
        "target_hidden_dims": list(rnd.target_hidden_dims),
        "activation": rsl_rl_activation(rnd.activation),
    }


def to_rsl_rl_train_cfg(cfg: TrainConfig) -> dict:
    """The rsl_rl 5.x `train_cfg` for `OnPolicyRunner(env, train_cfg, log_dir, device)` with the same
    network as `cfg`: an `ActorCritic` (MLPModel pair) or `ActorCriticRecurrent` (RNNModel pair) under
    PPO. The env is expected to return the observation groups `policy` (actor) and `critic`,
    strl_jax's group names.
    """
    policy = cfg.policy
    if policy.class_name not in ("ActorCritic", "ActorCriticRecurrent"):
        raise ConfigError(
            f"policy.class_name {policy.class_name!r} has no rsl_rl equivalent; "
            "valid choices: ['ActorCritic', 'ActorCriticRecurrent']"
        )
    if cfg.algorithm.class_name != "PPO":
        raise ConfigError(
            f"algorithm.class_name {cfg.algorithm.class_name!r} has no rsl_rl OnPolicyRunner equivalent; "
            "valid choices: ['PPO']"
        )
    normalize = cfg.runner.empirical_normalization
    actor = _rsl_rl_model(policy, policy.actor_hidden_dims, normalize)
    actor["distribution_cfg"] = {
        "class_name": GAUSSIAN,
        "init_std": policy.init_noise_std,
        "std_type": policy.noise_std_type,
    }
    runner = cfg.runner
    obs_groups = {"actor": ["policy"], "critic": ["critic"]}
    if cfg.algorithm.rnd_cfg is not None:
        obs_groups["rnd_state"] = [parse_rnd_config(cfg.algorithm.rnd_cfg).obs_group]
    return {
        "seed": cfg.seed,
        "num_steps_per_env": runner.num_steps_per_env,
        "max_iterations": runner.max_iterations,
        "save_interval": runner.save_interval,
        "experiment_name": runner.experiment_name,
        "run_name": "",
        "logger": runner.logger,
        "wandb_project": runner.wandb_project,
        "neptune_project": runner.neptune_project,
        "check_for_nan": True,
        "clip_actions": cfg.env.clip_actions,  # read by IsaacLab's RslRlVecEnvWrapper
        "obs_groups": obs_groups,
        "actor": actor,
        "critic": _rsl_rl_model(policy, policy.critic_hidden_dims, normalize),
        "algorithm": _rsl_rl_algorithm(cfg.algorithm),
    }


# --------------------------------------------------------------------------------------------
# rsl_rl -> strl_jax
# --------------------------------------------------------------------------------------------

STRL_JAX_SECTIONS = frozenset(f.name for f in dataclasses.fields(TrainConfig))
POLICY_FIELDS = frozenset(f.name for f in dataclasses.fields(PolicyConfig))
ALGORITHM_FIELDS = frozenset(f.name for f in dataclasses.fields(AlgorithmConfig))
RUNNER_FIELDS = frozenset(f.name for f in dataclasses.fields(RunnerConfig))
MODEL_BLOCKS = ("actor", "critic", "student", "teacher")
# top-level keys that only an rsl_rl / IsaacLab / legged_gym runner config has
RSL_RL_MARKERS = frozenset(
    {
        "num_steps_per_env",
        "max_iterations",
        "empirical_normalization",
        "obs_groups",
        "clip_actions",
        "save_interval",
        "experiment_name",
        "run_name",
        "logger",
        "class_name",
        "runner_class_name",
        "resume",
        "load_run",
        "load_checkpoint",
        "device",
        *MODEL_BLOCKS,
    }
)
# process-level keys JAX takes over and bookkeeping keys: accepted, no effect
NO_EFFECT_KEYS = frozenset(
    {
        "device",  # JAX places the run; runner.num_devices picks how many devices
        "multi_gpu",  # rsl_rl's torch.distributed settings; strl_jax shards over runner.num_devices
        "multi_gpu_cfg",
        "torch_compile_mode",  # JAX always compiles
        "check_for_nan",  # strl_jax checks finiteness every iteration
        "run_name",  # strl_jax names the run folder runs/<task>/<timestamp> or runner.log_dir
        "wandb_tags",
    }
)
ALGORITHM_NO_EFFECT = frozenset({"grad_reduce_bucket_mb", "multi_gpu_cfg"})
# Optional features of rsl_rl: null / false / empty is fine, anything else switches on something
# strl_jax does not have. Value: what to use instead ("" where there is nothing).
OFF_ONLY = {
    "resume": "continue a strl_jax run with --resume RUN_FOLDER, or warm-start with --load CHECKPOINT",
    "upload_model": "checkpoints stay in the run folder",
    "amp_cfg": "algorithm.class_name: APPO with algorithm.amp_motion_files",
    "use_mixed_precision": "",
    "share_cnn_encoders": "",
    "cnn_cfg": "policy.class_name EncoderActorCritic with policy.encoder_class_name: Conv2dHeadModel",
    "state_dependent_std": "",
}
# rsl_rl / IsaacLab env observation group -> the MuJoCo Playground observation key strl_jax reads
ENV_GROUP_KEYS = {"policy": "state", "actor": "state", "critic": "privileged_state"}
# rsl_rl observation set -> strl_jax group
OBS_SET_GROUPS = {"actor": "policy", "policy": "policy", "student": "policy", "critic": "critic"}
DEFAULT_SET_KEYS = {"policy": ["state"], "critic": ["privileged_state"]}  # strl_jax's own default
# how an unset (dataclasses.MISSING) IsaacLab field is dumped: `actor: {}`, `empirical_normalization: {}`
MISSING_MARKERS = (None, {}, "???")


def _off(value: Any) -> bool:
    """A disabled optional feature: null, false, an empty mapping or list."""
    return value is None or value is False or value == {} or value == []


def _short_class(name: Any) -> Any:
    """`rsl_rl.models:MLPModel` and `rsl_rl.models.MLPModel` are `MLPModel` to rsl_rl."""
    if not isinstance(name, str):
        return name
    return name.rsplit(":", 1)[-1].rsplit(".", 1)[-1]


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _unset(value: Any) -> bool:
    return any(value is m or (type(value) is type(m) and value == m) for m in MISSING_MARKERS)


def is_rsl_rl_config(data: Any) -> bool:
    """Whether a config mapping is rsl_rl-shaped rather than strl_jax's own sections.

    strl_jax files hold only `env`, `policy`, `algorithm`, `runner` and `seed`; rsl_rl runner
    configs put runner keys (`num_steps_per_env`, `class_name: OnPolicyRunner`, ...) or `actor` /
    `critic` model blocks at the top, and legged_gym's nest a `runner` with `policy_class_name`.
    """
    if not isinstance(data, dict):
        return False
    if set(data) & RSL_RL_MARKERS:
        return True
    runner = data.get("runner")
    return isinstance(runner, dict) and bool({"policy_class_name", "algorithm_class_name"} & set(runner))


def _flatten_legged_gym(data: dict) -> tuple[dict, dict[str, str]]:
    """legged_gym's `train_cfg` (`runner: {policy_class_name, ...}`, `runner_class_name`) in the
    flat rsl_rl form (runner keys at the top, class names inside their blocks), with the path each
    moved key had, so that errors name the key as the file wrote it."""
    runner = data.get("runner")
    if not isinstance(runner, dict) or not ({"policy_class_name", "algorithm_class_name"} & set(runner)):
        return data, {}
    out = {k: v for k, v in data.items() if k not in ("runner", "runner_class_name")}
    origin: dict[str, str] = {}
    if "runner_class_name" in data:
        out["class_name"] = data["runner_class_name"]
        origin["class_name"] = "runner_class_name"
    blocks = {"policy_class_name": "policy", "algorithm_class_name": "algorithm"}
    renames = {"checkpoint": "load_checkpoint", "resume_path": "load_run"}
    for key, value in runner.items():
        if key in blocks:
            out[blocks[key]] = {**(out.get(blocks[key]) or {}), "class_name": value}
            origin[f"{blocks[key]}.class_name"] = f"runner.{key}"
        elif key in ("checkpoint", "load_run") and value == -1:
            continue  # legged_gym's "the newest": only read when resuming
        else:
            out[renames.get(key, key)] = value
            origin[renames.get(key, key)] = f"runner.{key}"
    return out, origin


def _with_origin(problem: str, origin: dict[str, str]) -> str:
    """A problem message with its key path as the file wrote it."""
    path = problem.split(":", 1)[0]
    for moved, original in origin.items():
        if path == moved or path.startswith(moved + "."):
            return original + problem[len(moved) :]
    return problem


def _map_logger(value: Any, path: str) -> tuple[dict, list[str]]:
    """`logger` as a name, or rsl_rl 5.x's `{class_name: WandbLogWriter, project_name: ...}`."""
    names = {"tensorboard": "tensorboard", "wandb": "wandb", "neptune": "neptune"}
    writers = {"WandbLogWriter": "wandb", "NeptuneLogWriter": "neptune"}
    if isinstance(value, str) and value in names:
        return {"logger": value}, []
    if isinstance(value, dict) and _short_class(value.get("class_name")) in writers:
        name = writers[_short_class(value["class_name"])]
        out: dict[str, Any] = {"logger": name}
        extra = sorted(set(value) - {"class_name", "project_name"})
        if value.get("project_name") is not None:
            out[f"{name}_project"] = value["project_name"]
        return out, [f"{_join(path, k)}: unknown log writer setting" for k in extra]
    return {}, [
        f"{path}: {value!r} is not a logger strl_jax has; valid choices: "
        f"{sorted(names)} or {{class_name: {'|'.join(writers)}, project_name: ...}}"
    ]


def _env_keys(groups: Any, where: str) -> tuple[list[str] | None, list[str]]:
    """rsl_rl env group names as the Playground observation keys strl_jax reads."""
    if isinstance(groups, str):
        groups = [groups]
    if not isinstance(groups, list | tuple) or not groups or not all(isinstance(g, str) for g in groups):
        return None, [f"{where}: must be a non-empty list of observation group names, got {groups!r}"]
    return [ENV_GROUP_KEYS.get(g, g) for g in groups], []


def _map_obs_groups(value: Any, path: str) -> tuple[dict, list[str]]:
    """rsl_rl's `obs_groups` ({observation set: [env groups]}) as strl_jax's `env.obs_groups`
    ({group: [Playground observation keys]}), plus the teacher's group for Distillation.

    IsaacLab's env group `policy` (mjlab's `actor`) is Playground's `state` and `critic` is
    `privileged_state`; other names are taken as Playground observation keys. Sets that read what
    strl_jax's groups read by default are left out, so Brax tasks (one observation array) still work.
    """
    if _off(value):
        return {}, []
    if not isinstance(value, dict):
        return {}, [f"{path}: must be a mapping {{observation set: [groups]}}, got {value!r}"]
    groups: dict[str, list[str]] = {}
    out: dict[str, Any] = {}
    problems: list[str] = []
    for obs_set, env_groups in value.items():
        where = _join(path, str(obs_set))
        keys, bad = _env_keys(env_groups, where)
        problems += bad
        if keys is None:
            continue
        if obs_set == "teacher":
            named = {tuple(v): k for k, v in DEFAULT_SET_KEYS.items()}
            group = named.get(tuple(keys), "teacher")
            if group == "teacher":
                groups["teacher"] = keys
            out["algorithm"] = {"teacher_policy": {"obs_group": group}}
        elif obs_set == "rnd_state":
            continue  # `_map_rnd_state`, where RND is on
        elif obs_set in OBS_SET_GROUPS:
            group = OBS_SET_GROUPS[obs_set]
            if keys != DEFAULT_SET_KEYS[group]:
                groups[group] = keys
        else:
            problems.append(
                f"{where}: observation set {obs_set!r} feeds no strl_jax group; strl_jax's sets: "
                f"{sorted(OBS_SET_GROUPS) + ['rnd_state', 'teacher']}"
            )
    if groups:
        out["env"] = {"obs_groups": groups}
    return out, problems


def _is_default_range(value: Any) -> bool:
    """Whether `std_range` is rsl_rl's default (1e-6, 1e6), which clamps nothing in practice."""
    numbers = isinstance(value, list | tuple) and all(isinstance(v, int | float) for v in value)
    return numbers and [float(v) for v in value] == list(DEFAULT_STD_RANGE)


def _distribution(cfg: Any, path: str) -> tuple[dict, list[str]]:
    """rsl_rl 5.x `distribution_cfg` -> init_noise_std / noise_std_type (a learned Gaussian only)."""
    if not isinstance(cfg, dict):
        return {}, [f"{path}: must be a mapping with class_name {GAUSSIAN}, got {cfg!r}"]
    out: dict[str, Any] = {}
    problems = []
    for key, value in cfg.items():
        where = _join(path, key)
        if key == "class_name":
            if _short_class(value) != GAUSSIAN:
                problems.append(
                    f"{where}: {value!r} is not a distribution strl_jax has; valid choices: [{GAUSSIAN}]"
                )
        elif key == "init_std":
            out["init_noise_std"] = value
        elif key == "std_type":
            out["noise_std_type"] = value
        elif key == "std_range":
            if value is not None and not _is_default_range(value):
                problems.append(
                    f"{where}: a clamped std range is not supported; the nearest is algorithm.clip_min_std "
                    "(a floor on the std, applied after each update)"
                )
        elif key == "learn_std":
            if value is not True:
                problems.append(f"{where}: a fixed (not learned) std is not supported")
        else:
            problems.append(f"{where}: unknown distribution setting")
    return out, problems


def _map_model(block: Any, path: str, with_distribution: bool) -> tuple[dict, list[str]]:
    """One rsl_rl 5.x model block (`MLPModel` / `RNNModel`) as neutral fields: `recurrent`,
    `hidden_dims`, `activation`, `normalize`, `rnn` (type, size, layers) and the actor's std."""
    if not isinstance(block, dict):
        return {}, [f"{path}: must be a mapping, got {block!r}"]
    name = _short_class(block.get("class_name", "MLPModel"))
    if name not in MODEL_CLASSES:
        hint = OFF_ONLY["cnn_cfg"] if name == "CNNModel" else f"valid choices: {sorted(MODEL_CLASSES)}"
        return {}, [f"{_join(path, 'class_name')}: {name!r} is not a model strl_jax has; {hint}"]
    recurrent = MODEL_CLASSES[name]
    out: dict[str, Any] = {"recurrent": recurrent}
    rnn: dict[str, Any] = {}
    legacy: dict[str, Any] = {}  # IsaacLab's deprecated stochastic / init_noise_std / noise_std_type
    problems: list[str] = []
    for key, value in block.items():
        where = _join(path, key)
        if key == "class_name":
            continue
        if key == "hidden_dims":
            out["hidden_dims"] = value
        elif key == "activation":
            out["activation"] = value
        elif key == "obs_normalization":
            out["normalize"] = value
        elif key in ("rnn_type", "rnn_hidden_dim", "rnn_num_layers"):
            if recurrent:
                rnn[key] = value
        elif key == "distribution_cfg":
            if value is None:
                out["deterministic"] = True
            elif not with_distribution:
                problems.append(f"{where}: the critic outputs a value, not a distribution; use null")
            else:
                std, bad = _distribution(value, where)
                out |= std
                problems += bad
        elif key in ("stochastic", "init_noise_std", "noise_std_type"):
            legacy[key] = value
        elif key in OFF_ONLY:
            if not _off(value):
                problems.append(_off_problem(where, key))
        else:
            problems.append(f"{where}: unknown {name} setting")
    problems += _legacy_std(out, legacy, path, with_distribution)
    if recurrent:
        out["rnn"] = rnn
    return out, problems


def _legacy_std(model: dict, legacy: dict, path: str, with_distribution: bool) -> list[str]:
    """IsaacLab's pre-`distribution_cfg` fields (`stochastic`, `init_noise_std`, `noise_std_type`)
    where `distribution_cfg` did not set the std; updates `model` in place."""
    deterministic = model.pop("deterministic", False)
    if not with_distribution:
        return (
            [f"{path}.stochastic: the critic outputs a value; use false"] if legacy.get("stochastic") else []
        )
    if "init_noise_std" in model:
        return []
    if legacy.get("stochastic") is False or (deterministic and not legacy.get("stochastic")):
        return [
            f"{path}: a deterministic actor cannot be trained by PPO; give it a {GAUSSIAN} distribution_cfg"
        ]
    model |= {k: legacy[k] for k in ("init_noise_std", "noise_std_type") if k in legacy}
    return []


def _off_problem(where: str, key: str) -> str:
    hint = OFF_ONLY[key]
    return f"{where}: strl_jax does not have this{'; ' + hint if hint else ''} (null / false is accepted)"


def _same(values: dict[str, Any], what: str) -> tuple[Any, list[str]]:
    """One value where strl_jax has one field for what rsl_rl sets per model."""
    distinct = {repr(v) for v in values.values()}
    if len(distinct) > 1:
        listed = ", ".join(f"{k}={v!r}" for k, v in values.items())
        return None, [f"{listed}: strl_jax has one {what} for actor and critic; make them equal"]
    return next(iter(values.values())), []


RNN_FIELDS = {"rnn_type": "rnn_type", "rnn_hidden_dim": "rnn_hidden_size", "rnn_num_layers": "rnn_num_layers"}
CORES = {"MLPModel": "ActorCritic", "RNNModel": "ActorCriticRecurrent"}
SHARED_WHAT = {
    "class_name": "core (MLPModel or RNNModel)",
    "empirical_normalization": "observation normalisation (runner.empirical_normalization)",
}


def _combine_models(actor: dict, critic: dict | None, paths: tuple[str, str]) -> tuple[dict, list[str]]:
    """An actor and a critic block as strl_jax's `policy` section and normalisation flag: what
    strl_jax has once for both (core, activation, memory, normalisation) must agree."""
    models = {paths[0]: actor} | ({paths[1]: critic} if critic is not None else {})
    shared = {
        "class_name": {
            f"{p}.class_name": "RNNModel" if m["recurrent"] else "MLPModel"
            for p, m in models.items()
            if "recurrent" in m
        },
        "activation": {f"{p}.activation": m["activation"] for p, m in models.items() if "activation" in m},
        **{
            dest: {f"{p}.{key}": m["rnn"][key] for p, m in models.items() if key in m.get("rnn", {})}
            for key, dest in RNN_FIELDS.items()
        },
        "empirical_normalization": {
            f"{p}.obs_normalization": m["normalize"] for p, m in models.items() if "normalize" in m
        },
    }
    policy: dict[str, Any] = {}
    runner: dict[str, Any] = {}
    problems: list[str] = []
    for field, given in shared.items():
        value, bad = _same(given, SHARED_WHAT.get(field, field)) if given else (None, [])
        problems += bad
        if value is None:
            continue
        if field == "class_name":
            policy[field] = CORES[value]
        elif field == "empirical_normalization":
            runner[field] = value
        else:
            policy[field] = value
    if "hidden_dims" in actor:
        policy["actor_hidden_dims"] = actor["hidden_dims"]
    if critic is not None and "hidden_dims" in critic:
        policy["critic_hidden_dims"] = critic["hidden_dims"]
    policy |= {k: actor[k] for k in ("init_noise_std", "noise_std_type") if k in actor}
    return {"policy": policy} | ({"runner": runner} if runner else {}), problems


def _merge(base: dict, update: dict) -> dict:
    """Nested union of two partial strl_jax mappings (`update` wins)."""
    out = dict(base)
    for key, value in update.items():
        both = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = _merge(out[key], value) if both else value
    return out


def _map_policy_block(block: Any, path: str) -> tuple[dict, list[str]]:
    """IsaacLab's / rsl_rl <= 3's `policy:` block (ActorCritic, ActorCriticRecurrent, StudentTeacher*);
    strl_jax's own `policy.*` names (st_rl's) pass through."""
    if not isinstance(block, dict):
        return {}, [f"{path}: must be a mapping, got {block!r}"]
    policy: dict[str, Any] = {}
    out: dict[str, Any] = {}
    normalize: dict[str, Any] = {}
    problems: list[str] = []
    renames = {"rnn_hidden_dim": "rnn_hidden_size", "student_hidden_dims": "actor_hidden_dims"}
    for key, value in block.items():
        where = _join(path, key)
        if key == "class_name":
            name = _short_class(value)
            if name in OLD_POLICY_CLASSES:
                policy["class_name"] = OLD_POLICY_CLASSES[name]
            elif name in POLICY_CLASSES:
                policy["class_name"] = name
            else:
                valid = sorted(set(OLD_POLICY_CLASSES) | set(POLICY_CLASSES))
                problems.append(
                    f"{where}: {value!r} is not a policy class strl_jax has; valid choices: {valid}"
                )
        elif key in ("actor_obs_normalization", "critic_obs_normalization", "student_obs_normalization"):
            normalize[where] = value
        elif key in ("teacher_obs_normalization", "teacher_hidden_dims"):
            continue  # the teacher network is the teacher run's own (algorithm.teacher_policy.checkpoint)
        elif key == "teacher_recurrent":
            teacher = "ActorCriticRecurrent" if value else "ActorCritic"
            out = _merge(out, {"algorithm": {"teacher_policy": {"class_name": teacher}}})
        elif key in OFF_ONLY:
            if not _off(value):
                problems.append(_off_problem(where, key))
        elif key in renames:
            policy[renames[key]] = value
        elif key in POLICY_FIELDS:
            policy[key] = value
        else:
            problems.append(f"{where}: unknown policy setting")
    if normalize:
        value, bad = _same(normalize, "observation normalisation (runner.empirical_normalization)")
        problems += bad
        if value is not None:
            out = _merge(out, {"runner": {"empirical_normalization": value}})
    return _merge(out, {"policy": policy}), problems


def _map_algorithm(block: Any, path: str) -> tuple[dict, list[str]]:
    """rsl_rl's PPO / Distillation block; strl_jax's other algorithm names and fields pass through."""
    if not isinstance(block, dict):
        return {}, [f"{path}: must be a mapping, got {block!r}"]
    out: dict[str, Any] = {}
    problems: list[str] = []
    for key, value in block.items():
        where = _join(path, key)
        if key == "class_name":
            name = _short_class(value)
            if name in ALGORITHMS:
                out["class_name"] = name
            else:
                problems.append(
                    f"{where}: {value!r} is not an algorithm strl_jax has; valid choices: {list(ALGORITHMS)}"
                )
        elif key in OFF_ONLY:
            if not _off(value):
                problems.append(_off_problem(where, key))
        elif key in ALGORITHM_NO_EFFECT:
            continue
        elif key == "rnd_cfg":
            if not _off(value):
                out[key] = value  # checked by agents.rnd
        elif key == "symmetry_cfg":
            if not _off(value):
                out[key] = value  # checked by agents.symmetry; the function must be a jnp one
        elif key == "max_grad_norm" and isinstance(value, float) and math.isinf(value):
            out[key] = None  # clipping at an infinite norm is no clipping
        elif key in ALGORITHM_FIELDS:
            out[key] = value
        else:
            problems.append(f"{where}: unknown algorithm setting")
    if "desired_kl" in out and out["desired_kl"] is None:
        del out["desired_kl"]  # rsl_rl adapts the learning rate only with a desired_kl
        out["schedule"] = "fixed"
    return {"algorithm": out}, problems


def _map_rnd_state(data: dict, out: dict) -> tuple[dict, list[str]]:
    """rsl_rl's `obs_groups.rnd_state` as `algorithm.rnd_cfg.obs_group` where RND is on: strl_jax's
    `policy` or `critic` group when it reads the same observations, else a new env group
    `rnd_state` (unset: `policy`, rsl_rl's fallback)."""
    rnd = out.get("algorithm", {}).get("rnd_cfg")
    sets = data.get("obs_groups")
    if rnd is None or not isinstance(sets, dict) or "rnd_state" not in sets:
        return out, []
    keys, problems = _env_keys(sets["rnd_state"], "obs_groups.rnd_state")
    if keys is None:
        return out, problems
    groups = {**DEFAULT_SET_KEYS, **out.get("env", {}).get("obs_groups", {})}
    group = next((g for g in ("policy", "critic") if groups[g] == keys), "rnd_state")
    update: dict[str, Any] = {"algorithm": {"rnd_cfg": {**rnd, "obs_group": group}}}
    if group == "rnd_state":
        update["env"] = {"obs_groups": {"rnd_state": keys}}
    return _merge(out, update), []


def _map_teacher(block: Any) -> tuple[dict, list[str]]:
    """rsl_rl 5.x's `teacher` block: strl_jax builds the teacher from its run
    (`algorithm.teacher_policy.checkpoint`), so only whether it is recurrent is read."""
    name = _short_class(block.get("class_name", "MLPModel")) if isinstance(block, dict) else block
    if name not in MODEL_CLASSES:
        return {}, [
            f"teacher.class_name: {name!r} is not a model strl_jax has; valid: {sorted(MODEL_CLASSES)}"
        ]
    teacher = "ActorCriticRecurrent" if MODEL_CLASSES[name] else "ActorCritic"
    return {"algorithm": {"teacher_policy": {"class_name": teacher}}}, []


def _map_models(models: dict[str, Any]) -> tuple[dict, list[str]]:
    """rsl_rl 5.x model blocks: `actor` + `critic` (PPO) or `student` + `teacher` (Distillation)."""
    mapped: dict[str, dict] = {}
    problems: list[str] = []
    for name in ("actor", "critic", "student"):
        if name in models:
            mapped[name], bad = _map_model(models[name], name, with_distribution=name != "critic")
            problems += bad
    out: dict[str, Any] = {}
    if "critic" in mapped and "actor" not in mapped:
        problems.append("critic: an rsl_rl config with a critic block needs an actor block")
    if "actor" in mapped:
        combined, bad = _combine_models(mapped["actor"], mapped.get("critic"), ("actor", "critic"))
        out, problems = _merge(out, combined), problems + bad
    if "student" in mapped:
        combined, bad = _combine_models(mapped["student"], None, ("student", ""))
        out, problems = _merge(out, combined), problems + bad
    if "teacher" in models:
        teacher, bad = _map_teacher(models["teacher"])
        out, problems = _merge(out, teacher), problems + bad
    if {"actor", "critic"} & set(models) and {"student", "teacher"} & set(models):
        problems.append("actor/critic and student/teacher: give one pair (PPO or Distillation), not both")
    return out, problems


def _map_top_level(key: str, value: Any) -> tuple[dict, list[str]]:
    """One top-level rsl_rl key other than the network and algorithm blocks."""
    if key == "seed":
        return {"seed": value}, []
    if key == "logger":
        mapped, problems = _map_logger(value, key)
        return {"runner": mapped}, problems
    if key == "clip_actions":
        return {"env": {"clip_actions": value}}, []
    if key == "obs_groups":
        return _map_obs_groups(value, key)
    if key == "class_name":
        if _short_class(value) in RUNNER_CLASSES:
            return {}, []
        return {}, [
            f"class_name: {value!r} is not a runner strl_jax has; valid choices: {list(RUNNER_CLASSES)}"
        ]
    if key in LOAD_DEFAULTS:
        if value is None or value == LOAD_DEFAULTS[key]:
            return {}, []
        return {}, [f"{key}: {value!r} loads a checkpoint; use --load CHECKPOINT (or --resume RUN_FOLDER)"]
    if key in NO_EFFECT_KEYS:
        return {}, []
    if key in OFF_ONLY:
        return {}, ([] if _off(value) else [_off_problem(key, key)])
    if key in RUNNER_FIELDS:
        return {"runner": {key: value}}, []
    if key in STRL_JAX_SECTIONS:
        return {}, [
            f"{key}: an strl_jax section inside an rsl_rl config; give it in a separate --config file"
        ]
    return {}, [f"{key}: unknown rsl_rl runner setting"]


def from_rsl_rl_config(data: dict) -> dict:
    """An rsl_rl / IsaacLab / legged_gym runner config as strl_jax's nested mapping (the sections
    `deep_merge` and `config_from_dict` take). Only keys the file sets are mapped, so a task preset
    underneath keeps the rest, except `RSL_RL_UPDATE`: the file asks for rsl_rl's update. Every
    key that strl_jax cannot honour is named, with its path, in one `ConfigError`."""
    data, origin = _flatten_legged_gym(data)
    out: dict[str, Any] = {}
    problems: list[str] = []
    models = {k: data[k] for k in MODEL_BLOCKS if k in data and not _unset(data[k])}
    # `logger: {class_name, project_name}` last: its project wins over `wandb_project`
    for key, value in sorted(data.items(), key=lambda item: item[0] == "logger"):
        if key in MODEL_BLOCKS or key == "empirical_normalization":
            continue
        if key == "policy":
            if _unset(value):
                continue
            if models:
                problems.append("policy: give either a policy block or actor/critic blocks, not both")
                continue
            mapped, bad = _map_policy_block(value, key)
        elif key == "algorithm":
            mapped, bad = _map_algorithm(value, key)
        else:
            mapped, bad = _map_top_level(key, value)
        out, problems = _merge(out, mapped), problems + bad
    mapped, bad = _map_models(models)
    out, problems = _merge(out, mapped), problems + bad
    out, bad = _map_rnd_state(data, out)
    problems += bad
    out = _merge({"algorithm": dict(RSL_RL_UPDATE)}, out)  # the file's own values win
    top_norm = data.get("empirical_normalization")
    if not _unset(top_norm) and "empirical_normalization" not in out.get("runner", {}):
        out = _merge(out, {"runner": {"empirical_normalization": top_norm}})
    if problems:
        listed = "\n  ".join(_with_origin(p, origin) for p in problems)
        raise ConfigError(f"rsl_rl config: {len(problems)} setting(s) strl_jax cannot use:\n  {listed}")
    return out
