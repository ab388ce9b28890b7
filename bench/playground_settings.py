"""MuJoCo Playground's published brax PPO settings: how Playground trains a task, how brax
schedules it, how it resizes to smaller machines, and the strl_jax presets they map to.

`python bench/playground_settings.py [TASK ...]` writes configs/<Task>.yaml for the tasks (default:
every locomotion and dm_control suite task) from the installed Playground's settings;
tests/test_playground_presets.py checks the files against Playground and against this writer.
bench/vs_playground.py runs the benchmark on these settings.
"""

from __future__ import annotations

import contextlib
import io
import math
import sys
import textwrap
from pathlib import Path
from typing import Any

from brax_mapping import (
    BRAX_PPO_DEFAULTS,
    hyperparameters,
    steps_per_training_step,
    unrolls_per_training_step,
)
from common import REPO_DIR

PLAYGROUND_VERSION = "0.2.0"
NUM_EVAL_ENVS = 128  # train_jax_ppo.py's default (ppo_params.get("num_eval_envs", 128))
FAMILIES = ("locomotion", "dm_control_suite", "manipulation")


# ---- Playground's published settings -------------------------------------------------------
def task_family(task: str) -> str:
    """`locomotion`, `dm_control_suite` or `manipulation`: which params module publishes the task."""
    import mujoco_playground

    for family in FAMILIES:
        if task in getattr(mujoco_playground, family).ALL_ENVS:
            return family
    raise SystemExit(f"error: {task!r} is not a MuJoCo Playground task")


def published_settings(task: str) -> dict[str, Any]:
    """brax ppo.train / make_ppo_networks kwargs as Playground trains `task`: its brax_ppo_config
    (network_factory flattened in) over brax's defaults, plus train_jax_ppo.py's eval env count."""
    import importlib

    family = task_family(task)
    params = importlib.import_module(f"mujoco_playground.config.{family}_params")
    rl = params.brax_ppo_config(task, "jax").to_dict()
    network = rl.pop("network_factory", {})
    kw = {**BRAX_PPO_DEFAULTS, "num_eval_envs": NUM_EVAL_ENVS, **rl, **network}
    for key in ("policy_hidden_layer_sizes", "value_hidden_layer_sizes"):
        kw[key] = list(kw[key])
    kw.setdefault("num_resets_per_eval", 0)
    kw.setdefault("policy_obs_key", "state")
    kw.setdefault("value_obs_key", "state")
    return kw


def brax_schedule(kw: dict) -> dict[str, int]:
    """What ppo.train makes of `num_timesteps` and `num_evals`: per evaluation period
    `max(num_resets_per_eval, 1)` epochs of `ceil(num_timesteps / (periods * steps * resets))`
    training steps, every env reset after each epoch when num_resets_per_eval > 0."""
    periods = max(kw["num_evals"] - 1, 1)
    resets = max(kw["num_resets_per_eval"], 1)
    epoch = math.ceil(kw["num_timesteps"] / (periods * steps_per_training_step(kw) * resets))
    per_env = unrolls_per_training_step(kw) * kw["unroll_length"] * kw["action_repeat"]
    return {
        "periods": periods,
        "epoch": epoch,
        "eval_every": epoch * resets,
        "training_steps": periods * epoch * resets,
        "reset_every_env_steps": epoch * per_env if kw["num_resets_per_eval"] > 0 else 0,
    }


def resized_resets(pub: dict, kw: dict, training_steps: int, periods: int) -> int:
    """brax's num_resets_per_eval for a resized run: the count (at most Playground's) whose epochs
    come closest to Playground's interval between forced resets of every env, in env steps per env
    (ties: the smaller budget, then fewer resets).

    Keeping the published count at a smaller budget would reset every env far more often than
    Playground's runs do (Go1 at 1.3M steps: every 60 steps instead of every 280).
    """
    if pub["num_resets_per_eval"] <= 0:
        return pub["num_resets_per_eval"]
    per_env = unrolls_per_training_step(kw) * kw["unroll_length"] * kw["action_repeat"]
    want = brax_schedule(pub)["reset_every_env_steps"] / per_env

    def cost(resets: int) -> tuple[float, int, int]:
        epoch = math.ceil(training_steps / (periods * resets))
        return abs(epoch - want), periods * resets * epoch, resets

    return min(range(1, pub["num_resets_per_eval"] + 1), key=cost)


