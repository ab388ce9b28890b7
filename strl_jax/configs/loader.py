"""Build a `TrainConfig` from presets, YAML files and dotted `key.sub=value` overrides.

Every value is checked against the dataclass field types so that a typo or a wrong type is a
`ConfigError` naming the key and the valid choices, never a silent default.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from strl_jax.agents.algorithms import (
    ALGORITHMS,
    PARTS,
    active_parts,
    algorithm_spec,
    check_algorithm_config,
    parts_with_actions,
)
from strl_jax.buffers.gae import ADVANTAGE_ESTIMATORS
from strl_jax.buffers.rollout_dataset import pretrain_settings
from strl_jax.configs.from_rsl_rl import from_rsl_rl_config, is_rsl_rl_config
from strl_jax.configs.schema import TrainConfig
from strl_jax.configs.sweep import normalize_sweep, sweep_settings
from strl_jax.envs.brax_env import available_backends
from strl_jax.envs.entry_points import is_entry_point
from strl_jax.envs.tasks import task_family
from strl_jax.errors import ConfigError
from strl_jax.networks.encoder_settings import check_encoder_settings
from strl_jax.networks.mlp import ACTIVATIONS
from strl_jax.networks.policy_classes import check_action_distribution, check_policy_stages, policy_class
from strl_jax.user_functions import check_function_spec

PRESET_PACKAGE = "strl_jax.presets"  # the top-level configs/ folder (pyproject.toml maps it)
RECIPES = "recipes"  # configs/recipes/: settings for a family of tasks, named by `extends`
EXTENDS = "extends"


def available_presets() -> list[str]:
    """Names of the YAML presets shipped with the package."""
    folder = resources.files(PRESET_PACKAGE)
    return sorted(p.name[: -len(".yaml")] for p in folder.iterdir() if p.name.endswith(".yaml"))


def available_recipes() -> list[str]:
    """Names of the shipped recipes (`configs/recipes/`): settings without a task, written for a
    family of tasks, that a preset or a `--config` file names in its `extends` list."""
    folder = resources.files(PRESET_PACKAGE) / RECIPES
    return sorted(
        f"{RECIPES}/{p.name[: -len('.yaml')]}" for p in folder.iterdir() if p.name.endswith(".yaml")
    )


def load_preset(name: str) -> dict:
    """The mapping of one preset or recipe, with what it `extends` merged under it."""
    return load_named(name, ())


def load_named(name: str, chain: tuple[str, ...]) -> dict:
    """A preset or recipe by name; `chain`: the names whose `extends` led here (a cycle is an error)."""
    if name not in available_presets() and name not in available_recipes():
        raise ConfigError(
            f"no preset or recipe named {name!r}; recipes: {available_recipes()}; "
            f"presets: {available_presets()}"
        )
    if name in chain:
        raise ConfigError(f"presets extend each other in a cycle: {' -> '.join([*chain, name])}")
    data = yaml.safe_load((resources.files(PRESET_PACKAGE) / f"{name}.yaml").read_text()) or {}
    return with_extends(data, f"preset {name!r}", (*chain, name))


def with_extends(data: dict, where: str, chain: tuple[str, ...] = ()) -> dict:
    """`data` over the presets and recipes its `extends` names, merged in order: one recipe
    (say `recipes/legged_cpu`) serves every task it suits, and a preset keeps only what is its own."""
    if EXTENDS not in data:
        return data
    names = data[EXTENDS]
    names = [names] if isinstance(names, str) else names
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ConfigError(
            f"{where}: `extends` must be a preset or recipe name or a list of them, got {data[EXTENDS]!r}; "
            f"recipes: {available_recipes()}"
        )
    base: dict = {}
    for name in names:
        base = deep_merge(base, load_named(name, chain))
    return deep_merge(base, {k: v for k, v in data.items() if k != EXTENDS})


class ConfigYamlLoader(yaml.SafeLoader):
    """PyYAML's safe loader that also reads `!!python/tuple` as a list: IsaacLab and mjlab dump
    tuple fields of their agent configs (`hidden_dims`, `obs_groups`) with that tag. A key given
    twice in one mapping is an error: PyYAML would keep the last value and say nothing."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        first_line: dict = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<:` merges may repeat keys by design
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                line = first_line.setdefault(key, key_node.start_mark.line)
            except TypeError:  # an unhashable key: the base class reports it
                continue
            if line != key_node.start_mark.line:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"the key {key!r} is given twice in one mapping (first on line {line + 1}), and only "
                    "one value can count; remove one",
                    key_node.start_mark,
                )
        return super().construct_mapping(node, deep=deep)


