"""Environment adapters: batched Brax and MuJoCo Playground envs (registry tasks, or envs of one's
own by entry point `package.module:Name`) with observation groups and fresh-random auto-reset."""

import strl_jax.envs.quiet_imports  # noqa: F401 - first: before anything imports brax or mujoco.mjx

# isort: split
from strl_jax.envs.brax_env import available_backends, make_brax_env
from strl_jax.envs.tasks import make_env_from_config, task_family
from strl_jax.envs.vec_env import EnvState, StepResult, VecEnv

__all__ = [
    "EnvState",
    "StepResult",
    "VecEnv",
    "available_backends",
    "make_brax_env",
    "make_env_from_config",
    "task_family",
]
