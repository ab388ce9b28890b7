"""rsl_rl / IsaacLab / legged_gym runner configs read into strl_jax's nested config mapping.

Users arrive with an IsaacLab `agent.yaml` (the dumped `RslRlOnPolicyRunnerCfg`, `policy:` block),
an rsl_rl `train_cfg` (5.x: `actor:` / `critic:` model blocks) or a legged_gym `train_cfg` (a
nested `runner:`). `from_rsl_rl_config` turns one into the mapping that `deep_merge` /
`config_from_dict` take, and refuses, all at once, every key that would switch on something
strl_jax does not have. The model blocks are read in `configs.from_rsl_rl_models`; the way back
(strl_jax -> rsl_rl's `train_cfg`) is `configs.to_rsl_rl`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from strl_jax.agents.algorithms import ALGORITHMS
from strl_jax.configs.from_rsl_rl_models import (
    OFF_ONLY,
    is_off,
    join_path,
    map_models,
    map_policy_block,
    merge,
    off_problem,
    short_class,
)
from strl_jax.configs.schema import AlgorithmConfig, RunnerConfig, TrainConfig
from strl_jax.errors import ConfigError

RUNNER_CLASSES = ("OnPolicyRunner", "DistillationRunner")
# rsl_rl's defaults of the resume bookkeeping keys: at these values they load nothing
LOAD_DEFAULTS = {"load_run": ".*", "load_checkpoint": "model_.*.pt"}
# rsl_rl 5.x's update where st_rl's differs, set for every rsl_rl config (the file may still set
# them): the exact KL for the adaptive schedule, and the actor's and the critic's gradients
# clipped separately
RSL_RL_UPDATE = {"kl_epsilon": 0.0, "clip_grad_per_network": True}
STRL_JAX_SECTIONS = frozenset(f.name for f in dataclasses.fields(TrainConfig))
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
# rsl_rl / IsaacLab env observation group -> the MuJoCo Playground observation key strl_jax reads
ENV_GROUP_KEYS = {"policy": "state", "actor": "state", "critic": "privileged_state"}
# rsl_rl observation set -> strl_jax group
OBS_SET_GROUPS = {"actor": "policy", "policy": "policy", "student": "policy", "critic": "critic"}
DEFAULT_SET_KEYS = {"policy": ["state"], "critic": ["privileged_state"]}  # strl_jax's own default
# how an unset (dataclasses.MISSING) IsaacLab field is dumped: `actor: {}`, `empirical_normalization: {}`
MISSING_MARKERS = (None, {}, "???")


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
    if isinstance(value, dict) and short_class(value.get("class_name")) in writers:
        name = writers[short_class(value["class_name"])]
        out: dict[str, Any] = {"logger": name}
        extra = sorted(set(value) - {"class_name", "project_name"})
        if value.get("project_name") is not None:
            out[f"{name}_project"] = value["project_name"]
        return out, [f"{join_path(path, k)}: unknown log writer setting" for k in extra]
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
    if is_off(value):
        return {}, []
    if not isinstance(value, dict):
        return {}, [f"{path}: must be a mapping {{observation set: [groups]}}, got {value!r}"]
    groups: dict[str, list[str]] = {}
    out: dict[str, Any] = {}
    problems: list[str] = []
    for obs_set, env_groups in value.items():
        where = join_path(path, str(obs_set))
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


def _map_algorithm(block: Any, path: str) -> tuple[dict, list[str]]:
    """rsl_rl's PPO / Distillation block; strl_jax's other algorithm names and fields pass through."""
    if not isinstance(block, dict):
        return {}, [f"{path}: must be a mapping, got {block!r}"]
    out: dict[str, Any] = {}
    problems: list[str] = []
    for key, value in block.items():
        where = join_path(path, key)
        if key == "class_name":
            name = short_class(value)
            if name in ALGORITHMS:
                out["class_name"] = name
            else:
                problems.append(
                    f"{where}: {value!r} is not an algorithm strl_jax has; valid choices: {list(ALGORITHMS)}"
                )
        elif key in OFF_ONLY:
            if not is_off(value):
                problems.append(off_problem(where, key))
        elif key in ALGORITHM_NO_EFFECT:
            continue
        elif key == "rnd_cfg":
            if not is_off(value):
                out[key] = value  # checked as the RND part's section
        elif key == "symmetry_cfg":
            if not is_off(value):
                out[key] = value  # checked as the symmetry part's section; a jnp function
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
    return merge(out, update), []


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
        if short_class(value) in RUNNER_CLASSES:
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
        return {}, ([] if is_off(value) else [off_problem(key, key)])
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
            mapped, bad = map_policy_block(value, key)
        elif key == "algorithm":
            mapped, bad = _map_algorithm(value, key)
        else:
            mapped, bad = _map_top_level(key, value)
        out, problems = merge(out, mapped), problems + bad
    mapped, bad = map_models(models)
    out, problems = merge(out, mapped), problems + bad
    out, bad = _map_rnd_state(data, out)
    problems += bad
    out = merge({"algorithm": dict(RSL_RL_UPDATE)}, out)  # the file's own values win
    top_norm = data.get("empirical_normalization")
    if not _unset(top_norm) and "empirical_normalization" not in out.get("runner", {}):
        out = merge(out, {"runner": {"empirical_normalization": top_norm}})
    if problems:
        listed = "\n  ".join(_with_origin(p, origin) for p in problems)
        raise ConfigError(f"rsl_rl config: {len(problems)} setting(s) strl_jax cannot use:\n  {listed}")
    return out