ConfigYamlLoader.add_constructor(
    "tag:yaml.org,2002:python/tuple", lambda loader, node: loader.construct_sequence(node)
)


def load_yaml_file(path: str | Path) -> dict:
    """A YAML config file (or JSON, for a `.json` name) as a mapping, with a clear error if it is
    missing, unreadable or not a mapping."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist")
    text = path.read_text()
    if path.suffix.lower() == ".json":
        try:
            data = json.loads(text) if text.strip() else {}
        except json.JSONDecodeError as err:
            raise ConfigError(
                f"config file {path}:{err.lineno}:{err.colno}: not valid JSON: {err.msg}"
            ) from None
    else:
        try:
            data = yaml.load(text, Loader=ConfigYamlLoader) or {}
        except yaml.YAMLError as err:
            raise ConfigError(f"config file {describe_yaml_error(str(path), err)}") from None
    if not isinstance(data, dict):
        raise ConfigError(
            f"config file {str(path)!r} must hold a mapping of sections, got {type(data).__name__}"
        )
    return data


def load_config_file(path: str | Path) -> dict:
    """A `--config` file as strl_jax sections: an rsl_rl / IsaacLab runner config (agent.yaml,
    train_cfg) is translated by `from_rsl_rl_config`; strl_jax's own files pass with what their
    `extends` names (presets, recipes) merged under them."""
    data = load_yaml_file(path)
    if not is_rsl_rl_config(data):
        return with_extends(data, f"config file {str(path)!r}")
    try:
        return from_rsl_rl_config(data)
    except ConfigError as err:
        raise ConfigError(f"config file {str(path)!r}: {err}") from None


def describe_yaml_error(path: str, err: yaml.YAMLError) -> str:
    """`path:line:column: what PyYAML found` (1-based, as editors count), for a file that is not YAML."""
    mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else path
    problem = " ".join(str(x) for x in (getattr(err, "context", None), getattr(err, "problem", None)) if x)
    return f"{where}: not valid YAML: {problem or str(err).splitlines()[0]}"


def parse_override(text: str) -> tuple[str, Any]:
    """Split `a.b=value`, reading the value as YAML (so `1e-3`, `[64, 64]`, `null` work)."""
    if "=" not in text:
        raise ConfigError(f"override {text!r} must look like key.sub=value")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key:
        raise ConfigError(f"override {text!r} has an empty key")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as err:
        raise ConfigError(f"cannot read the value of override {text!r}: {err}") from None
    return key, value


def set_dotted(tree: dict, key: str, value: Any) -> None:
    """Write `value` at dotted `key` into nested dicts, creating levels as needed."""
    parts = key.split(".")
    node = tree
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    node[parts[-1]] = value


def deep_merge(base: dict, update: dict) -> dict:
    """Recursively merge `update` into a copy of `base`."""
    out = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _coerce(value: Any, annotation: Any, where: str) -> Any:
    """Check `value` against a field annotation, allowing only lossless conversions."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        errors = []
        for candidate in inner:
            try:
                return _coerce(value, candidate, where)
            except ConfigError as err:
                errors.append(str(err))
        raise ConfigError(errors[0])
    if annotation is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{where} must be true or false, got {value!r}")
    if annotation is int:
        if isinstance(value, bool) or not isinstance(value, int | float) or int(value) != value:
            raise ConfigError(f"{where} must be an integer, got {value!r}")
        return int(value)
    if annotation is float:
        if isinstance(value, str):  # YAML 1.1 reads "3e-4" (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where} must be a number, got {value!r}")
        return float(value)
    if annotation is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where} must be a string, got {value!r}")
        return value
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{where} must be a list, got {value!r}")
        item_type = args[0] if args else Any
        return tuple(_coerce(v, item_type, f"{where}[{i}]") for i, v in enumerate(value))
    if annotation is dict or origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where} must be a mapping, got {value!r}")
        return dict(value)
    if annotation is Any:
        return value
    raise ConfigError(f"{where}: unsupported field type {annotation!r}")


