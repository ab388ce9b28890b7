"""Run folders for tests that need a policy's checkpoint but not its training."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax

from strl_jax.checkpoints.orbax_checkpoints import close_manager, open_manager, save_checkpoint
from strl_jax.configs.loader import config_to_dict
from strl_jax.inference import init_policy_state


def random_policy_run(cfg: Any, env: Any, path: Path) -> Path:
    """`path`, a run folder holding one checkpoint of `cfg`'s policy with random weights for `env`
    (no training): what `load_policy`, `export`, `deploy` and a student's teacher read."""
    state = random_policy_state(cfg, env)
    manager = open_manager(path / "checkpoints")
    save_checkpoint(manager, 1, {"train_state": state}, {"config": config_to_dict(cfg)})
    close_manager(manager)
    return path


def random_policy_state(cfg: Any, env: Any) -> Any:
    """`cfg`'s policy params and normalisers for `env`, freshly initialised (PRNGKey(0))."""
    return init_policy_state(
        jax.random.PRNGKey(0),
        cfg,
        env.observation_shapes(),
        env.action_size,
        env.components,
        env.component_shapes,
    )
