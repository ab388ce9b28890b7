"""rsl_rl's model blocks as strl_jax's `policy` section: the 5.x `actor` / `critic` / `student` /
`teacher` blocks (`MLPModel`, `RNNModel`, `distribution_cfg`) and the IsaacLab / rsl_rl <= 3
`policy:` block, with the helpers the rest of the reading (`configs.from_rsl_rl`) shares.

Each function returns a partial strl_jax mapping and the problems it found, each naming the key
by its path in the file; `from_rsl_rl_config` raises them all at once.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from strl_jax.configs.schema import PolicyConfig
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
GAUSSIAN = "GaussianDistribution"
DEFAULT_STD_RANGE = (1e-6, 1e6)  # rsl_rl GaussianDistribution's std_range default
POLICY_FIELDS = frozenset(f.name for f in dataclasses.fields(PolicyConfig))
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


def is_off(value: Any) -> bool:
    """A disabled optional feature: null, false, an empty mapping or list."""
    return value is None or value is False or value == {} or value == []


def short_class(name: Any) -> Any:
    """`rsl_rl.models:MLPModel` and `rsl_rl.models.MLPModel` are `MLPModel` to rsl_rl."""
    if not isinstance(name, str):
        return name
    return name.rsplit(":", 1)[-1].rsplit(".", 1)[-1]


def join_path(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def merge(base: dict, update: dict) -> dict:
    """Nested union of two partial strl_jax mappings (`update` wins)."""
    out = dict(base)
    for key, value in update.items():
        both = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = merge(out[key], value) if both else value
    return out


def off_problem(where: str, key: str) -> str:
    hint = OFF_ONLY[key]
    return f"{where}: strl_jax does not have this{'; ' + hint if hint else ''} (null / false is accepted)"


def _same(values: dict[str, Any], what: str) -> tuple[Any, list[str]]:
    """One value where strl_jax has one field for what rsl_rl sets per model."""
    distinct = {repr(v) for v in values.values()}
    if len(distinct) > 1:
        listed = ", ".join(f"{k}={v!r}" for k, v in values.items())
        return None, [f"{listed}: strl_jax has one {what} for actor and critic; make them equal"]
    return next(iter(values.values())), []


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
        where = join_path(path, key)
        if key == "class_name":
            if short_class(value) != GAUSSIAN:
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
    name = short_class(block.get("class_name", "MLPModel"))
    if name not in MODEL_CLASSES:
        hint = OFF_ONLY["cnn_cfg"] if name == "CNNModel" else f"valid choices: {sorted(MODEL_CLASSES)}"
        return {}, [f"{join_path(path, 'class_name')}: {name!r} is not a model strl_jax has; {hint}"]
    recurrent = MODEL_CLASSES[name]
    out: dict[str, Any] = {"recurrent": recurrent}
    rnn: dict[str, Any] = {}
    legacy: dict[str, Any] = {}  # IsaacLab's deprecated stochastic / init_noise_std / noise_std_type
    problems: list[str] = []
    for key, value in block.items():
        where = join_path(path, key)
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
            if not is_off(value):
                problems.append(off_problem(where, key))
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


def map_policy_block(block: Any, path: str) -> tuple[dict, list[str]]:
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
        where = join_path(path, key)
        if key == "class_name":
            name = short_class(value)
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
            out = merge(out, {"algorithm": {"teacher_policy": {"class_name": teacher}}})
        elif key in OFF_ONLY:
            if not is_off(value):
                problems.append(off_problem(where, key))
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
            out = merge(out, {"runner": {"empirical_normalization": value}})
    return merge(out, {"policy": policy}), problems


def _map_teacher(block: Any) -> tuple[dict, list[str]]:
    """rsl_rl 5.x's `teacher` block: strl_jax builds the teacher from its run
    (`algorithm.teacher_policy.checkpoint`), so only whether it is recurrent is read."""
    name = short_class(block.get("class_name", "MLPModel")) if isinstance(block, dict) else block
    if name not in MODEL_CLASSES:
        return {}, [
            f"teacher.class_name: {name!r} is not a model strl_jax has; valid: {sorted(MODEL_CLASSES)}"
        ]
    teacher = "ActorCriticRecurrent" if MODEL_CLASSES[name] else "ActorCritic"
    return {"algorithm": {"teacher_policy": {"class_name": teacher}}}, []


def map_models(models: dict[str, Any]) -> tuple[dict, list[str]]:
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
        out, problems = merge(out, combined), problems + bad
    if "student" in mapped:
        combined, bad = _combine_models(mapped["student"], None, ("student", ""))
        out, problems = merge(out, combined), problems + bad
    if "teacher" in models:
        teacher, bad = _map_teacher(models["teacher"])
        out, problems = merge(out, teacher), problems + bad
    if {"actor", "critic"} & set(models) and {"student", "teacher"} & set(models):
        problems.append("actor/critic and student/teacher: give one pair (PPO or Distillation), not both")
    return out, problems