def _build(cls: type, data: dict, where: str) -> Any:
    """Instantiate dataclass `cls` from a mapping, recursing into nested dataclasses."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where or 'config'} must be a mapping, got {data!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        prefix = f"{where}." if where else ""
        raise ConfigError(
            f"unknown config key {prefix}{unknown[0]!r}; valid keys{' in ' + where if where else ''}: "
            f"{sorted(fields)}"
        )
    kwargs = {}
    for name, value in data.items():
        key = f"{where}.{name}" if where else name
        hint = hints[name]
        if dataclasses.is_dataclass(hint):
            kwargs[name] = _build(hint, value, key)
        else:
            kwargs[name] = _coerce(value, hint, key)
    return cls(**kwargs)


def config_from_dict(data: dict) -> TrainConfig:
    """Validate a nested mapping into a `TrainConfig`."""
    if data.get("sweep"):
        data = {**data, "sweep": normalize_sweep(data["sweep"])}
    return _build(TrainConfig, data, "")


def config_to_dict(cfg: Any) -> dict:
    """A plain mapping (tuples as lists) that YAML can write and `config_from_dict` can read."""

    def plain(x: Any) -> Any:
        if dataclasses.is_dataclass(x):
            return {f.name: plain(getattr(x, f.name)) for f in dataclasses.fields(x)}
        if isinstance(x, tuple | list):
            return [plain(v) for v in x]
        if isinstance(x, dict):
            return {k: plain(v) for k, v in x.items()}
        return x

    return plain(cfg)


def resolve_config(
    task: str | None = None,
    config_files: list[str] | None = None,
    overrides: list[str] | None = None,
) -> TrainConfig:
    """Preset for `task` (if one exists) <- config files <- dotted overrides, then validate.

    A config file is strl_jax's YAML or an rsl_rl / IsaacLab runner config (YAML or JSON).

    A task without a preset (an entry point `package.module:Name` never has one) starts from the
    defaults with `env.task` set to it.
    """
    data: dict = {}
    if task is not None:
        preset = not is_entry_point(task) and task in available_presets()
        data = load_preset(task) if preset else {"env": {"task": task}}
    for path in config_files or []:
        data = deep_merge(data, load_config_file(path))
    for text in overrides or []:
        key, value = parse_override(text)
        set_dotted(data, key, value)
    cfg = config_from_dict(data)
    validate_config(cfg)
    return cfg


def check_deterministic_policy(cfg: TrainConfig) -> None:
    """A policy that acts with its mean (st_rl's DeterministicPolicyMixin) gets no gradient from
    PPO's surrogate (the log-probability's gradient vanishes at the mean): only a teacher trains it."""
    if not policy_class(cfg.policy.class_name).deterministic:
        return
    if "teacher" not in algorithm_spec(cfg.algorithm.class_name).parts:
        taught = [name for name, spec in ALGORITHMS.items() if "teacher" in spec.parts]
        raise ConfigError(
            f"policy.class_name {cfg.policy.class_name} acts with its mean action, where the gradient of "
            f"PPO's surrogate is zero: algorithm.class_name {cfg.algorithm.class_name} could not train its "
            f"actor; use one with a teacher: {taught}"
        )


def check_pretraining(cfg: TrainConfig) -> None:
    """`runner.pretrain_iterations` (st_rl's TwoStageRunner): PPO on a feed-forward policy, whose
    rollouts a dataset of observations, actions, rewards and dones can stand in for."""
    runner = cfg.runner
    if runner.pretrain_iterations < 0:
        raise ConfigError(f"runner.pretrain_iterations must be at least 0, got {runner.pretrain_iterations}")
    if runner.pretrain_iterations == 0:
        return
    pretrain_settings(runner.pretrain_dataset)
    # parts the pretraining settings add themselves (the dataset's pull in the RL iterations) fit it
    parts = [p for p in active_parts(cfg) if PARTS[p].setting() != "runner.pretrain_dataset"]
    if algorithm_spec(cfg.algorithm.class_name).update != "ppo" or parts:
        plain = [n for n, s in ALGORITHMS.items() if s.update == "ppo" and not s.parts]
        raise ConfigError(
            f"runner.pretrain_iterations learns from dataset transitions, which hold none of the data of "
            f"algorithm.class_name {cfg.algorithm.class_name}'s parts {list(parts)}; it applies to {plain} "
            "without rnd_cfg / symmetry_cfg"
        )
    if policy_class(cfg.policy.class_name).recurrent:
        raise ConfigError(
            f"runner.pretrain_iterations needs a feed-forward policy (dataset trajectories carry no "
            f"memories); policy.class_name {cfg.policy.class_name} is recurrent"
        )
    if runner.num_seeds > 1 or cfg.sweep:
        raise ConfigError("runner.pretrain_iterations trains one run; drop runner.num_seeds / sweep")


def check_gae_segments(cfg: TrainConfig) -> None:
    """`algorithm.gae_horizon` cuts the rollout into whole segments; trajectory minibatches share
    them out evenly, and recurrent policies (whose minibatches are whole rollouts) take no cuts
    of their minibatches."""
    alg, steps = cfg.algorithm, cfg.runner.num_steps_per_env
    horizon = steps if alg.gae_horizon is None else alg.gae_horizon
    if horizon < 1 or steps % horizon:
        raise ConfigError(
            f"algorithm.gae_horizon={alg.gae_horizon} must be a positive divisor of "
            f"runner.num_steps_per_env={steps} (or null: the whole rollout)"
        )
    if alg.minibatch_unit != "trajectory":
        return
    if policy_class(cfg.policy.class_name).recurrent:
        if horizon != steps:
            raise ConfigError(
                f"algorithm.minibatch_unit=trajectory with a recurrent policy takes whole rollouts: "
                f"algorithm.gae_horizon={alg.gae_horizon} must be null or runner.num_steps_per_env={steps}"
            )
        return
    segments = cfg.env.num_envs * (steps // horizon)
    if segments % alg.num_mini_batches:
        raise ConfigError(
            f"algorithm.minibatch_unit=trajectory: algorithm.num_mini_batches={alg.num_mini_batches} "
            f"must divide the {segments} segments (env.num_envs * runner.num_steps_per_env / "
            f"algorithm.gae_horizon)"
        )


def check_recomputed_advantages(cfg: TrainConfig) -> None:
    """`algorithm.recompute_advantages` recomputes GAE inside each minibatch, so a minibatch must
    hold whole segments of one rollout of a feed-forward policy, with PPO's own terms."""
    alg = cfg.algorithm
    if not alg.recompute_advantages:
        return
    where = "algorithm.recompute_advantages=true"
    spec = algorithm_spec(alg.class_name)
    needs = [
        (alg.minibatch_unit == "trajectory", "algorithm.minibatch_unit=trajectory (whole GAE segments)"),
        (
            alg.normalize_advantage_per_mini_batch,
            "algorithm.normalize_advantage_per_mini_batch=true (the advantages exist per minibatch only)",
        ),
        (not policy_class(cfg.policy.class_name).recurrent, "a feed-forward policy.class_name"),
        (spec.update == "ppo" and ("teacher" not in spec.parts or alg.using_ppo), "PPO's loss terms"),
        (alg.buffer_dilation_ratio == 1, "algorithm.buffer_dilation_ratio=1 (one rollout per update)"),
        (alg.symmetry_cfg is None, "no algorithm.symmetry_cfg (mirrored samples have no segments)"),
        (cfg.runner.pretrain_iterations == 0, "runner.pretrain_iterations=0 (datasets have no segments)"),
    ]
    for ok, what in needs:
        if not ok:
            raise ConfigError(f"{where} needs {what}")


def check_choices(cfg: TrainConfig) -> None:
    """Settings that take one of a few names."""
    choices = {
        "algorithm.class_name": (cfg.algorithm.class_name, list(ALGORITHMS)),
        "policy.rnn_type": (cfg.policy.rnn_type, ["lstm", "gru"]),
        "algorithm.schedule": (cfg.algorithm.schedule, ["fixed", "adaptive"]),
        "algorithm.optimizer": (cfg.algorithm.optimizer, ["adam", "adamw", "sgd"]),
        "algorithm.timeout_bootstrap": (cfg.algorithm.timeout_bootstrap, ["final_obs", "rsl_rl", "none"]),
        "algorithm.minibatch_unit": (cfg.algorithm.minibatch_unit, ["transition", "trajectory"]),
        "algorithm.advantage_estimator": (cfg.algorithm.advantage_estimator, list(ADVANTAGE_ESTIMATORS)),
        "runner.normalizer_update": (cfg.runner.normalizer_update, ["after", "before"]),
        "policy.noise_std_type": (cfg.policy.noise_std_type, ["scalar", "log"]),
        "runner.logger": (cfg.runner.logger, ["tensorboard", "wandb", "neptune"]),
        "runner.sweep_mode": (cfg.runner.sweep_mode, ["grid", "zip"]),
        "env.auto_reset": (cfg.env.auto_reset, ["pool", "in_step"]),
    }
    for key, (value, valid) in choices.items():
        if value not in valid:
            raise ConfigError(f"unknown {key} {value!r}; valid choices: {valid}")


def check_positive(cfg: TrainConfig) -> None:
    """Counts and sizes that must be at least 1."""
    positive = {
        "env.num_envs": cfg.env.num_envs,
        "env.episode_length": cfg.env.episode_length,
        "env.action_repeat": cfg.env.action_repeat,
        "runner.num_steps_per_env": cfg.runner.num_steps_per_env,
        "runner.max_iterations": cfg.runner.max_iterations,
        "runner.log_interval": cfg.runner.log_interval,
        "runner.print_interval": cfg.runner.print_interval,
        "runner.num_eval_envs": cfg.runner.num_eval_envs,
        "algorithm.num_learning_epochs": cfg.algorithm.num_learning_epochs,
        "algorithm.num_mini_batches": cfg.algorithm.num_mini_batches,
        "runner.num_seeds": cfg.runner.num_seeds,
    }
    for key, value in positive.items():
        if value is not None and value < 1:  # env.episode_length null: the env's own
            raise ConfigError(f"{key} must be at least 1, got {value}")


def check_termination_reward(cfg: TrainConfig) -> None:
    """A number the rewards can add (nan or inf would turn every return into nan or inf)."""
    if not math.isfinite(cfg.env.termination_reward):
        raise ConfigError(
            f"env.termination_reward must be a finite number (0 is off), got {cfg.env.termination_reward}"
        )


def check_std_floor_schedule(cfg: TrainConfig) -> None:
    """`algorithm.clip_min_std_schedule` is {final, start, end}: a positive floor reached between
    two iterations, from a `clip_min_std` that is set."""
    schedule = cfg.algorithm.clip_min_std_schedule
    if schedule is None:
        return
    name = "algorithm.clip_min_std_schedule"
    keys = ("final", "start", "end")
    if not isinstance(schedule, Mapping) or set(schedule) != set(keys):
        got = sorted(schedule) if isinstance(schedule, Mapping) else schedule
        raise ConfigError(f"{name} takes exactly the keys {list(keys)} (null: a constant floor), got {got}")
    if cfg.algorithm.clip_min_std is None:
        raise ConfigError(
            f"{name} lowers algorithm.clip_min_std, which is null: set the floor it starts from"
        )
    final = schedule["final"]
    if (
        isinstance(final, bool)
        or not isinstance(final, int | float)
        or not (math.isfinite(final) and final > 0)
    ):
        raise ConfigError(f"{name}.final must be a positive number (the floor after `end`), got {final!r}")
    start, end = schedule["start"], schedule["end"]
    for key, value in (("start", start), ("end", end)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(f"{name}.{key} must be an iteration (a whole number >= 0), got {value!r}")
    if end < start:
        raise ConfigError(f"{name}: end ({end}) must not come before start ({start})")


def check_minibatch_split(cfg: TrainConfig) -> None:
    """`num_mini_batches` divides what the minibatches split: the envs (recurrent), the batch."""
    if not algorithm_spec(cfg.algorithm.class_name).minibatched:
        return  # e.g. Distillation: the update walks the whole rollout in time order
    if policy_class(cfg.policy.class_name).recurrent:
        if cfg.env.num_envs % cfg.algorithm.num_mini_batches:
            raise ConfigError(
                f"algorithm.num_mini_batches={cfg.algorithm.num_mini_batches} must divide env.num_envs="
                f"{cfg.env.num_envs}: recurrent minibatches are whole environments"
            )
        return
    batch = cfg.env.num_envs * cfg.runner.num_steps_per_env
    if batch % cfg.algorithm.num_mini_batches:
        raise ConfigError(
            f"algorithm.num_mini_batches={cfg.algorithm.num_mini_batches} must divide the batch "
            f"env.num_envs * runner.num_steps_per_env = {batch}"
        )


def validate_config(cfg: TrainConfig) -> None:
    """Checks that need more than types: choices and divisibility."""
    if cfg.env.backend not in available_backends():
        raise ConfigError(f"unknown backend {cfg.env.backend!r}; valid backends: {available_backends()}")
    if cfg.env.randomizer:
        check_function_spec(cfg.env.randomizer, "env.randomizer")
    # a ConfigError listing the Brax and Playground tasks; an entry point's env is built and checked
    task_family(cfg.env.task, cfg.env)
    check_choices(cfg)
    if cfg.runner.ckpt_manipulator:
        check_function_spec(cfg.runner.ckpt_manipulator, "runner.ckpt_manipulator")
    check_policy_stages(cfg.policy)  # class name, estimator / adaptor settings
    check_encoder_settings(cfg.policy)
    check_deterministic_policy(cfg)
    check_action_distribution(cfg, parts_with_actions(active_parts(cfg)))
    sweep_settings(cfg)  # swept fields exist, are numbers, and have lists of values
    check_pretraining(cfg)
    check_algorithm_config(cfg)  # the checks of the algorithm's parts (teacher, discriminator, ...)
    if cfg.policy.activation.lower() not in ACTIVATIONS:
        raise ConfigError(
            f"unknown policy.activation {cfg.policy.activation!r}; valid choices: {sorted(ACTIVATIONS)}"
        )
    check_positive(cfg)
    check_termination_reward(cfg)
    if not cfg.algorithm.kl_epsilon >= 0:
        raise ConfigError(
            f"algorithm.kl_epsilon must be at least 0 (0: the exact KL), got {cfg.algorithm.kl_epsilon}"
        )
    clip = cfg.runner.normalizer_clip
    if clip is not None and not (isinstance(clip, int | float) and math.isfinite(clip) and clip > 0):
        raise ConfigError(
            f"runner.normalizer_clip must be a positive number (null: unclipped, as rsl_rl), got {clip!r}"
        )
    if clip is not None and not cfg.runner.empirical_normalization:
        # the clip bounds normalised observations: without the normaliser it would do nothing
        raise ConfigError(
            f"runner.normalizer_clip={clip:g} clips normalised observations, but "
            "runner.empirical_normalization is false: set runner.normalizer_clip=null, or "
            "runner.empirical_normalization=true"
        )
    target_kl = cfg.algorithm.target_kl
    if target_kl is not None and not (math.isfinite(target_kl) and target_kl > 0):
        raise ConfigError(
            f"algorithm.target_kl must be a positive number (null: no early stop), got {target_kl}"
        )
    dual_clip, above = cfg.algorithm.dual_clip, 1.0 + cfg.algorithm.clip_param
    if dual_clip is not None and not (math.isfinite(dual_clip) and dual_clip > above):
        raise ConfigError(
            f"algorithm.dual_clip must be a number above 1 + clip_param ({above:g}; null: PPO's clip "
            f"alone), got {dual_clip}"
        )
    check_std_floor_schedule(cfg)
    check_gae_segments(cfg)
    check_recomputed_advantages(cfg)
    check_minibatch_split(cfg)
