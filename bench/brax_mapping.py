"""brax PPO settings -> strl_jax config: the one mapping shared by bench/vs_brax.py,
bench/vs_playground.py and the MuJoCo Playground presets (configs/<Task>.yaml, written by
bench/playground_settings.py).

Two layers, so that a preset can take a library's tuned hyperparameters without copying its
implementation choices:
  - `hyperparameters`: the settings both libraries name (batch layout, optimiser, GAE, clipping,
    reward scale, network sizes, episode, budget); a preset maps these;
  - `brax_implementation`: brax's choices that strl_jax can imitate (swish, its initial std, its
    value loss and per-minibatch advantage normalisation); the benchmarks' `matched` runs add
    these on top.
Standard library only, like common.py.
"""

from __future__ import annotations

import json
import math
from typing import Any

# brax 0.14.2 ppo.train defaults that published settings leave as they are, plus the network of
# brax.training.agents.ppo.networks.make_ppo_networks.
BRAX_PPO_DEFAULTS: dict[str, Any] = dict(
    clipping_epsilon=0.3,
    gae_lambda=0.95,
    vf_loss_coefficient=0.5,
    max_grad_norm=None,
    normalize_advantage=True,
    policy_hidden_layer_sizes=[32, 32, 32, 32],
    value_hidden_layer_sizes=[256, 256, 256, 256, 256],
)

# What neither layer can express (printed by the benchmarks, written into preset headers): brax's
# known implementation choices all have switches now (`BRAX_CHOICE_NAMES`).
UNMAPPED: tuple[str, ...] = ()

# brax's implementation choices that strl_jax has a switch for, by name, as config sections for
# brax kwargs `kw` (`brax_choices`). bench/sample_efficiency.py measures what each costs or gains.
BRAX_CHOICE_NAMES = (
    "gae_horizon",
    "trajectory_minibatches",
    "normalizer_before",
    "timeout_mask",
    "tanh_distribution",
    "brax_advantage",
    "recomputed_advantages",
)

# The choices `matched` (and the presets built from brax's published settings) take: those that
# won at brax's inverted_pendulum settings (BENCHMARKS.md, "Sample efficiency at brax's settings");
# the others cost steps there or changed nothing.
MATCHED_CHOICES: tuple[str, ...] = ("normalizer_before", "recomputed_advantages")


def brax_choices(
    kw: dict, names: tuple[str, ...] | list[str] = BRAX_CHOICE_NAMES
) -> dict[str, dict[str, Any]]:
    """strl_jax settings of brax's choices `names` (of `BRAX_CHOICE_NAMES`) for brax kwargs `kw`.

    gae_horizon: GAE restarts every unroll_length steps, bootstrapping from V(s_{t+unroll_length});
    trajectory_minibatches: minibatches of whole unroll_length-step segments (with gae_horizon) or
    of whole rollouts (without); normalizer_before: the normaliser takes in the rollout before the
    update; timeout_mask: time-out steps are masked out of GAE (brax's bootstrap_on_timeout=False);
    tanh_distribution: brax's tanh-squashed Gaussian with a state-dependent std; brax_advantage:
    the advantage r_t + gamma * vs_{t+1} - V(s_t) from the GAE value targets vs; recomputed_advantages:
    values, GAE and advantages recomputed in every minibatch with the current critic (needs whole
    segments per minibatch and advantages normalised per minibatch: it turns both on too).
    """
    unknown = [n for n in names if n not in BRAX_CHOICE_NAMES]
    if unknown:
        raise ValueError(f"unknown brax choices {unknown}; valid choices: {list(BRAX_CHOICE_NAMES)}")
    settings = {
        "gae_horizon": {"algorithm": {"gae_horizon": kw["unroll_length"]}},
        "trajectory_minibatches": {"algorithm": {"minibatch_unit": "trajectory"}},
        "normalizer_before": {"runner": {"normalizer_update": "before"}},
        "timeout_mask": {"algorithm": {"timeout_bootstrap": "none"}},
        "tanh_distribution": {"policy": {"distribution": "tanh_gaussian"}},
        "brax_advantage": {"algorithm": {"advantage_estimator": "brax"}},
        "recomputed_advantages": {
            "algorithm": {
                "recompute_advantages": True,
                "minibatch_unit": "trajectory",
                "normalize_advantage_per_mini_batch": True,
            }
        },
    }
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        for section, values in settings[name].items():
            out.setdefault(section, {}).update(values)
    return out


def steps_per_training_step(kw: dict) -> int:
    """Simulator steps of one brax training step (= one strl_jax iteration)."""
    return kw["batch_size"] * kw["num_minibatches"] * kw["unroll_length"] * kw["action_repeat"]


def unrolls_per_training_step(kw: dict) -> int:
    """brax collects `batch_size * num_minibatches / num_envs` unrolls in a row per training step."""
    rows = kw["batch_size"] * kw["num_minibatches"]
    if rows % kw["num_envs"]:
        raise ValueError(
            f"brax needs batch_size * num_minibatches ({rows}) divisible by num_envs ({kw['num_envs']})"
        )
    return rows // kw["num_envs"]