def resize(pub: dict, num_envs: int) -> dict:
    """Playground's settings at `num_envs`: batch_size scaled with it, so that a training step keeps
    the published unrolls per env, minibatch count and updates (minibatches get smaller)."""
    rows = pub["batch_size"] * num_envs
    if rows % pub["num_envs"]:
        unit = pub["num_envs"] // math.gcd(pub["num_envs"], pub["batch_size"])
        raise SystemExit(
            f"error: num_envs must be a multiple of {unit} to keep Playground's batch layout "
            f"(batch_size {pub['batch_size']} per {pub['num_envs']} envs); or set --brax-set batch_size=..."
        )
    return {**pub, "num_envs": num_envs, "batch_size": rows // pub["num_envs"]}


def bench_settings(
    pub: dict,
    num_envs: int | None,
    budget: int | None,
    evals: int | None,
    num_eval_envs: int,
    deterministic_eval: bool,
    extra: dict,
) -> tuple[dict, dict]:
    """brax ppo.train kwargs for one benchmark run, and their schedule.

    The budget is rounded up to whole evaluation periods (as brax does), so that every library
    evaluates at the same env-step counts and trains exactly `num_timesteps`.
    """
    kw = resize(pub, num_envs) if num_envs and num_envs != pub["num_envs"] else dict(pub)
    kw.update(extra)
    kw["num_evals"] = evals or pub["num_evals"]
    kw["num_timesteps"] = budget or pub["num_timesteps"]
    published = not num_envs and not budget and not evals and not extra
    if not published and "num_resets_per_eval" not in extra:
        periods = max(kw["num_evals"] - 1, 1)
        steps = math.ceil(kw["num_timesteps"] / steps_per_training_step(kw))
        kw["num_resets_per_eval"] = resized_resets(pub, kw, steps, periods)
    schedule = brax_schedule(kw)
    kw["num_timesteps"] = schedule["training_steps"] * steps_per_training_step(kw)
    kw["num_eval_envs"] = num_eval_envs
    kw["deterministic_eval"] = deterministic_eval
    return kw, schedule


# ---- observation groups --------------------------------------------------------------------
def observation_keys(task: str, overrides: dict) -> list[str] | None:
    """The keys of the task's observation dict (None: one array), from the env's reset shape."""
    import jax
    from mujoco_playground import registry

    from strl_jax.envs.menagerie import use_offline_menagerie

    use_offline_menagerie(task)
    with contextlib.redirect_stdout(io.StringIO()):
        env = registry.load(task, config_overrides=overrides)
    obs = jax.eval_shape(env.reset, jax.random.PRNGKey(0)).obs
    return list(obs) if isinstance(obs, dict) else None


def obs_groups(task: str, kw: dict, overrides: dict) -> dict:
    """`env.obs_groups` that gives strl_jax's policy and critic what brax's policy_obs_key and
    value_obs_key name. strl_jax's default is `state` -> policy, `privileged_state` (where the
    task has it, else the policy's input) -> critic, so only other choices need a key."""
    if kw["policy_obs_key"] != "state":
        raise SystemExit(f"error: {task}: policy_obs_key {kw['policy_obs_key']!r} has no mapping")
    if kw["value_obs_key"] == "privileged_state" or task_family(task) == "dm_control_suite":
        return {}  # the suite's observation is one array that every group sees
    keys = observation_keys(task, overrides)
    if keys is not None and "privileged_state" in keys:
        return {"critic": kw["value_obs_key"]}
    return {}


# ---- presets -------------------------------------------------------------------------------
def preset_tree(task: str, pub: dict, groups: dict, randomized: bool) -> dict:
    """configs/<Task>.yaml: Playground's hyperparameters under strl_jax's names and its budget."""
    tree = hyperparameters(pub)
    steps = steps_per_training_step(pub)
    iterations = math.ceil(pub["num_timesteps"] / steps)
    env = {"task": task, **tree["env"], "playground": {"impl": "jax"}, "domain_randomization": randomized}
    if groups:
        env["obs_groups"] = groups
    runner = {
        **tree["runner"],
        "max_iterations": iterations,
        # num_evals counts the evaluation before training, which strl_jax does not run
        "eval_interval": math.ceil(iterations / max(pub["num_evals"] - 1, 1)),
        "num_eval_envs": pub["num_eval_envs"],
    }
    return {"env": env, "policy": tree["policy"], "algorithm": tree["algorithm"], "runner": runner}


def yaml_value(value: Any) -> str:
    """One YAML scalar or flow collection, as PyYAML writes it."""
    import yaml

    text = yaml.safe_dump(value, default_flow_style=True, width=1000).strip()
    return text.removesuffix("\n...").removesuffix("...").strip()


def preset_header(task: str, pub: dict, groups: dict, randomized: bool) -> list[str]:
    """Paragraphs: where the numbers come from and what strl_jax does differently."""
    family = task_family(task)
    steps = steps_per_training_step(pub)
    unrolls = unrolls_per_training_step(pub)
    iterations = math.ceil(pub["num_timesteps"] / steps)
    schedule = brax_schedule(pub)
    default_critic = "privileged_state" if pub["value_obs_key"] == "privileged_state" else "state"
    critic = groups.get("critic", default_critic)
    unit = pub["num_envs"] // math.gcd(pub["num_envs"], pub["batch_size"])
    randomiser = (
        "the task's domain randomiser (as Playground's locomotion notebook trains; train_jax_ppo.py "
        "takes --domain_randomization)"
        if randomized
        else "no domain randomiser"
    )
    out = [
        f"MuJoCo Playground {task} with the brax PPO settings Playground {PLAYGROUND_VERSION} publishes "
        f"for it (mujoco_playground/config/{family}_params.py, brax_ppo_config; brax 0.14.2's ppo.train "
        "defaults where it sets none) under strl_jax's names. Written by "
        "`python bench/playground_settings.py` (mapping: bench/brax_mapping.py); "
        "tests/test_playground_presets.py checks it.",
        f"GPU sizes: an iteration is {pub['num_envs']} envs x {unrolls * pub['unroll_length']} steps = "
        f"{steps:,} env steps ({pub['num_minibatches']} minibatches of {pub['batch_size']} x "
        f"{pub['unroll_length']} transitions, {pub['num_updates_per_batch']} epochs); {iterations} "
        f"iterations cover num_timesteps {pub['num_timesteps']:,}; num_evals {pub['num_evals']} (one "
        f"before training) gives an evaluation every {math.ceil(iterations / schedule['periods'])} "
        f"iterations. Smaller machines: a lower env.num_envs (a multiple of {unit} keeps brax's "
        "layout with smaller minibatches) and runner.max_iterations.",
        f"Policy input `{pub['policy_obs_key']}`, critic input `{critic}` (policy_obs_key, "
        f"value_obs_key); {randomiser}.",
        "Not mapped: brax's network and loss (swish, a tanh-squashed Gaussian with a state-dependent "
        f"std, value loss {0.5 * pub['vf_loss_coefficient']} x squared error unclipped, advantages "
        "normalised per minibatch); strl_jax keeps its own (ELU, Gaussian + action clipping), the "
        "`matched` runs of bench/vs_playground.py imitate brax's. "
        f"Playground evaluates the sampled policy on {pub['num_eval_envs']} envs, strl_jax the mean "
        "action. Unlike brax, strl_jax runs GAE over the whole rollout, shuffles transitions into "
        "minibatches and bootstraps time-outs from V(final observation).",
    ]
    if pub["num_resets_per_eval"] > 0:
        note = (
            f"num_resets_per_eval {pub['num_resets_per_eval']}: brax resets every env every "
            f"{schedule['reset_every_env_steps']} steps, strl_jax at episode ends only."
        )
        if schedule["training_steps"] != iterations:
            note += (
                " brax rounds num_timesteps up to whole evaluation periods of num_resets_per_eval "
                f"epochs and trains {schedule['training_steps']} training steps "
                f"({schedule['training_steps'] * steps:,} env steps)."
            )
        out.append(note)
    if task == "PendulumSwingup":
        out.append(
            "dm_control_suite_params.py sets action_repeat 4 and 4 epochs for 'PendulumSwingUp', a name "
            "no task has: Playground trains PendulumSwingup with the suite's defaults, as here."
        )
    return out


def preset_yaml(paragraphs: list[str], tree: dict) -> str:
    """A preset file: the paragraphs as a wrapped comment header, then one line per setting."""
    out = [f"# {line}" for para in paragraphs for line in textwrap.wrap(para, 98)]
    for section, values in tree.items():
        out.append(f"{section}:")
        out += [f"  {key}: {yaml_value(value)}" for key, value in values.items()]
    return "\n".join(out) + "\n"


def preset_text(task: str, pub: dict, groups: dict, randomized: bool) -> str:
    """The YAML preset with its header, in the style of configs/ant.yaml."""
    header = preset_header(task, pub, groups, randomized)
    return preset_yaml(header, preset_tree(task, pub, groups, randomized))


def has_randomizer(task: str) -> bool:
    from mujoco_playground import registry

    with contextlib.redirect_stdout(io.StringIO()):
        return registry.get_domain_randomizer(task) is not None


def preset_tasks() -> list[str]:
    """The locomotion and dm_control suite tasks (Playground publishes PPO settings for all)."""
    import mujoco_playground

    return list(mujoco_playground.locomotion.ALL_ENVS) + list(mujoco_playground.dm_control_suite.ALL_ENVS)


def write_presets(tasks: list[str], folder: Path) -> list[Path]:
    """configs/<Task>.yaml for `tasks` from the installed Playground's settings."""
    from importlib.metadata import version

    if version("playground") != PLAYGROUND_VERSION:
        raise SystemExit(
            f"error: the presets map Playground {PLAYGROUND_VERSION}, found {version('playground')}"
        )
    written = []
    for task in tasks:
        pub = published_settings(task)
        path = folder / f"{task}.yaml"
        groups = obs_groups(task, pub, {"impl": "jax"})
        path.write_text(preset_text(task, pub, groups, has_randomizer(task)))
        written.append(path)
        print(f"wrote {path}", flush=True)
    return written


def main(argv: list[str]) -> int:
    tasks = argv or preset_tasks()
    write_presets(tasks, REPO_DIR / "configs")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
