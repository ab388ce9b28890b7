"""brax's published PPO settings as strl_jax presets at GPU sizes: configs/<task>_gpu.yaml.

`python bench/brax_presets.py [TASK ...]` writes the presets (default: ant, halfcheetah, hopper,
humanoid, walker2d) from bench/vs_brax.py's `BRAX_PUBLISHED` through bench/brax_mapping.py's
`hyperparameters`; tests/test_gpu_presets.py checks the files against this writer.
bench/learning_curves.py runs them beside brax.

An iteration is one brax training step (the same env steps, minibatches and updates) at
`GPU_NUM_ENVS` envs: where brax publishes fewer envs, the same batch takes fewer sequential
unrolls per env, which a GPU runs in less time. `implementation_choices` is the one place where
strl_jax options (distribution, GAE horizon, minibatch unit, ...) join every GPU preset.
Standard library only at module level (bench/learning_curves.py loads it in brax's venv).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

from brax_mapping import (
    MATCHED_CHOICES,
    brax_choices,
    hyperparameters,
    steps_per_training_step,
    unrolls_per_training_step,
)
from common import REPO_DIR
from playground_settings import preset_yaml
from vs_brax import BRAX_DEFAULTS, BRAX_PUBLISHED

TASKS = ("ant", "halfcheetah", "hopper", "humanoid", "walker2d")
GPU_NUM_ENVS = 4096
NUM_EVAL_ENVS = 128  # brax's default num_eval_envs
# brax publishes PPO settings for ant, halfcheetah and humanoid; its notebook trains hopper and
# walker2d with SAC, so these take inverted_pendulum's PPO settings (as bench/vs_brax.py does for
# hopper) with the 50M-step budget and the 20 evaluations of brax's other locomotion settings.
NO_PPO_SETTINGS = ("hopper", "walker2d")
NO_PPO_BUDGET = dict(num_timesteps=50_000_000, num_evals=20)
# CPU sizes (README): fewer envs with the same rollout length, a ~5M-step budget, 10 evaluations.
CPU_NUM_ENVS = 256
CPU_BUDGET = 5_000_000
CPU_EVALS = 10
CPU_NUM_EVAL_ENVS = 16


def implementation_choices(kw: dict) -> dict[str, dict[str, Any]]:
    """strl_jax implementation options that every GPU preset takes, as config sections (brax
    kwargs `kw` at hand): brax's switchable choices that won bench/sample_efficiency.py's study
    (`MATCHED_CHOICES`: the normaliser takes in the rollout before the update; values, GAE and
    advantages are recomputed in every minibatch of whole rollouts with the current critic)."""
    return brax_choices(kw, MATCHED_CHOICES)


def peer_settings(task: str) -> dict[str, Any]:
    """brax ppo.train kwargs for `task` as brax publishes them (over its defaults), budget included."""
    if task not in TASKS:
        raise SystemExit(f"error: no GPU preset for task {task!r}; tasks: {list(TASKS)}")
    kw = {**BRAX_DEFAULTS, **BRAX_PUBLISHED[task]}
    if task in NO_PPO_SETTINGS:
        kw.update(NO_PPO_BUDGET)
    return kw


def gpu_settings(kw: dict) -> dict[str, Any]:
    """brax kwargs at `GPU_NUM_ENVS` envs (at least the published count) with the same batch: the
    same env steps, minibatches and updates per training step in fewer unrolls per env."""
    gpu = {**kw, "num_envs": max(GPU_NUM_ENVS, kw["num_envs"])}
    unrolls_per_training_step(gpu)  # raises where the batch does not split over the envs
    return gpu


def preset_tree(task: str) -> dict[str, dict[str, Any]]:
    """configs/<task>_gpu.yaml's settings."""
    from strl_jax.configs.loader import deep_merge, load_preset  # the brax venv has no strl_jax

    kw = gpu_settings(peer_settings(task))
    tree = deep_merge(hyperparameters(kw), implementation_choices(kw))
    iterations = math.ceil(kw["num_timesteps"] / steps_per_training_step(kw))
    runner = {
        **tree["runner"],
        "max_iterations": iterations,
        # num_evals counts the evaluation before training, which strl_jax does not run
        "eval_interval": math.ceil(iterations / max(kw["num_evals"] - 1, 1)),
        "num_eval_envs": NUM_EVAL_ENVS,
    }
    # the physics backend of the task's CPU preset (configs/<task>.yaml)
    env = {"task": task, "backend": load_preset(task)["env"]["backend"], **tree["env"]}
    return {**tree, "env": env, "runner": runner}


