"""Run configuration: typed dataclasses, YAML presets and command-line overrides."""

from strl_jax.configs.loader import (
    ConfigError,
    available_presets,
    config_from_dict,
    config_to_dict,
    resolve_config,
)
from strl_jax.configs.schema import (
    AlgorithmConfig,
    EnvConfig,
    PolicyConfig,
    RunnerConfig,
    TeacherPolicyConfig,
    TrainConfig,
)

__all__ = [
    "AlgorithmConfig",
    "ConfigError",
    "EnvConfig",
    "PolicyConfig",
    "RunnerConfig",
    "TeacherPolicyConfig",
    "TrainConfig",
    "available_presets",
    "config_from_dict",
    "config_to_dict",
    "resolve_config",
]
