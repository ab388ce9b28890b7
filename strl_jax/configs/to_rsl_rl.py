"""strl_jax's `TrainConfig` written as rsl_rl's `train_cfg`.

`to_rsl_rl_train_cfg` writes the `train_cfg` that the installed rsl_rl's `OnPolicyRunner` builds
the same network from (an export check, `strl_jax.export`); the way in is `configs.from_rsl_rl`.
"""

from __future__ import annotations

import math
from typing import Any

from strl_jax.agents.rnd import OPTION as RND_OPTION
from strl_jax.agents.rnd import RndSettings
from strl_jax.config_sections import read_section, section_mapping
from strl_jax.configs.from_rsl_rl_models import GAUSSIAN
from strl_jax.configs.schema import AlgorithmConfig, PolicyConfig, TrainConfig
from strl_jax.errors import ConfigError

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
    """rsl_rl's `rnd_cfg`: strl_jax's section with every option spelt out (the same keys; the
    group goes to `obs_groups.rnd_state` instead)."""
    if alg.rnd_cfg is None:
        return None
    rnd = section_mapping(read_section(RndSettings, alg.rnd_cfg, RND_OPTION))
    del rnd["obs_group"]
    return rnd | {"activation": rsl_rl_activation(rnd["activation"])}


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
        obs_groups["rnd_state"] = [read_section(RndSettings, cfg.algorithm.rnd_cfg, RND_OPTION).obs_group]
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