def hyperparameters(kw: dict) -> dict[str, dict[str, Any]]:
    """strl_jax config sections holding brax kwargs `kw`'s hyperparameters.

    One strl_jax iteration is one brax training step: all its sequential unrolls become one
    rollout of `unrolls * unroll_length` steps, so batch and minibatch sizes are brax's.
    brax's adaptive-KL learning-rate schedule is not used by the published settings: fixed.
    """
    ar = kw["action_repeat"]
    return {
        "env": {
            "num_envs": kw["num_envs"],
            "episode_length": math.ceil(kw["episode_length"] / ar),  # brax counts simulator steps
            "action_repeat": ar,
        },
        "policy": {
            "actor_hidden_dims": list(kw["policy_hidden_layer_sizes"]),
            "critic_hidden_dims": list(kw["value_hidden_layer_sizes"]),
        },
        "algorithm": {
            "num_learning_epochs": kw["num_updates_per_batch"],
            "num_mini_batches": kw["num_minibatches"],
            "clip_param": kw["clipping_epsilon"],
            "gamma": kw["discounting"],
            "lam": kw["gae_lambda"],
            "entropy_coef": kw["entropy_cost"],
            "learning_rate": kw["learning_rate"],
            "max_grad_norm": kw["max_grad_norm"],  # None: no clipping, in both
            "schedule": "fixed",
            "reward_scale": kw["reward_scaling"],
        },
        "runner": {
            "num_steps_per_env": unrolls_per_training_step(kw) * kw["unroll_length"],
            "empirical_normalization": bool(kw["normalize_observations"]),
        },
    }


def brax_implementation(kw: dict) -> dict[str, dict[str, Any]]:
    """strl_jax settings that imitate brax PPO's fixed implementation choices."""
    return {
        "policy": {
            "activation": "swish",
            # brax's initial std: softplus(0) + 0.001 of the tanh-normal scale output (pre-tanh)
            "init_noise_std": round(math.log(2.0) + 0.001, 3),
            "noise_std_type": "scalar",
        },
        "algorithm": {
            "optimizer": "adam",
            "use_clipped_value_loss": False,
            # brax: 0.5 * vf_loss_coefficient * mean((V - target)^2); strl_jax: coef * mean(...)
            "value_loss_coef": 0.5 * kw["vf_loss_coefficient"],
            "surrogate_loss_coef": 1.0,
            "normalize_advantage_per_mini_batch": bool(kw["normalize_advantage"]),
            "clip_min_std": None,
        },
    }


def matched(kw: dict, choices: tuple[str, ...] | list[str] = MATCHED_CHOICES) -> dict[str, dict[str, Any]]:
    """Hyperparameters and implementation choices together: strl_jax with brax's settings, its
    implementation and its switchable `choices` (by default the ones that win)."""
    # Imported here: this module is also loaded by the brax workers, whose venv has no strl_jax.
    from strl_jax.configs.loader import deep_merge

    return deep_merge(deep_merge(hyperparameters(kw), brax_implementation(kw)), brax_choices(kw, choices))


def override(key: str, value: Any) -> str:
    """A dotted strl_jax override; the value in JSON (which the config loader reads as YAML)."""
    if isinstance(value, str) and value.replace("_", "").isalnum():
        return f"{key}={value}"
    return f"{key}={json.dumps(value)}"


def dotted_overrides(tree: dict, prefix: str = "") -> list[str]:
    """`{algorithm: {gamma: 0.97}}` -> `["algorithm.gamma=0.97"]`; dict-valued fields (such as
    `env.playground`) are set key by key."""
    out = []
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out += dotted_overrides(value, name + ".")
        else:
            out.append(override(name, value))
    return out


def protocol_overrides(seed: int, max_iterations: int, eval_interval: int, num_eval_envs: int) -> list[str]:
    """Budget, evaluation and logging of a benchmark run: a metrics row per iteration, no
    persistent compilation cache, no periodic checkpoints (brax writes none either)."""
    return [
        override("seed", seed),
        override("runner.max_iterations", max_iterations),
        override("runner.eval_interval", eval_interval),
        override("runner.num_eval_envs", num_eval_envs),
        override("runner.log_interval", 1),
        override("runner.compile_cache", False),
        override("runner.save_interval", 0),
    ]


def mapping_lines(kw: dict, eval_every: int) -> list[str]:
    """How one brax training step lines up with one strl_jax iteration, for the benchmark logs."""
    unrolls = unrolls_per_training_step(kw)
    steps_per_env = unrolls * kw["unroll_length"]
    steps = steps_per_training_step(kw)
    mb = kw["batch_size"] * kw["unroll_length"]
    grads = kw["num_minibatches"] * kw["num_updates_per_batch"]
    return [
        f"brax: num_envs={kw['num_envs']}, batch_size={kw['batch_size']}, num_minibatches="
        f"{kw['num_minibatches']}, unroll_length={kw['unroll_length']}, num_updates_per_batch="
        f"{kw['num_updates_per_batch']}, action_repeat={kw['action_repeat']}",
        f"  -> one training step = {unrolls} sequential unrolls of {kw['unroll_length']} steps by "
        f"{kw['num_envs']} envs = {steps:,} env steps; minibatch = {kw['batch_size']} trajectories x "
        f"{kw['unroll_length']} = {mb:,} transitions; {grads} gradient steps",
        f"strl_jax: env.num_envs={kw['num_envs']}, runner.num_steps_per_env={steps_per_env} "
        f"(= {unrolls} x {kw['unroll_length']}), algorithm.num_mini_batches={kw['num_minibatches']}, "
        f"algorithm.num_learning_epochs={kw['num_updates_per_batch']}",
        f"  -> one iteration = {steps:,} env steps; minibatch = {mb:,} transitions; {grads} gradient "
        f"steps; evaluation every {eval_every} iteration(s)",
        "  differences: " + ("; ".join(UNMAPPED) or "none beyond the brax choices below"),
        "  brax choices matched leaves off (bench/sample_efficiency.py): "
        + ", ".join(n for n in BRAX_CHOICE_NAMES if n not in MATCHED_CHOICES),
    ]
