"""Environment adapters: batched Brax/MJX envs with observation groups and auto-reset."""

from strl_jax.envs.brax_env import (
    BraxVecEnv,
    EnvState,
    StepResult,
    available_backends,
    available_tasks,
    make_brax_env,
    make_env_from_config,
)

__all__ = [
    "BraxVecEnv",
    "EnvState",
    "StepResult",
    "available_backends",
    "available_tasks",
    "make_brax_env",
    "make_env_from_config",
]
