"""Mutex policies from finished runs: the sub-policies loaded from their run folders, the mutex
config read from YAML, and the env the switch executes in.

The switch itself (selection, per-sub-policy inputs, combination, memories) is
`strl_jax.mutex`, which receives the loaded `SubPolicy`s; this module does the loading:
each sub-policy is a finished strl_jax run rebuilt from its own stored config and checkpoint
(`inference.load_policy`), its action scale read from its run's env config. `play`, `collect` and
`export` load a mutex config through `load_mutex_run`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from strl_jax.configs.loader import config_from_dict, config_to_dict, deep_merge
from strl_jax.envs.skill_selection import skill_schedule, with_skill_selection
from strl_jax.envs.tasks import default_task_config, make_env_from_config, task_family
from strl_jax.errors import ConfigError
from strl_jax.inference import load_policy
from strl_jax.mutex import Layout, MutexConfig, MutexPolicy, SubPolicy, mutex_config, mutex_policy


def run_action_scale(cfg: Any) -> float | tuple[float, ...]:
    """The action scale a run trained with (st_rl `control.action_scale`): its Playground task's
    `action_scale` (overridden in `env.playground` or the task default), 1.0 for Brax tasks."""
    value = cfg.env.playground.get("action_scale")
    if value is None:
        if task_family(cfg.env.task, cfg.env) != "playground":
            return 1.0
        value = default_task_config(cfg.env).get("action_scale", 1.0)
    return tuple(float(v) for v in value) if isinstance(value, list | tuple) else float(value)


def load_sub_policies(paths: Sequence[str], checkpoints: Sequence[int | None]) -> list[SubPolicy]:
    """Each run rebuilt from its own stored config and checkpoint."""
    subs = []
    for path, checkpoint in zip(paths, checkpoints, strict=True):
        loaded = load_policy(path, checkpoint)
        layout = loaded.env.components.get("policy")
        subs.append(
            SubPolicy(
                actor=loaded.actor,
                obs_size=loaded.observation_size,
                params=loaded.params,
                normalizers=loaded.normalizers,
                layout=tuple(layout) if layout else None,
                action_scale=run_action_scale(loaded.cfg),
                run_cfg=loaded.cfg,
            )
        )
    return subs


def read_source(source: Mapping[str, Any] | str | Path) -> Mapping[str, Any]:
    if isinstance(source, Mapping):
        return source
    data = yaml.safe_load(Path(source).read_text())
    if not isinstance(data, Mapping):
        raise ConfigError(f"{str(source)!r} holds no mutex config (a mapping with a policy section)")
    return data


def load_subs(cfg: MutexConfig) -> list[SubPolicy]:
    paths = list(cfg.sub_policy_paths)
    if cfg.jump_down_policy_path is not None:
        paths.append(cfg.jump_down_policy_path)
    checkpoints = list(cfg.checkpoints) if cfg.checkpoints is not None else [None] * len(paths)
    if len(checkpoints) != len(paths):
        raise ConfigError(f"checkpoints needs one entry per sub-policy ({len(paths)}): {checkpoints}")
    return load_sub_policies(paths, checkpoints)


def load_mutex_policy(source: Mapping[str, Any] | str | Path, layout: Layout | None = None) -> MutexPolicy:
    """A mutex policy from a config dict, or a YAML file, naming the sub-policy runs
    (`policy.class_name` one of `MUTEX_CLASSES`, `policy.sub_policy_paths`, ...)."""
    cfg = mutex_config(read_source(source))
    return mutex_policy(cfg, load_subs(cfg), layout)


@dataclasses.dataclass(frozen=True)
class MutexRun:
    """A mutex policy with the env it executes in and that env's run config."""

    policy: MutexPolicy
    env: Any  # VecEnv of one env; `env.replace(num_envs=n)` for more
    cfg: Any  # TrainConfig: the first sub-policy's, with the mutex config's `env` section over it


def load_mutex_run(source: Mapping[str, Any] | str | Path) -> MutexRun:
    """A mutex config's policy and executing env: the first sub-policy's run config with the
    config's own `env` section merged over it; the policy reads that env's `policy` group.

    A `skill_selection` section (`strl_jax.envs.skill_selection`: `segment_steps`, optional
    per-skill `commands`, `component`, `offset`) appends a scheduled selection component to that
    group, by default named and laid out as the mutex reads it (`selection_component`,
    `selection_offset`)."""
    data = read_source(source)
    cfg = mutex_config(data)
    subs = load_subs(cfg)
    run_cfg = config_from_dict(
        deep_merge(config_to_dict(subs[0].run_cfg), {"env": dict(data.get("env", {}))})
    )
    env = make_env_from_config(run_cfg.env, num_envs=1)
    if data.get("skill_selection") is not None:
        schedule = skill_schedule(
            dict(data["skill_selection"]),
            len(cfg.sub_policy_paths),
            component=cfg.selection_component,
            offset=cfg.selection_offset,
        )
        env = with_skill_selection(env, schedule)
    layout = None if cfg.obs_segments is not None else env.components.get("policy")
    policy = mutex_policy(cfg, subs, tuple(layout) if layout else None)
    if policy.observation_size != env.observation_shapes()["policy"][0]:
        raise ConfigError(
            f"the mutex reads {policy.observation_size} observation entries; the env's policy group "
            f"has {env.observation_shapes()['policy'][0]}: check obs_segments against env.obs_groups"
        )
    return MutexRun(policy=policy, env=env, cfg=run_cfg)