def cpu_overrides(task: str) -> list[str]:
    """`python -m strl_jax.train` arguments that size the preset for a CPU (README's table)."""
    kw = gpu_settings(peer_settings(task))
    steps = CPU_NUM_ENVS * hyperparameters(kw)["runner"]["num_steps_per_env"] * kw["action_repeat"]
    iterations = math.ceil(CPU_BUDGET / steps)
    return [
        f"--num_envs {CPU_NUM_ENVS}",
        f"--max_iterations {iterations}",
        f"runner.eval_interval={math.ceil(iterations / CPU_EVALS)}",
        f"runner.num_eval_envs={CPU_NUM_EVAL_ENVS}",
    ]


def preset_header(task: str) -> list[str]:
    """Paragraphs: where the numbers come from, what an iteration is, the CPU size, what differs."""
    pub = peer_settings(task)
    kw = gpu_settings(pub)
    steps = steps_per_training_step(kw)
    per_env = unrolls_per_training_step(kw) * kw["unroll_length"]
    tree = preset_tree(task)
    iterations, every = tree["runner"]["max_iterations"], tree["runner"]["eval_interval"]
    if task in NO_PPO_SETTINGS:
        origin = (
            f"Brax {task} with PPO settings based on brax 0.14.2's published ones: brax's training "
            f"notebook trains {task} with SAC, so these are its inverted_pendulum PPO settings (as "
            "bench/vs_brax.py uses for hopper) with the budget and evaluation count of its "
            "ant / humanoid / halfcheetah settings"
        )
    else:
        origin = f"Brax {task} with brax 0.14.2's published PPO settings for it (its training notebook)"
    out = [
        f"{origin}, ppo.train's defaults where they set none, under strl_jax's names; sized for a GPU. "
        "Written by `python bench/brax_presets.py` (mapping: bench/brax_mapping.py); "
        "tests/test_gpu_presets.py checks it.",
        f"An iteration is one brax training step: {kw['num_envs']} envs x {per_env} steps = {steps:,} "
        f"env steps ({kw['num_minibatches']} minibatches of {kw['batch_size'] * kw['unroll_length']:,} "
        f"transitions, {kw['num_updates_per_batch']} epochs); {iterations} iterations cover "
        f"num_timesteps {kw['num_timesteps']:,}; num_evals {kw['num_evals']} (one before training) "
        f"gives an evaluation every {every} iterations on {NUM_EVAL_ENVS} envs.",
    ]
    if kw["num_envs"] != pub["num_envs"]:
        out.append(
            f"brax publishes {pub['num_envs']} envs ({unrolls_per_training_step(pub)} unrolls of "
            f"{pub['unroll_length']} steps per training step); {kw['num_envs']} envs take the same "
            f"batch in {unrolls_per_training_step(kw)}: the same env steps and updates per iteration, "
            "fewer sequential steps."
        )
    out += [
        f"CPU size: `{' '.join(cpu_overrides(task))}` (the same rollout length, smaller minibatches, "
        f"about {CPU_BUDGET / 1e6:.0f}M env steps).",
        "Not mapped: brax's network and loss (swish, value loss "
        f"{0.5 * pub['vf_loss_coefficient']} x squared error unclipped, advantages normalised per "
        "minibatch) and its implementation choices (bench/brax_mapping.py's UNMAPPED); strl_jax keeps "
        "its own where implementation_choices (bench/brax_presets.py) sets none; the `matched` runs of "
        "bench/vs_brax.py imitate brax's.",
    ]
    return out


def preset_text(task: str) -> str:
    """The YAML preset with its header."""
    return preset_yaml(preset_header(task), preset_tree(task))


def preset_name(task: str) -> str:
    return f"{task}_gpu"


def write_presets(tasks: list[str], folder: Path) -> list[Path]:
    """configs/<task>_gpu.yaml for `tasks`."""
    written = []
    for task in tasks:
        path = folder / f"{preset_name(task)}.yaml"
        path.write_text(preset_text(task))
        written.append(path)
        print(f"wrote {path}", flush=True)
    return written


def main(argv: list[str]) -> int:
    write_presets(argv or list(TASKS), REPO_DIR / "configs")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
